"""clicks ingest: Criteo log files → ``bronze.clicks`` + ``bronze.clicks_quarantine``, exactly once per file.

One Spark task per file: line numbers need a file read in order, and gzip (how Criteo ships its
day files) cannot be split anyway. The task runs :func:`pipelines.kernels.clicks.stage_files`
through ``mapInArrow``: the file's rows go to a staged Parquet file (pyarrow) under
``<lake root>/_staging/clicks_ingest/<call>``, its quarantined lines and summary row back to Spark.
The staged rows are audited (``bronze.clicks`` suite) and published with
``replaceWhere source_file IN (<the files>)``, so re-ingesting a file replaces its
rows instead of adding them. Then the files go into ``ops.clicks_ingest_log`` with their size,
mtime and line counts; a file already there with the same size and mtime is skipped. A run killed
anywhere leaves each file either fully present (and maybe not yet logged: the next run replaces
it) or absent.

:func:`ingest_files` is shared with the Structured Streaming query (:mod:`pipelines.clicks.stream`),
which passes ``txn=(query id, batch id)``: the writes then also carry Delta's ``txnAppId`` /
``txnVersion``, and a micro-batch replayed after a crash skips the writes it had committed.
"""

from __future__ import annotations

import glob as globlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial

import fsspec
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines import quality
from pipelines.kernels.clicks import ROW_SCHEMA, STAGED_SCHEMA, day_of, get_format, normalize_source, stage_files
from pipelines.stage import StageContext, StageResult
from pipelines.tables import Lake, sql_list
from schemas.catalog import BRONZE_CLICKS, BRONZE_CLICKS_QUARANTINE, OPS_CLICKS_INGEST_LOG, TableSpec


@dataclass(frozen=True)
class LogFile:
    path: str          # normalized (pipelines.kernels.clicks.normalize_source)
    size_bytes: int
    mtime: float       # seconds since the epoch


def mtime_seconds(value: float) -> float:
    """Modification time to whole milliseconds, the precision Spark's file listing has."""
    return int(value * 1000) / 1000


def _hidden(path: str) -> bool:
    return os.path.basename(path.rstrip("/")).startswith((".", "_"))


def resolve_inputs(inputs: list[str]) -> list[LogFile]:
    """Expand paths, globs and folders (local or fsspec URLs) to the files to read, sorted.

    Folders contribute every file under them except hidden ones (``.``/``_`` names, as Spark's
    file sources do). Raises FileNotFoundError naming every input that matches nothing.
    """
    found: dict[str, LogFile] = {}
    missing = []
    for item in inputs:
        fs, _, _ = fsspec.get_fs_token_paths(item)
        local = "://" not in item
        if any(ch in item for ch in "*?["):
            paths = sorted(globlib.glob(item)) if local else [fs.unstrip_protocol(p) for p in fs.glob(item)]
        elif fs.isdir(item):
            paths = [p for p in sorted(fs.find(item)) if not _hidden(p)]
            paths = paths if local else [fs.unstrip_protocol(p) for p in paths]
        elif fs.exists(item):
            paths = [item]
        else:
            paths = []
        paths = [p for p in paths if not fs.isdir(p)]
        if not paths:
            missing.append(item)
        for p in paths:
            info = fs.info(p)
            mtime = info.get("mtime") or info.get("LastModified") or info.get("created") or 0.0
            mtime = mtime.timestamp() if isinstance(mtime, datetime) else float(mtime)
            source = normalize_source(p)
            found[source] = LogFile(source, int(info.get("size") or 0), mtime_seconds(mtime))
    if missing:
        raise FileNotFoundError(f"clicks input not found: {', '.join(missing)}")
    return [found[k] for k in sorted(found)]


def _parse_partition(batches, staging: str, fmt: str, block_bytes: int, day_pattern: str | None):
    for batch in batches:
        yield from stage_files(batch.column("path").to_pylist(), staging, fmt, block_bytes, day_pattern)


