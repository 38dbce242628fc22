"""clicks ingest: Criteo log files → ``bronze.clicks`` + ``bronze.clicks_quarantine``, exactly once per file.

One Spark task per file: line numbers need a file read in order, and gzip (how Criteo ships its
day files) cannot be split anyway. The task runs :func:`pipelines.kernels.clicks.write_rows`
through ``mapInArrow``: the file's rows go to one Parquet file (pyarrow) in its ``day=`` folder,
its quarantined lines and summary row back to Spark. The new rows are audited (``bronze.clicks``
suite), then published, replacing the rows an earlier ingest of the same files left:

* ``clicks.commit: auto`` on a local path-mode lake: the files are written straight into the
  table's folder and committed, with the remove actions of the files they replace, as one Delta
  transaction by deltalake (:mod:`pipelines.lake.commits`); no row passes through the JVM. The
  replaced files are found by their ``row_key`` statistics (a key starts with its file's key);
  when an older file mixes sources (OPTIMIZE), the Spark path below is used instead.
* otherwise (catalog mode, object stores, ``clicks.commit: spark``): the files go to
  ``<lake root>/_staging/clicks_ingest/<call>`` and Spark writes them with
  ``replaceWhere source_file IN (<the files>)``.

Then the files go into ``ops.clicks_ingest_log`` with their size, mtime and line counts; a file
already there with the same size and mtime is skipped. A run killed anywhere leaves each file
either fully present (and maybe not yet logged: the next run replaces it) or absent.

:func:`ingest_files` is shared with the Structured Streaming query (:mod:`pipelines.clicks.stream`),
which passes ``txn=(query id, batch id)``: the commits then also record a Delta set-transaction
(Spark's ``txnAppId`` / ``txnVersion``), and a micro-batch replayed after a crash skips the
writes it had committed.
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
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from pipelines import quality
from pipelines.lake import commits as delta_files
from pipelines.lake.commits import DataFile, describe, partition_folder
from pipelines.kernels.clicks import ParquetTarget, day_of, file_key, get_format, normalize_source, write_file
from pipelines.stage import StageContext, StageResult, failpoint, run_together
from pipelines.lake import Lake, arrow_schema, sql_list
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


#: Columns of a task's Parquet files: the tables' columns, less bronze.clicks' partition column
#: (Delta keeps partition values in the log and the folder name, not in the file).
ROW_FILE_COLUMNS = tuple(c for c in BRONZE_CLICKS.columns if c not in BRONZE_CLICKS.partition_by)
QUARANTINE_FILE_COLUMNS = tuple(BRONZE_CLICKS_QUARANTINE.columns)
#: Dictionary-encode the repeating columns only: a dictionary over the unique row keys and line
#: numbers is built and then dropped by the writer, time spent for nothing.
ROW_FILE_OPTIONS = (("use_dictionary", [c for c in ROW_FILE_COLUMNS if c not in ("row_key", "line_number")]),)
#: The suite runs inside the task on at most this many rows at a time (pandas memory).
AUDIT_CHUNK_ROWS = 1 << 21
_SUMMARY = StructType([StructField("source_file", StringType(), False), StructField("detail", StringType(), False)])


def pending(lake: Lake, files: list[LogFile], *, direct: bool = False) -> list[LogFile]:
    """The files not yet in ``ops.clicks_ingest_log`` with the same size and mtime (read with
    deltalake when ``direct``, else with Spark)."""
    if not files or not lake.exists(OPS_CLICKS_INGEST_LOG):
        return list(files)
    wanted = [f.path for f in files]
    columns = ["source_file", "size_bytes", "mtime"]
    if direct:
        table = DeltaTable(lake.location(OPS_CLICKS_INGEST_LOG)).to_pyarrow_dataset().to_table(
            columns=columns, filter=pc.field("source_file").isin(wanted))
        committed = {r["source_file"]: (r["size_bytes"], r["mtime"]) for r in table.to_pylist()}
    else:
        committed = {r.source_file: (r.size_bytes, r.mtime) for r in lake.read(OPS_CLICKS_INGEST_LOG)
                     .where(F.col("source_file").isin(wanted)).select(*columns).collect()}
    return [f for f in files if committed.get(f.path) != (f.size_bytes, f.mtime)]


def _audit_rows(path: str) -> list:
    """``bronze.clicks``' suite over a written rows file, chunk by chunk (:data:`AUDIT_CHUNK_ROWS`).

    Row keys are checked unique within a chunk by the suite; across chunks and files they are
    unique by construction (``<file key>-<line number>``, each chunk a run of consecutive lines).
    """
    source = fsspec.open(path, "rb").open() if "://" in path else path
    return quality.validate_parquet(source, BRONZE_CLICKS, ["row_key", "label", "line_number"], AUDIT_CHUNK_ROWS)


def _parse_partition(batches, *, rows_root: str, quarantine_root: str, ingest_time: datetime,
                     stats: dict[str, list[str]] | None, fmt: str, block_bytes: int, day_pattern: str | None):
    """A task: per file, its rows to a Parquet file in its ``day=`` folder under ``rows_root``,
    its quarantined lines to one under ``quarantine_root``, the rows audited; yields one
    ``(source_file, detail)`` row per file. ``detail`` is JSON: ``counts``, ``audit`` (the suite's
    results), ``rows_file``/``quarantine_file`` (relative paths, when written) and, with ``stats``
    (the columns to keep statistics of per table), their Delta add actions ``rows_add``/``quarantine_add``."""
    constants = {"ingest_time": pa.scalar(ingest_time, pa.timestamp("us", tz="UTC"))}
    # footer statistics only for the columns Delta keeps statistics of (none for staged files)
    rows_options = (*ROW_FILE_OPTIONS, ("write_statistics", stats["rows"] if stats else False))
    quarantine_options = (("write_statistics", stats["quarantine"] if stats else False),)
    for batch in batches:
        sources, details = [], []
        for path in batch.column("path").to_pylist():
            source = normalize_source(path)
            day = day_of(source, day_pattern)
            name = delta_files.part_name(source)   # its file key in the name, as in its row keys
            rows_file = f"{partition_folder({'day': day})}/{name}"
            counts = write_file(path, ParquetTarget(f"{rows_root}/{rows_file}", ROW_FILE_COLUMNS, rows_options),
                                ParquetTarget(f"{quarantine_root}/{name}", QUARANTINE_FILE_COLUMNS, quarantine_options), fmt,
                                constants=constants, block_bytes=block_bytes, day_pattern=day_pattern)
            detail: dict[str, object] = {"counts": counts}
            if counts["rows"]:
                detail["rows_file"] = rows_file
                detail["audit"] = _audit_rows(f"{rows_root}/{rows_file}")
                if stats is not None:
                    detail["rows_add"] = describe(rows_root, rows_file, {"day": day}, stats["rows"]).to_json()
            if counts["quarantined"]:
                detail["quarantine_file"] = name
                if stats is not None:
                    detail["quarantine_add"] = describe(quarantine_root, name, {}, stats["quarantine"]).to_json()
            sources.append(source)
            details.append(json.dumps(detail))
        yield pa.RecordBatch.from_pydict({"source_file": sources, "detail": details})


def _remove_file(path: str) -> None:
    if "://" in path:
        fs, _, (target,) = fsspec.get_fs_token_paths(path)
        fs.rm(target)
    elif os.path.exists(path):
        os.remove(path)


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


# ------------------------------------------------------------------------------ deltalake commits

_TABLES = (BRONZE_CLICKS, BRONZE_CLICKS_QUARANTINE, OPS_CLICKS_INGEST_LOG)


def _direct(lake: Lake, cfg) -> bool:
    """Whether this ingest commits through deltalake: ``clicks.commit: auto`` and tables that
    :meth:`Lake.direct_location` allows (local path-mode lake, plain protocol, catalog columns)."""
    return cfg.commit == "auto" and all(lake.direct_location(spec) for spec in _TABLES)


def _replaced_files(table: str, todo: list[LogFile], partitions: dict | None) -> list[dict] | None:
    """The live files of ``table`` holding rows of the files in ``todo`` (a re-ingest replaces them).

    A row key starts with its source file's key, so a file whose min and max ``row_key``
    statistics share that prefix holds that source's rows only. None when a file (in
    ``partitions``) may mix a source of ``todo`` with others (rows rewritten together by OPTIMIZE,
    or no statistics): it needs a row-level rewrite, Spark's ``replaceWhere``.
    """
    keys = {file_key(f.path) for f in todo}
    replaced = []
    for entry in delta_files.files_in(table, partitions, ["row_key"]).to_pylist():
        low, high = entry.get("min.row_key"), entry.get("max.row_key")
        if low is None or high is None:
            return None
        if low[:16] == high[:16]:
            if low[:16] in keys:
                replaced.append(entry)
        elif any(low[:16] <= k <= high[:16] for k in keys):
            return None
    return replaced


def _write_log_with_deltalake(lake: Lake, log_rows: list[tuple], todo: list[LogFile], txn) -> None:
    """``ops.clicks_ingest_log``: replace the rows of ``todo``'s files (deltalake, one commit)."""
    table = pa.Table.from_pylist([dict(zip(OPS_CLICKS_INGEST_LOG.columns, r)) for r in log_rows],
                                 schema=arrow_schema(OPS_CLICKS_INGEST_LOG))
    delta_files.replace_rows(lake.location(OPS_CLICKS_INGEST_LOG), table, "source_file", [f.path for f in todo], txn=txn)


