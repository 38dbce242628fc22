"""tokenize: ``silver.documents_clean`` → ``gold.token_sequences`` + ``gold.document_tokens``.

Documents are spread over ``tokenize.pack_groups`` groups by a hash of their doc_id (xxhash64,
stable across Spark versions), sorted by doc_id inside each group and packed there by
:func:`pipelines.kernels.tokens.pack_batches` (one Spark task per group), so the table is the same
on every run and no data passes through the driver. Each task also derives its documents'
``gold.document_tokens`` rows from the sequences it packed (:func:`document_rows`), so every
document is tokenized once. The tasks stage both tables' Parquet files and the lake replaces each
table with them in one commit (:mod:`pipelines.lake`).

Conservation (checked by the tests on real data): ``sum(token_sequences.num_tokens) ==
sum(document_tokens.num_tokens) + count(document_tokens)`` (one separator after each document),
and ``count(document_tokens) == count(documents_clean)``.

Every run rebuilds both tables from all of ``silver.documents_clean``, so an incremental filter run
(:mod:`pipelines.stages.filter`) changes nothing here. When this stage becomes incremental, its
mode comes from :func:`pipelines.incremental.plan` with ``upstream=("filter",)``, which rebuilds
it in full after filter rebuilt in full.
"""

from __future__ import annotations

import json
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from pipelines.lake import ALL
from pipelines.lake.files import TableFiles, Target
from pipelines.config import TokenizeConfig
from pipelines.kernels.tokens import document_rows, pack_batches, separator_ids
from pipelines.stage import StageContext, StageResult
from schemas.catalog import GOLD_DOCUMENT_TOKENS, GOLD_TOKEN_SEQUENCES, SILVER_DOCUMENTS_CLEAN

OUTPUTS = {"sequences": GOLD_TOKEN_SEQUENCES, "documents": GOLD_DOCUMENT_TOKENS}
#: What a run counts: documents read; sequences, their tokens, documents and document tokens packed.
COUNTS = ("documents_in", "sequences", "tokens", "documents", "document_tokens")


def run(ctx: StageContext) -> StageResult:
    lake, cfg = ctx.lake, ctx.cfg.tokenize
    params = cfg   # the kernel takes the tokenize section as it is
    separator_ids(params)  # fail on the driver, before any task, if the tokenizer is unusable
    docs = lake.read(SILVER_DOCUMENTS_CLEAN)
    grouped = (docs.select("doc_id", "text")
               .withColumn("pack_group", F.pmod(F.xxhash64("doc_id"), F.lit(cfg.pack_groups)).cast("int"))
               .repartition(cfg.pack_groups, "pack_group")
               .sortWithinPartitions("pack_group", "doc_id"))
    with ctx.staging(OUTPUTS) as staging:
        task = partial(_pack_to_files, params=params, targets=staging.targets)
        details = [json.loads(r.detail) for r in grouped.mapInArrow(task, "detail string").collect()]
        staging.add(details)
        for kind in OUTPUTS:
            staging.publish(kind, replace=ALL, operation="tokenize")
    counts = {key: sum(d["counts"][key] for d in details) for key in COUNTS}
    return StageResult(
        rows_in=counts["documents_in"], rows_out=counts["sequences"],
        notes={"tokens": counts["tokens"], "document_tokens": counts["document_tokens"],
               "separators": counts["documents"], "seq_len": cfg.seq_len, "tokenizer": cfg.tokenizer},
    )


def _pack_to_files(batches, *, params: TokenizeConfig, targets: dict[str, Target]):
    """A task: pack its groups' documents (:func:`pack_batches`) and stage the sequences and their
    :func:`document_rows` as one Parquet file each for the two tables. Yields one row: JSON of the
    counts and its staged files."""
    counts = dict.fromkeys(COUNTS, 0)

    def counted(batches):
        for batch in batches:
            counts["documents_in"] += batch.num_rows
            yield batch

    with TableFiles(targets) as files:
        for seqs in pack_batches(counted(batches), params):
            files.write("sequences", seqs)
            files.write("documents", document_rows(seqs))
            counts["sequences"] += seqs.num_rows
            counts["tokens"] += pc.sum(seqs.column("num_tokens")).as_py() or 0
            counts["documents"] += len(pc.list_flatten(seqs.column("doc_ids")))
            counts["document_tokens"] += pc.sum(pc.list_flatten(seqs.column("doc_num_tokens"))).as_py() or 0
    yield pa.RecordBatch.from_pydict({"detail": [json.dumps({"counts": counts, **files.report()})]})