def _remove_tree(path: str) -> None:
    if "://" in path:
        fs, _, (root,) = fsspec.get_fs_token_paths(path)
        if fs.exists(root):
            fs.rm(root, recursive=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def write_idempotent(lake: Lake, spec: TableSpec, df: DataFrame, predicate: str,
                     txn: tuple[str, int] | None) -> None:
    """``replaceWhere predicate`` with ``df`` (creating the table if new), as one Delta commit.

    With ``txn=(app_id, version)`` the commit also records Delta's ``txnAppId``/``txnVersion``
    and is skipped when that app already committed that version (a replayed micro-batch).
    """
    writer = lake.conform(spec, df).write.format("delta")
    if spec.partition_by:
        writer = writer.partitionBy(*spec.partition_by)
    if lake.exists(spec):
        writer = writer.mode("overwrite").option("replaceWhere", predicate)
    else:
        writer = writer.mode("overwrite")
        for key, value in spec.properties:  # options named delta.* become table properties
            writer = writer.option(key, value)
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
    if lake.cfg.mode == "catalog":
        writer.saveAsTable(lake.location(spec))
    else:
        writer.save(lake.location(spec))


def pending(lake: Lake, files: list[LogFile]) -> list[LogFile]:
    """The files not yet in ``ops.clicks_ingest_log`` with the same size and mtime."""
    if not files or not lake.exists(OPS_CLICKS_INGEST_LOG):
        return list(files)
    wanted = [f.path for f in files]
    committed = {r.source_file: (r.size_bytes, r.mtime) for r in lake.read(OPS_CLICKS_INGEST_LOG)
                 .where(F.col("source_file").isin(wanted)).select("source_file", "size_bytes", "mtime").collect()}
    return [f for f in files if committed.get(f.path) != (f.size_bytes, f.mtime)]


def ingest_files(ctx: StageContext, files: list[LogFile], *, stage: str = "clicks_ingest",
                 txn: tuple[str, int] | None = None, log_run_id: str | None = None) -> StageResult:
    """Parse ``files`` and publish their rows and quarantined lines; log them as committed.

    Files already logged with the same size and mtime are skipped. Raises QualityGateError (nothing
    published) when the new rows fail the ``bronze.clicks`` suite, OSError when a file cannot be read.
    """
    spark, lake, cfg = ctx.spark, ctx.lake, ctx.cfg.clicks
    get_format(cfg.format)
    todo = pending(lake, files)
    notes: dict[str, object] = {"files": len(files), "files_skipped": len(files) - len(todo)}
    if not todo:
        return StageResult(0, 0, notes=notes)

    ingest_time = F.lit(datetime.now(timezone.utc))
    # Each task parses its file and writes the rows to a staged Parquet file with pyarrow; only the
    # quarantined lines and the summary row cross into Spark as Arrow batches. The rows are read
    # back as Parquet (vectorized, only the columns a pass needs) by the audit and the Delta write,
    # so no 45-column row cache is built. Staging lives under the lake root (reachable by every
    # executor) in a folder of its own per call, removed at the end.
    staging = f"{lake.root.rstrip('/')}/_staging/clicks_ingest/{uuid.uuid4().hex}"
    paths = spark.sparkContext.parallelize([(f.path,) for f in todo], numSlices=len(todo)).toDF("path string")
    parsed = (paths.mapInArrow(partial(_parse_partition, staging=staging, fmt=cfg.format, block_bytes=cfg.block_bytes,
                                       day_pattern=cfg.day_pattern), from_arrow_schema(ROW_SCHEMA))
              .withColumn("ingest_time", ingest_time)
              .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        parsed.count()  # the one pass that parses and stages every file
        rows = (spark.read.schema(from_arrow_schema(STAGED_SCHEMA)).parquet(staging)
                .withColumn("ingest_time", ingest_time).select(BRONZE_CLICKS.columns))
        bad = parsed.where(F.col("kind") == "quarantine").select(BRONZE_CLICKS_QUARANTINE.columns)
        summaries = {r.source_file: json.loads(r.detail) for r in
                     parsed.where(F.col("kind") == "summary").select("source_file", "detail").collect()}
        # the suite reads these columns only: one scan of 3 columns of the staged Parquet, cached
        # for the suite's several passes
        audited = rows.select("row_key", "label", "line_number").persist(StorageLevel.MEMORY_AND_DISK)
        try:
            quality.audit(ctx, stage, BRONZE_CLICKS, audited)
        finally:
            audited.unpersist()
        in_todo = f"source_file IN ({sql_list([f.path for f in todo])})"
        days = {day_of(f.path, cfg.day_pattern) for f in todo}
        # the day partitions first, so Delta prunes partitions before it reads file statistics
        in_days = " OR ".join(([f"day IN ({', '.join(str(d) for d in sorted(days - {None}))})"] if days - {None} else [])
                              + (["day IS NULL"] if None in days else []))
        write_idempotent(lake, BRONZE_CLICKS, rows, f"({in_days}) AND {in_todo}", txn)
        write_idempotent(lake, BRONZE_CLICKS_QUARANTINE, bad, in_todo, txn)
    finally:
        parsed.unpersist()
        _remove_tree(staging)

    now = datetime.now(timezone.utc)
    run_id = log_run_id or ctx.run_id
    log_rows = [(f.path, f.size_bytes, f.mtime, run_id, s["lines"], s["rows"], s["quarantined"], s["header_lines"], now)
                for f in todo for s in [summaries[f.path]]]
    write_idempotent(lake, OPS_CLICKS_INGEST_LOG, spark.createDataFrame(log_rows, OPS_CLICKS_INGEST_LOG.schema),
                     in_todo, txn)

    totals = {k: sum(s[k] for s in summaries.values()) for k in ("lines", "rows", "quarantined", "header_lines")}
    notes.update(lines=totals["lines"], header_lines=totals["header_lines"])
    return StageResult(rows_in=totals["lines"] - totals["header_lines"], rows_out=totals["rows"],
                       rows_quarantined=totals["quarantined"],
                       output_versions={BRONZE_CLICKS.qualified_name: lake.version(BRONZE_CLICKS),
                                        BRONZE_CLICKS_QUARANTINE.qualified_name: lake.version(BRONZE_CLICKS_QUARANTINE)},
                       notes=notes)


def run(ctx: StageContext, inputs: list[str]) -> StageResult:
    """``crawlake clicks ingest``: the files of ``inputs`` (paths, globs, folders)."""
    return ingest_files(ctx, resolve_inputs(inputs))