# ------------------------------------------------------------------------------ the stage


def ingest_files(ctx: StageContext, files: list[LogFile], *, stage: str = "clicks_ingest",
                 txn: tuple[str, int] | None = None, log_run_id: str | None = None) -> StageResult:
    """Parse ``files`` and publish their rows and quarantined lines; log them as committed.

    Files already logged with the same size and mtime are skipped. Raises QualityGateError (nothing
    published) when the new rows fail the ``bronze.clicks`` suite, OSError when a file cannot be read.
    """
    spark, lake, cfg = ctx.spark, ctx.lake, ctx.cfg.clicks
    get_format(cfg.format)
    direct = _direct(lake, cfg)
    todo = pending(lake, files, direct=direct)
    notes: dict[str, object] = {"files": len(files), "files_skipped": len(files) - len(todo),
                                "commit": "deltalake" if direct else "spark"}
    if not todo:
        return StageResult(0, 0, notes=notes)

    # Each task parses its file and writes its rows and quarantined lines as Parquet files with
    # pyarrow, and audits the rows; only one summary row per file comes back. With ``direct`` the
    # files go straight into the tables' folders (invisible to readers until committed; VACUUM
    # removes any a crash leaves), else into a staging folder under the lake root (reachable by
    # every executor) that Spark's Delta writes read.
    staging = f"{lake.root.rstrip('/')}/_staging/clicks_ingest/{uuid.uuid4().hex}"
    roots = ({"rows": lake.location(BRONZE_CLICKS), "quarantine": lake.location(BRONZE_CLICKS_QUARANTINE)} if direct
             else {"rows": f"{staging}/rows", "quarantine": f"{staging}/quarantine"})
    stats = {"rows": lake.stats_columns(BRONZE_CLICKS), "quarantine": lake.stats_columns(BRONZE_CLICKS_QUARANTINE)} if direct else None
    ingest_time = datetime.now(timezone.utc)
    task = partial(_parse_partition, rows_root=roots["rows"], quarantine_root=roots["quarantine"],
                   ingest_time=ingest_time, stats=stats, fmt=cfg.format, block_bytes=cfg.block_bytes,
                   day_pattern=cfg.day_pattern)
    paths = spark.sparkContext.parallelize([(f.path,) for f in todo], numSlices=len(todo)).toDF("path string")
    summaries = {r.source_file: json.loads(r.detail) for r in paths.mapInArrow(task, _SUMMARY).collect()}
    written = {kind: [f"{roots[kind]}/{d[f'{kind}_file']}" for d in summaries.values() if f"{kind}_file" in d]
               for kind in roots}
    orphans = [*written["rows"], *written["quarantine"]] if direct else []  # written, not (yet) committed
    try:
        audits = [d["audit"] for d in summaries.values() if "audit" in d]
        if not audits:  # no rows at all: the suite still runs, on none
            audits = [quality.validate_frame(arrow_schema(BRONZE_CLICKS).empty_table().to_pandas(), BRONZE_CLICKS)]
        results = quality.merge_results(audits)
        audit_rows = quality.gate(ctx, stage, BRONZE_CLICKS, "bronze_clicks", results, record=False)
        if not (direct and _publish_with_deltalake(lake, summaries, todo, cfg.day_pattern, txn, orphans)):
            _publish_with_spark(lake, written, roots, todo, cfg.day_pattern, txn)
            notes["commit"] = "spark"
    finally:
        for path in orphans:
            _remove_file(path)
        _remove_tree(staging)

    # the ingest log last: a file is logged only once its rows and quarantine are committed
    now = datetime.now(timezone.utc)
    run_id = log_run_id or ctx.run_id
    log_rows = [(f.path, f.size_bytes, f.mtime, run_id, c["lines"], c["rows"], c["quarantined"], c["header_lines"], now)
                for f in todo for c in [summaries[f.path]["counts"]]]
    if direct:
        run_together((_write_log_with_deltalake, lake, log_rows, todo, txn), (quality.record_results, ctx, audit_rows))
    else:
        run_together((write_idempotent, lake, OPS_CLICKS_INGEST_LOG,
                      spark.createDataFrame(log_rows, OPS_CLICKS_INGEST_LOG.schema), f"source_file IN ({sql_list([f.path for f in todo])})", txn),
                     (quality.record_results, ctx, audit_rows))

    totals = {k: sum(d["counts"][k] for d in summaries.values()) for k in ("lines", "rows", "quarantined", "header_lines")}
    notes.update(lines=totals["lines"], header_lines=totals["header_lines"])
    versions = {spec.qualified_name: lake.version(spec) for spec in (BRONZE_CLICKS, BRONZE_CLICKS_QUARANTINE)}
    return StageResult(rows_in=totals["lines"] - totals["header_lines"], rows_out=totals["rows"],
                       rows_quarantined=totals["quarantined"], output_versions=versions, notes=notes)


