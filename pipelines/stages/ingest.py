"""ingest: WARC/WET files → ``bronze.documents`` + ``bronze.quarantine``.

Inputs are paths, globs, folders, fsspec URLs (``s3://``, ``https://``) and Common Crawl
``warc.paths.gz`` / ``wet.paths.gz`` listings (lines resolved against ``ingest.paths_prefix``),
optionally sampled (``sample_fraction``) and capped (``max_files``) for trial runs.

One Spark task per file (a gzip-per-record WARC is not splittable without an index). Files are
processed ``files_per_commit`` at a time: parse, audit (write-audit-publish), replace those files'
rows, then record them in ``ops.ingest_log`` with size, mtime and sha256. On a local path-mode
lake each task writes its file's documents and quarantine rows as Parquet files straight into the
tables' folders (named by the file's source key) and runs the ``bronze.documents`` suite on them;
the driver checks doc_id uniqueness across files, then commits each table with deltalake, the
files' earlier row files removed in the same commit (:mod:`pipelines.delta_files`). Elsewhere
(catalog mode, object stores), or when an earlier row file mixes sources (OPTIMIZE), Spark's
Delta writer publishes with ``replaceWhere`` on ``source_file``. A file whose size and mtime match its log entry is skipped; a changed file is
read again and its rows replaced. A run killed anywhere therefore ends, after a re-run, with each
file's records present exactly once.
"""

from __future__ import annotations

import glob as globlib
import hashlib
import json
import os
import time
from collections import Counter
from datetime import datetime, timezone
from functools import partial

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from rich.console import Console

from pipelines import delta_files, quality
from pipelines.config import IngestConfig
from pipelines.kernels.warc import ROW_SCHEMA, IngestLimits, parse_files_to_batches
from pipelines.stage import StageContext, StageResult, run_together
from pipelines.tables import arrow_schema, sql_list
from schemas.catalog import BRONZE_DOCUMENTS, BRONZE_QUARANTINE, OPS_INGEST_LOG

WARC_SUFFIXES = (".warc", ".warc.gz", ".wet", ".wet.gz", ".warc.wet.gz", ".arc.gz")
LISTING_SUFFIXES = (".paths.gz", ".paths")


def _read_listing(listing: str, prefix: str) -> list[str]:
    """Lines of a Common Crawl ``*.paths.gz`` listing, each joined to ``prefix`` unless absolute."""
    with fsspec.open(listing, "rt", compression="infer") as fh:
        lines = [ln.strip() for ln in fh if ln.strip()]
    return [ln if "://" in ln or ln.startswith("/") else prefix.rstrip("/") + "/" + ln for ln in lines]


def resolve_inputs(inputs: list[str], paths_prefix: str = "https://data.commoncrawl.org/") -> list[str]:
    """Expand paths, globs, folders, fsspec URLs and ``*.paths.gz`` listings to a sorted file list.

    Raises FileNotFoundError naming every input that matches nothing, before any Spark work.
    Files named inside a listing are not checked here (a crawl lists tens of thousands); one that
    cannot be read becomes a quarantine row.
    """
    files: list[str] = []
    missing: list[str] = []
    for item in inputs:
        fs, _, _ = fsspec.get_fs_token_paths(item)
        is_local = "://" not in item
        if any(ch in item for ch in "*?["):
            found = sorted(globlib.glob(item, recursive=True)) if is_local else [fs.unstrip_protocol(p) for p in fs.glob(item)]
        elif fs.isdir(item):
            found = sorted(p for p in fs.find(item) if p.endswith(WARC_SUFFIXES))
            found = found if is_local else [fs.unstrip_protocol(p) for p in found]
        elif fs.exists(item):
            found = _read_listing(item, paths_prefix) if item.endswith(LISTING_SUFFIXES) else [item]
        else:
            found = []
        if not found:
            missing.append(item)
        files.extend(os.path.abspath(p) if "://" not in p else p for p in found)
    if missing:
        raise FileNotFoundError(f"ingest input not found: {', '.join(missing)}")
    return sorted(dict.fromkeys(files))


