"""tokenize: ``silver.documents_clean`` → ``gold.token_sequences`` + ``gold.document_tokens``.

Documents are spread over ``tokenize.pack_groups`` groups by a hash of their doc_id (xxhash64,
stable across Spark versions), sorted by doc_id inside each group and packed there by
:func:`pipelines.kernels.tokens.pack_batches` (one Spark task per group), so the table is the same
on every run and no data passes through the driver. Each task also derives its documents'
``gold.document_tokens`` rows from the sequences it packed (:func:`document_rows`), so every
document is tokenized once. On a local path-mode lake the tasks write both tables' Parquet files
themselves and the driver replaces each table's files in one deltalake commit
(:mod:`pipelines.lake.commits`); elsewhere (catalog mode, object stores) Spark's Delta writer
writes the sequences and the document rows are read back out of them.

Conservation (checked by the tests on real data): ``sum(token_sequences.num_tokens) ==
sum(document_tokens.num_tokens) + count(document_tokens)`` (one separator after each document),
and ``count(document_tokens) == count(documents_clean)``.
"""

from __future__ import annotations

import json
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from pipelines.lake import commits as delta_files
from pipelines.config import TokenizeConfig
from pipelines.kernels.tokens import DOCUMENT_TOKENS_SCHEMA, SEQUENCE_SCHEMA, document_rows, pack_batches, separator_ids
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
    roots = {kind: lake.direct_location(spec) for kind, spec in OUTPUTS.items()}
    if all(roots.values()):
        counts = _write_with_deltalake(lake, grouped, params, roots)
    else:
        counts = _write_with_spark(ctx, grouped, params)
    return StageResult(
        rows_in=counts["documents_in"], rows_out=counts["sequences"],
        input_versions={SILVER_DOCUMENTS_CLEAN.qualified_name: lake.version(SILVER_DOCUMENTS_CLEAN)},
        output_versions={t.qualified_name: lake.version(t) for t in OUTPUTS.values()},
        notes={"tokens": counts["tokens"], "document_tokens": counts["document_tokens"],
               "separators": counts["documents"], "seq_len": cfg.seq_len, "tokenizer": cfg.tokenizer},
    )


def _pack_to_files(batches, *, params: TokenizeConfig, roots: dict[str, str], stats: dict[str, list[str]]):
    """A task: pack its groups' documents (:func:`pack_batches`) and write the sequences and their
    :func:`document_rows` as one Parquet file each into the two tables' folders. Yields one row:
    JSON of the counts and each written file's Delta add action."""
    counts = dict.fromkeys(COUNTS, 0)

    def counted(batches):
        for batch in batches:
            counts["documents_in"] += batch.num_rows
            yield batch

    schemas = {"sequences": SEQUENCE_SCHEMA, "documents": DOCUMENT_TOKENS_SCHEMA}
    with delta_files.PartFiles(roots, schemas) as files:
        for seqs in pack_batches(counted(batches), params):
            files.write("sequences", seqs)
            files.write("documents", document_rows(seqs))
            counts["sequences"] += seqs.num_rows
            counts["tokens"] += pc.sum(seqs.column("num_tokens")).as_py() or 0
            counts["documents"] += len(pc.list_flatten(seqs.column("doc_ids")))
            counts["document_tokens"] += pc.sum(pc.list_flatten(seqs.column("doc_num_tokens"))).as_py() or 0
    detail = {"counts": counts, "adds": files.adds(stats)}
    yield pa.RecordBatch.from_pydict({"detail": [json.dumps(detail)]})


def _write_with_deltalake(lake, grouped, params: TokenizeConfig, roots: dict[str, str]) -> dict[str, int]:
    """Tasks write both tables' files; the driver replaces each table's files with them in one
    deltalake commit (no row passes through the JVM, nothing is read back). Written files no
    commit names are removed if a commit fails."""
    stats = {kind: lake.stats_columns(spec) for kind, spec in OUTPUTS.items()}
    rows = grouped.mapInArrow(partial(_pack_to_files, params=params, roots=roots, stats=stats), "detail string").collect()
    details = [json.loads(r.detail) for r in rows]
    lake.replace_with_files(OUTPUTS, roots, delta_files.task_adds(details, OUTPUTS), operation="tokenize")
    return {key: sum(d["counts"][key] for d in details) for key in COUNTS}


def _write_with_spark(ctx: StageContext, grouped, params: TokenizeConfig) -> dict[str, int]:
    """Spark's Delta writer for both tables (catalog mode, object stores); the document rows are
    read back out of the sequences, so every document is tokenized once."""
    lake = ctx.lake
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
    return {"documents_in": lake.read(SILVER_DOCUMENTS_CLEAN).count(), "sequences": packed["n"],
            "tokens": int(packed["tokens"] or 0), "documents": int(packed["docs"] or 0),
            "document_tokens": int(packed["doc_tokens"] or 0)}
