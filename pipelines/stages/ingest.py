"""ingest: WARC/WET files → ``bronze.documents`` + ``bronze.quarantine``.

One Spark task per file (a gzip-per-record WARC is not splittable without an index). Files already
committed with the same size and mtime (``ops.ingest_log``) are skipped; a changed file is read
again and its rows replaced. Each file's rows are replaced atomically (``replaceWhere`` on
``source_file``), then the file is logged, so a run killed in between leaves each file's records
present exactly once after the next run. The candidate table is audited before publishing.
"""

from __future__ import annotations

import glob as globlib
import json
import os
from datetime import datetime, timezone
from functools import partial

import fsspec
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines import quality
from pipelines.kernels.warc import ROW_SCHEMA, IngestLimits, parse_files_to_batches
from pipelines.stage import StageContext, StageResult
from schemas.catalog import BRONZE_DOCUMENTS, BRONZE_QUARANTINE, OPS_INGEST_LOG

WARC_SUFFIXES = (".warc", ".warc.gz", ".wet", ".wet.gz", ".warc.wet.gz", ".arc.gz")


def resolve_inputs(inputs: list[str]) -> list[str]:
    """Expand paths, globs and folders (local or fsspec URLs) to a sorted list of files.

    Raises FileNotFoundError naming every input that matches nothing, before any Spark work.
    """
    files: list[str] = []
    missing: list[str] = []
    for item in inputs:
        fs, _, _ = fsspec.get_fs_token_paths(item)
        is_local = "://" not in item
        if any(ch in item for ch in "*?["):
            found = sorted(globlib.glob(item)) if is_local else [fs.unstrip_protocol(p) for p in fs.glob(item)]
        elif fs.isdir(item):
            found = sorted(p for p in fs.find(item) if p.endswith(WARC_SUFFIXES))
            found = found if is_local else [fs.unstrip_protocol(p) for p in found]
        elif fs.exists(item):
            found = [item]
        else:
            found = []
        if not found:
            missing.append(item)
        files.extend(os.path.abspath(p) if is_local else p for p in found)
    if missing:
        raise FileNotFoundError(f"ingest input not found: {', '.join(missing)}")
    return sorted(dict.fromkeys(files))


def _fingerprint(path: str) -> tuple[int, float]:
    info = fsspec.get_fs_token_paths(path)[0].info(path)
    mtime = info.get("mtime") or info.get("LastModified") or info.get("created") or 0.0
    if isinstance(mtime, datetime):
        mtime = mtime.timestamp()
    return int(info.get("size") or 0), float(mtime)


def _parse_partition(batches, limits: IngestLimits):
    for batch in batches:
        yield from parse_files_to_batches(batch.column("path").to_pylist(), limits)


def _sql_list(values: list[str]) -> str:
    return ", ".join("'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values)


def run(ctx: StageContext, inputs: list[str]) -> StageResult:
    spark, lake, cfg = ctx.spark, ctx.lake, ctx.cfg.ingest
    files = resolve_inputs(inputs)
    committed = {r.source_file: (r.size_bytes, r.mtime) for r in lake.read(OPS_INGEST_LOG).collect()}
    prints = {f: _fingerprint(f) for f in files}
    todo = [f for f in files if committed.get(f) != prints[f]]
    notes: dict[str, object] = {"files": len(files), "files_skipped": len(files) - len(todo)}
    if not todo:
        return StageResult(0, 0, notes=notes)

    limits = IngestLimits(cfg.max_payload_bytes, cfg.max_text_chars, cfg.min_text_chars,
                          tuple(cfg.html_content_types))
    parsed = (spark.createDataFrame([(f,) for f in todo], "path string")
              .repartition(len(todo))
              .mapInArrow(partial(_parse_partition, limits=limits), from_arrow_schema(ROW_SCHEMA))
              .persist())
    docs = parsed.filter(F.col("kind") == "document").select(BRONZE_DOCUMENTS.columns)
    bad = parsed.filter(F.col("kind") == "quarantine").select(BRONZE_QUARANTINE.columns)
    summaries = {r.source_file: json.loads(r.detail)
                 for r in parsed.filter(F.col("kind") == "summary").select("source_file", "detail").collect()}

    in_todo = f"source_file IN ({_sql_list(todo)})"
    candidate = lake.read(BRONZE_DOCUMENTS).filter(f"NOT ({in_todo})").unionByName(lake.conform(BRONZE_DOCUMENTS, docs))
    quality.audit(ctx, "ingest", BRONZE_DOCUMENTS, candidate)
    lake.replace_where(BRONZE_DOCUMENTS, docs, in_todo)
    lake.replace_where(BRONZE_QUARANTINE, bad, in_todo)

    now = datetime.now(timezone.utc)
    log_rows = [(f, prints[f][0], prints[f][1], ctx.run_id, summaries[f]["documents"], summaries[f]["quarantined"],
                 sum(summaries[f]["skipped"].values()), now) for f in todo]
    lake.merge(OPS_INGEST_LOG, spark.createDataFrame(log_rows, OPS_INGEST_LOG.schema))
    parsed.unpersist()

    skipped: dict[str, int] = {}
    for s in summaries.values():
        for kind, n in s["skipped"].items():
            skipped[kind] = skipped.get(kind, 0) + n
    records = sum(s["records"] for s in summaries.values())
    documents = sum(s["documents"] for s in summaries.values())
    quarantined = sum(s["quarantined"] for s in summaries.values())
    notes.update(records=records, skipped_by_type=skipped)
    return StageResult(rows_in=records, rows_out=documents, rows_quarantined=quarantined,
                       output_versions={BRONZE_DOCUMENTS.qualified_name: lake.version(BRONZE_DOCUMENTS)},
                       notes=notes)