def select_files(files: list[str], max_files: int | None = None, sample_fraction: float | None = None,
                 seed: int = 0) -> list[str]:
    """Trial-run selection: a stable hash sample of ``files`` (same seed, same files), then the
    first ``max_files`` in path order."""
    if sample_fraction is not None:
        files = [f for f in files
                 if int.from_bytes(hashlib.sha1(f"{seed}:{f}".encode()).digest()[:8], "big") < sample_fraction * 2**64]
    return files[:max_files] if max_files else files


def _fingerprint(path: str) -> tuple[int, float]:
    """``(size in bytes, mtime in seconds)``; (-1, 0) when the file cannot be inspected."""
    try:
        info = fsspec.get_fs_token_paths(path)[0].info(path)
    except (OSError, ValueError):
        return -1, 0.0
    mtime = info.get("mtime") or info.get("LastModified") or info.get("created") or 0.0
    if isinstance(mtime, datetime):
        mtime = mtime.timestamp()
    return int(info.get("size") or 0), float(mtime)


def _parse_partition(batches, limits: IngestLimits):
    for batch in batches:
        yield from parse_files_to_batches(batch.column("path").to_pylist(), limits)


def _limits(cfg: IngestConfig) -> IngestLimits:
    return IngestLimits(cfg.max_payload_bytes, cfg.max_text_chars, cfg.min_text_chars,
                        tuple(cfg.html_content_types), cfg.extractor)


def _ingest_files(ctx: StageContext, files: list[str], prints: dict[str, tuple[int, float]],
                  limits: IngestLimits) -> dict[str, dict]:
    """Parse, audit and publish one commit batch of files; returns each file's summary."""
    # largest first: the tasks start in this order, so the cores finish together (LPT)
    files = sorted(files, key=lambda f: -prints[f][0])
    roots = {kind: ctx.lake.direct_location(spec) for kind, spec in OUTPUTS.items()}
    if all(roots.values()) and ctx.lake.direct_location(OPS_INGEST_LOG):
        summaries = _ingest_with_deltalake(ctx, files, limits, roots)
    else:
        summaries = _ingest_with_spark(ctx, files, limits)
    now = datetime.now(timezone.utc)
    log_rows = [(f, prints[f][0], prints[f][1], summaries[f].get("sha256"), ctx.run_id, summaries[f]["documents"],
                 summaries[f]["quarantined"], sum(summaries[f]["skipped"].values()), now) for f in files]
    # last: only the log marks the files done. replaceWhere, not MERGE: the batch's files are known.
    if roots["documents"]:
        table = pa.Table.from_pylist([dict(zip(OPS_INGEST_LOG.columns, r)) for r in log_rows], schema=arrow_schema(OPS_INGEST_LOG))
        delta_files.replace_rows(ctx.lake.location(OPS_INGEST_LOG), table, "source_file", files)
    else:
        ctx.lake.replace_where(OPS_INGEST_LOG, ctx.spark.createDataFrame(log_rows, OPS_INGEST_LOG.schema),
                               f"source_file IN ({sql_list(files)})")
    return summaries


OUTPUTS = {"documents": BRONZE_DOCUMENTS, "quarantine": BRONZE_QUARANTINE}
#: The suite runs inside the task on at most this many documents at a time (pandas memory).
AUDIT_CHUNK_ROWS = 20_000


def _write_partition(batches, *, limits: IngestLimits, roots: dict[str, str], stats: dict[str, list[str]]):
    """A task: parse each file and write its documents and quarantine rows as one Parquet file each
    (named by the file's source key) into the tables' folders, and run the ``bronze.documents``
    suite on the documents; yields one ``(source_file, detail)`` row per file, ``detail`` the
    kernel's summary JSON plus ``audit`` and the written files' Delta add actions (``adds``)."""
    schemas = {kind: arrow_schema(spec) for kind, spec in OUTPUTS.items()}
    for batch in batches:
        sources, details = [], []
        for path in batch.column("path").to_pylist():
            summary = None
            with delta_files.PartFiles(roots, schemas, delta_files.part_name(path)) as out:
                for rows in parse_files_to_batches([path], limits):
                    kinds = rows.column("kind")
                    summary = summary or next((json.loads(d) for d in
                                               rows.filter(pc.equal(kinds, "summary")).column("detail").to_pylist()), None)
                    for kind, value in (("documents", "document"), ("quarantine", "quarantine")):
                        out.write(kind, rows.filter(pc.equal(kinds, value)))
            summary["adds"] = out.adds(stats)
            if out.written["documents"]:
                # in chunks; doc_ids repeated across chunks or files are caught by the driver's check
                summary["audit"] = quality.validate_parquet(
                    f"{roots['documents']}/{out.name}", BRONZE_DOCUMENTS,
                    ["doc_id", "url", "warc_record_id", "source_file", "text", "http_status", "text_length"],
                    AUDIT_CHUNK_ROWS)
            sources.append(path)
            details.append(json.dumps(summary))
        yield pa.RecordBatch.from_pydict({"source_file": sources, "detail": details})