def _publish_with_deltalake(lake: Lake, summaries: dict[str, dict], todo: list[LogFile], day_pattern: str | None,
                            txn: tuple[str, int] | None, orphans: list[str]) -> bool:
    """Commit the tasks' files to ``bronze.clicks`` and ``bronze.clicks_quarantine`` (one deltalake
    commit each, with the remove actions of the files they replace); committed files leave
    ``orphans``. False, before any commit, when a replaced file mixes sources (Spark must rewrite it)."""
    rows_table, quarantine_table = lake.location(BRONZE_CLICKS), lake.location(BRONZE_CLICKS_QUARANTINE)
    days = {day_of(f.path, day_pattern) for f in todo}
    replaced_rows = _replaced_files(rows_table, todo, {"day": sorted(days, key=lambda d: (d is None, d or 0))})
    replaced_quarantine = _replaced_files(quarantine_table, todo, None)
    if replaced_rows is None or replaced_quarantine is None:
        return False
    for spec, table, kind, replaced in ((BRONZE_CLICKS, rows_table, "rows", replaced_rows),
                                        (BRONZE_CLICKS_QUARANTINE, quarantine_table, "quarantine", replaced_quarantine)):
        adds = [DataFile.from_json(d[f"{kind}_add"]) for d in summaries.values() if f"{kind}_add" in d]
        if lake.commit_files(spec, adds, replaced, txn=txn, operation="clicks ingest"):
            for f in adds:
                orphans.remove(f"{table}/{f.path}")
        if spec is BRONZE_CLICKS:
            failpoint("clicks_ingest.after_rows_commit")
    return True


