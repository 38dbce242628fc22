"""tokenize: ``silver.documents_clean`` → ``gold.token_sequences``.

Documents are spread over ``tokenize.pack_groups`` groups by a hash of their doc_id (xxhash64,
stable across Spark versions), sorted by doc_id inside each group and packed there by
:func:`pipelines.kernels.tokens.pack_batches`, so the table is the same on every run and no data
passes through the driver.
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import functions as F

from pipelines.kernels.tokens import PackParams, pack_batches
from pipelines.stage import StageContext, StageResult
from schemas.catalog import GOLD_TOKEN_SEQUENCES, SILVER_DOCUMENTS_CLEAN


def run(ctx: StageContext) -> StageResult:
    lake, cfg = ctx.lake, ctx.cfg.tokenize
    params = PackParams(tokenizer=cfg.tokenizer, seq_len=cfg.seq_len, separator_token=cfg.separator_token)
    params.ids()  # fail on the driver, before any task, if the tokenizer is unusable
    docs = lake.read(SILVER_DOCUMENTS_CLEAN)
    grouped = (docs.select("doc_id", "text")
               .withColumn("pack_group", F.pmod(F.xxhash64("doc_id"), F.lit(cfg.pack_groups)).cast("int"))
               .repartition(cfg.pack_groups, "pack_group")
               .sortWithinPartitions("pack_group", "doc_id"))
    lake.overwrite(GOLD_TOKEN_SEQUENCES, grouped.mapInArrow(
        partial(pack_batches, params=params), GOLD_TOKEN_SEQUENCES.schema))
    seqs = lake.read(GOLD_TOKEN_SEQUENCES)
    tokens = seqs.agg(F.sum("num_tokens")).first()[0] or 0
    return StageResult(
        rows_in=docs.count(), rows_out=seqs.count(),
        input_versions={SILVER_DOCUMENTS_CLEAN.qualified_name: lake.version(SILVER_DOCUMENTS_CLEAN)},
        output_versions={GOLD_TOKEN_SEQUENCES.qualified_name: lake.version(GOLD_TOKEN_SEQUENCES)},
        notes={"tokens": int(tokens), "seq_len": cfg.seq_len},
    )