def _one_task_per_file(spark, files: list[str]):
    """A ``path`` DataFrame with one partition per file, in ``files``' order, made in the JVM.
    (``repartition(n)`` of n rows deals them round-robin from random offsets: a 16-file batch got
    4 empty partitions and 4 with two files; a parallelized Python list needs a Python worker per
    task just to hand over its rows.)"""
    paths = F.array(*[F.lit(f) for f in files]) if files else F.array().cast("array<string>")
    return spark.range(0, len(files), 1, max(len(files), 1)).select(
        F.element_at(paths, (F.col("id") + 1).cast("int")).alias("path"))


def _ingest_with_deltalake(ctx: StageContext, files: list[str], limits: IngestLimits,
                           roots: dict[str, str]) -> dict[str, dict]:
    """Tasks write and audit the files' rows; the driver gates, then commits each table with
    deltalake (add actions, and remove actions for the files' earlier rows), or, when an earlier
    row file mixes sources, publishes the written files with Spark's ``replaceWhere``."""
    spark, lake = ctx.spark, ctx.lake
    stats = {kind: lake.stats_columns(spec) for kind, spec in OUTPUTS.items()}
    task = partial(_write_partition, limits=limits, roots=roots, stats=stats)
    rows = _one_task_per_file(spark, files).mapInArrow(task, "source_file string, detail string").collect()
    summaries = {r.source_file: json.loads(r.detail) for r in rows}
    adds = delta_files.task_adds(summaries.values(), OUTPUTS)
    with delta_files.Uncommitted(roots, adds) as written:  # the Spark fallback leaves them all to remove
        doc_files = [f"{roots['documents']}/{a.path}" for a in adds["documents"]]
        ids = pq.read_table(doc_files, columns=["doc_id"]).column("doc_id") if doc_files else pa.chunked_array([], pa.string())
        repeated = len(ids) - pc.count_distinct(ids).as_py()
        clashes = 0
        if lake.exists(BRONZE_DOCUMENTS) and doc_files:
            new_ids = spark.read.schema("doc_id string").parquet(*doc_files)
            clashes = (lake.read(BRONZE_DOCUMENTS).filter(f"NOT (source_file IN ({sql_list(files)}))")
                       .join(new_ids, "doc_id", "left_semi").count())
        audits = [s["audit"] for s in summaries.values() if "audit" in s]
        results = quality.merge_results(audits) + [
            ("doc_id_unique_across_files", "doc_id", clashes == 0 and repeated == 0,
             f"{clashes} clashes with other files, {repeated} repeated in this batch")]
        audited = quality.gate(ctx, "ingest", BRONZE_DOCUMENTS, "bronze_documents", results, record=False)
        replaced = {kind: delta_files.files_of_sources(roots[kind], files) for kind in OUTPUTS}
        if all(r is not None for r in replaced.values()):
            for kind, spec in OUTPUTS.items():
                if lake.commit_files(spec, adds[kind], replaced[kind], operation="ingest"):
                    written.committed(kind)
        else:
            in_batch = f"source_file IN ({sql_list(files)})"
            read = lambda kind: (spark.read.schema(OUTPUTS[kind].schema).parquet(*[f"{roots[kind]}/{a.path}" for a in adds[kind]])  # noqa: E731
                                 if adds[kind] else spark.createDataFrame([], OUTPUTS[kind].schema))
            run_together((lake.replace_where, BRONZE_DOCUMENTS, read("documents"), in_batch),
                         (lake.replace_where, BRONZE_QUARANTINE, read("quarantine"), in_batch))
        quality.record_results(ctx, audited)
    return summaries