def _publish_with_spark(lake: Lake, written: dict[str, list[str]], roots: dict[str, str], todo: list[LogFile],
                        day_pattern: str | None, txn: tuple[str, int] | None) -> None:
    """``replaceWhere`` the rows and quarantined lines of ``todo``'s files with the written files."""
    spark = lake.spark
    in_todo = f"source_file IN ({sql_list([f.path for f in todo])})"
    rows = (spark.read.schema(BRONZE_CLICKS.schema).option("basePath", roots["rows"]).parquet(*written["rows"])
            if written["rows"] else spark.createDataFrame([], BRONZE_CLICKS.schema))
    bad = (spark.read.schema(BRONZE_CLICKS_QUARANTINE.schema).parquet(*written["quarantine"])
           if written["quarantine"] else spark.createDataFrame([], BRONZE_CLICKS_QUARANTINE.schema))
    days = {day_of(f.path, day_pattern) for f in todo}
    # the day partitions first, so Delta prunes partitions before it reads file statistics
    in_days = " OR ".join(([f"day IN ({', '.join(str(d) for d in sorted(days - {None}))})"] if days - {None} else [])
                          + (["day IS NULL"] if None in days else []))
    write_idempotent(lake, BRONZE_CLICKS, rows, f"({in_days}) AND {in_todo}" if in_days else in_todo, txn)
    failpoint("clicks_ingest.after_rows_commit")
    write_idempotent(lake, BRONZE_CLICKS_QUARANTINE, bad, in_todo, txn)


def run(ctx: StageContext, inputs: list[str]) -> StageResult:
    """``crawlake clicks ingest``: the files of ``inputs`` (paths, globs, folders)."""
    return ingest_files(ctx, resolve_inputs(inputs))
