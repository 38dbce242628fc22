"""tokenize: ``silver.documents_clean`` → ``gold.token_sequences`` + ``gold.document_tokens``.

Documents are spread over ``tokenize.pack_groups`` groups by a hash of their doc_id (xxhash64,
stable across Spark versions), sorted by doc_id inside each group and packed there by
:func:`pipelines.kernels.tokens.pack_batches` (one Spark task per group), so the table is the same
on every run and no data passes through the driver. ``gold.document_tokens`` is read back out of
the sequences' ``doc_ids``/``doc_num_tokens`` columns, so every document is tokenized once.

Conservation (checked by the tests on real data): ``sum(token_sequences.num_tokens) ==
sum(document_tokens.num_tokens) + count(document_tokens)`` (one separator after each document),
and ``count(document_tokens) == count(documents_clean)``.
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import functions as F

from pipelines.kernels.tokens import PackParams, pack_batches
from pipelines.stage import StageContext, StageResult
from schemas.catalog import GOLD_DOCUMENT_TOKENS, GOLD_TOKEN_SEQUENCES, SILVER_DOCUMENTS_CLEAN


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
    starts = seqs.select("seq_id", "tokenizer", F.explode(
        F.arrays_zip("doc_ids", "doc_num_tokens", "doc_boundaries")).alias("d"))
    lake.overwrite(GOLD_DOCUMENT_TOKENS, starts.select(
        F.col("d.doc_ids").alias("doc_id"), F.col("d.doc_num_tokens").alias("num_tokens"),
        "seq_id", F.col("d.doc_boundaries").alias("offset"), "tokenizer"))

    packed = seqs.agg(F.count("*").alias("n"), F.sum("num_tokens").alias("tokens"),
                      F.sum(F.size("doc_ids")).alias("docs"),
                      F.sum(F.aggregate("doc_num_tokens", F.lit(0).cast("long"), lambda acc, x: acc + x)).alias("doc_tokens"),
                      ).first()
    return StageResult(
        rows_in=docs.count(), rows_out=packed["n"],
        input_versions={SILVER_DOCUMENTS_CLEAN.qualified_name: lake.version(SILVER_DOCUMENTS_CLEAN)},
        output_versions={t.qualified_name: lake.version(t) for t in (GOLD_TOKEN_SEQUENCES, GOLD_DOCUMENT_TOKENS)},
        notes={"tokens": int(packed["tokens"] or 0), "document_tokens": int(packed["doc_tokens"] or 0),
               "separators": int(packed["docs"] or 0), "seq_len": cfg.seq_len, "tokenizer": cfg.tokenizer},
    )