def _ingest_with_spark(ctx: StageContext, files: list[str], limits: IngestLimits) -> dict[str, dict]:
    """Parse into Spark's cache, audit, and publish with Spark's Delta writer (catalog mode,
    object stores); returns each file's summary."""
    spark, lake = ctx.spark, ctx.lake
    parsed = (_one_task_per_file(spark, files)
              .mapInArrow(partial(_parse_partition, limits=limits), from_arrow_schema(ROW_SCHEMA))
              .persist())
    summaries = {r.source_file: json.loads(r.detail)  # runs the parse (one task per file) into the cache
                 for r in parsed.filter(F.col("kind") == "summary").select("source_file", "detail").collect()}
    # Audit and writes read the cache in fewer, larger tasks: the audit is a dozen small jobs, and
    # per-task overhead would dominate them; the Delta files come out fewer and larger too.
    rows = parsed.coalesce(spark.sparkContext.defaultParallelism)
    docs = lake.conform(BRONZE_DOCUMENTS, rows.filter(F.col("kind") == "document").select(BRONZE_DOCUMENTS.columns))
    bad = rows.filter(F.col("kind") == "quarantine").select(BRONZE_QUARANTINE.columns)

    in_batch = f"source_file IN ({sql_list(files)})"
    # The suite runs on the new rows; doc_id uniqueness against other files' rows is checked here,
    # with a join, so the cost of an audit does not grow with the table.
    clashes = lake.read(BRONZE_DOCUMENTS).filter(f"NOT ({in_batch})").join(docs.select("doc_id"), "doc_id", "left_semi").count()
    audited = quality.audit(ctx, "ingest", BRONZE_DOCUMENTS, docs, record=False,
                            extra_checks=[("doc_id_unique_across_files", "doc_id", clashes == 0, f"{clashes} clashes")])
    # These three commits are independent (only the ingest log, written last, marks the files
    # done), so they run together: each is mostly Delta's fixed commit work on the driver.
    run_together((lake.replace_where, BRONZE_DOCUMENTS, docs, in_batch),
                 (lake.replace_where, BRONZE_QUARANTINE, bad, in_batch),
                 (quality.record_results, ctx, audited))
    parsed.unpersist()
    return summaries


def run(ctx: StageContext, inputs: list[str]) -> StageResult:
    """Ingest ``inputs`` (already validated by :func:`resolve_inputs` or raw: resolved here)."""
    cfg = ctx.cfg.ingest
    files = select_files(resolve_inputs(inputs, cfg.paths_prefix), cfg.max_files, cfg.sample_fraction, cfg.sample_seed)
    committed = {r.source_file: (r.size_bytes, r.mtime) for r in ctx.lake.read(OPS_INGEST_LOG).collect()}
    prints = {f: _fingerprint(f) for f in files}
    todo = [f for f in files if committed.get(f) != prints[f]]
    console = Console(stderr=True)
    limits = _limits(cfg)

    summaries: dict[str, dict] = {}
    started = time.perf_counter()
    for start in range(0, len(todo), cfg.files_per_commit):
        summaries.update(_ingest_files(ctx, todo[start:start + cfg.files_per_commit], prints, limits))
        if cfg.progress:
            elapsed = max(time.perf_counter() - started, 1e-9)
            records = sum(s["records"] for s in summaries.values())
            mbytes = sum(s.get("bytes", 0) for s in summaries.values()) / 1e6
            console.print(f"ingest: {len(files) - len(todo) + len(summaries)}/{len(files)} files, {records:,} records, "
                          f"{records / elapsed:,.0f} records/s, {mbytes / elapsed:,.1f} MB/s", highlight=False)

    skipped, reasons = Counter(), Counter()
    for s in summaries.values():
        skipped.update(s["skipped"])
        reasons.update(s["quarantined_by_reason"])
    quarantined = sum(s["quarantined"] for s in summaries.values())
    notes = {"files": len(files), "files_skipped": len(files) - len(todo),
             "records": sum(s["records"] for s in summaries.values()), "skipped_by_type": dict(sorted(skipped.items()))}
    if quarantined:
        notes["quarantined_by_reason"] = dict(sorted(reasons.items()))
    return StageResult(rows_in=notes["records"], rows_out=sum(s["documents"] for s in summaries.values()),
                       rows_quarantined=quarantined,
                       output_versions={BRONZE_DOCUMENTS.qualified_name: ctx.lake.version(BRONZE_DOCUMENTS)},
                       notes=notes)
