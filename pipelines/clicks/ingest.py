"""clicks ingest: Criteo log files → ``bronze.clicks`` + ``bronze.clicks_quarantine``, exactly once per file.

One Spark task per file: line numbers need a file read in order, and gzip (how Criteo ships its
day files) cannot be split anyway. The task runs the kernel (:func:`pipelines.kernels.clicks.parse_file`)
through ``mapInArrow`` and stages the file's rows (in its ``day=`` folder) and its quarantined
lines as one Parquet file each; only a summary row per file goes back to Spark. The new rows are
audited (``bronze.clicks`` suite), then the lake publishes them, replacing the rows an earlier
ingest of the same files left, in one commit per table; :mod:`pipelines.lake` alone decides
which engine commits (see its ``writer``).

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
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial

import fsspec
import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType

from pipelines.kernels.clicks import day_of, get_format, normalize_source, parse_file
from pipelines.lake import Lake, Rows
from pipelines.lake.commits import part_name
from pipelines.lake.files import TableFiles, Target
from pipelines.stage import StageContext, StageResult, failpoint
from schemas.catalog import BRONZE_CLICKS, BRONZE_CLICKS_QUARANTINE, OPS_CLICKS_INGEST_LOG


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


#: Dictionary-encode the repeating columns only: a dictionary over the unique row keys and line
#: numbers is built and then dropped by the writer, time spent for nothing.
ROW_FILE_OPTIONS = (("use_dictionary", [c for c in BRONZE_CLICKS.columns
                                        if c not in ("row_key", "line_number", *BRONZE_CLICKS.partition_by)]),)
_SUMMARY = StructType([StructField("source_file", StringType(), False), StructField("detail", StringType(), False)])
OUTPUTS = {"rows": BRONZE_CLICKS, "quarantine": BRONZE_CLICKS_QUARANTINE}


def pending(lake: Lake, files: list[LogFile]) -> list[LogFile]:
    """The files not yet in ``ops.clicks_ingest_log`` with the same size and mtime."""
    if not files:
        return []
    committed = {r["source_file"]: (r["size_bytes"], r["mtime"]) for r in lake.rows(
        OPS_CLICKS_INGEST_LOG, ["source_file", "size_bytes", "mtime"], Rows("source_file", tuple(f.path for f in files)))}
    return [f for f in files if committed.get(f.path) != (f.size_bytes, f.mtime)]


def _parse_partition(batches, *, targets: dict[str, Target], ingest_time: datetime, fmt: str, block_bytes: int,
                     day_pattern: str | None):
    """A task: per file, its rows and its quarantined lines staged as one Parquet file each (the
    rows in their ``day=`` folder, both validated with their suites); yields one
    ``(source_file, detail)`` row per file. ``detail`` is JSON: ``counts`` (the kernel's
    summary) and the files' report (``staged``, ``audits``)."""
    stamp = pa.scalar(ingest_time, pa.timestamp("us", tz="UTC"))
    for batch in batches:
        sources, details = [], []
        for path in batch.column("path").to_pylist():
            source = normalize_source(path)
            counts: dict[str, int] = {}
            with TableFiles(targets, part_name(source)) as out:   # its file key in the name, as in its row keys
                for parsed in parse_file(path, fmt, block_bytes=block_bytes, day_pattern=day_pattern):
                    kind = parsed.column("kind")[0].as_py() if parsed.num_rows else None
                    if kind == "summary":
                        counts = json.loads(parsed.column("detail")[0].as_py())
                    elif kind is not None:
                        out.write("rows" if kind == "row" else "quarantine",
                                  parsed.append_column("ingest_time", pa.repeat(stamp, parsed.num_rows)))
            sources.append(source)
            details.append(json.dumps({"counts": counts, **out.report()}))
        yield pa.RecordBatch.from_pydict({"source_file": sources, "detail": details})


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

    # Each task parses its file, stages its rows and quarantined lines as Parquet files and
    # audits them; only one summary row per file comes back.
    ctx.stage = ctx.stage or stage
    with ctx.staging(OUTPUTS, {"rows": ROW_FILE_OPTIONS}) as staging:
        task = partial(_parse_partition, targets=staging.targets, ingest_time=datetime.now(timezone.utc),
                       fmt=cfg.format, block_bytes=cfg.block_bytes, day_pattern=cfg.day_pattern)
        paths = spark.sparkContext.parallelize([(f.path,) for f in todo], numSlices=len(todo)).toDF("path string")
        summaries = {r.source_file: json.loads(r.detail) for r in paths.mapInArrow(task, _SUMMARY).collect()}
        staging.add(summaries.values())
        sources = tuple(f.path for f in todo)
        days = sorted({day_of(f.path, cfg.day_pattern) for f in todo}, key=lambda d: (d is None, d or 0))
        # the day partitions first, so that both engines prune partitions before file statistics
        staging.publish("rows", replace=Rows("source_file", sources, {"day": days}), txn=txn, operation="clicks ingest")
        failpoint("clicks_ingest.after_rows_commit")
        staging.publish("quarantine", replace=Rows("source_file", sources), txn=txn, operation="clicks ingest")

    # the ingest log last: a file is logged only once its rows and quarantine are committed
    now = datetime.now(timezone.utc)
    run_id = log_run_id or ctx.run_id
    log_rows = [(f.path, f.size_bytes, f.mtime, run_id, c["lines"], c["rows"], c["quarantined"], c["header_lines"], now)
                for f in todo for c in [summaries[f.path]["counts"]]]
    lake.replace_rows(OPS_CLICKS_INGEST_LOG, log_rows, Rows("source_file", sources), txn=txn)

    totals = {k: sum(d["counts"][k] for d in summaries.values()) for k in ("lines", "rows", "quarantined", "header_lines")}
    notes.update(lines=totals["lines"], header_lines=totals["header_lines"])
    return StageResult(rows_in=totals["lines"] - totals["header_lines"], rows_out=totals["rows"],
                       rows_quarantined=totals["quarantined"], notes=notes)


def run(ctx: StageContext) -> StageResult:
    """``crawlake clicks ingest``: the files of ``clicks.input`` (paths, globs, folders)."""
    return ingest_files(ctx, resolve_inputs(list(ctx.cfg.clicks.input)))
