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
files' earlier row files removed in the same commit (:mod:`pipelines.lake.commits`). Elsewhere
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
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from rich.console import Console

from pipelines import quality
from pipelines.lake import commits as delta_files
from pipelines.config import IngestConfig
from pipelines.kernels.warc import ROW_SCHEMA, duplicate_detail, parse_files_to_batches
from pipelines.stage import StageContext, StageResult, run_together
from pipelines.lake import arrow_schema, sql_list
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


def _parse_partition(batches, limits: IngestConfig):
    for batch in batches:
        yield from parse_files_to_batches(batch.column("path").to_pylist(), limits)


def _ingest_files(ctx: StageContext, files: list[str], prints: dict[str, tuple[int, float]],
                  committed_at: dict[str, datetime], limits: IngestConfig) -> dict[str, dict]:
    """Parse, audit and publish one commit batch of files; returns each file's summary."""
    # largest first: the tasks start in this order, so the cores finish together (LPT)
    files = sorted(files, key=lambda f: -prints[f][0])
    # which copy of a repeated record is kept: the lake's, then the earlier-committed file's, then by name
    precedence = sorted(files, key=lambda f: (f not in committed_at, committed_at.get(f) or _EPOCH, f))
    roots = {kind: ctx.lake.direct_location(spec) for kind, spec in OUTPUTS.items()}
    if all(roots.values()) and ctx.lake.direct_location(OPS_INGEST_LOG):
        summaries = _ingest_with_deltalake(ctx, files, precedence, limits, roots)
    else:
        summaries = _ingest_with_spark(ctx, files, precedence, limits)
    now = datetime.now(timezone.utc)
    log_rows = [{"source_file": f, "size_bytes": prints[f][0], "mtime": prints[f][1], "sha256": s.get("sha256"),
                 "run_id": ctx.run_id, "documents": s["documents"], "quarantined": s["quarantined"],
                 "skipped": sum(s["skipped"].values()), "committed_at": now, "records": s["records"],
                 "duplicates": s["duplicates"]}
                for f, s in ((f, summaries[f]) for f in files)]
    # last: only the log marks the files done. replaceWhere, not MERGE: the batch's files are known.
    if roots["documents"]:
        table = pa.Table.from_pylist(log_rows, schema=arrow_schema(OPS_INGEST_LOG))
        delta_files.replace_rows(ctx.lake.location(OPS_INGEST_LOG), table, "source_file", files)
    else:
        ctx.lake.replace_where(OPS_INGEST_LOG, ctx.spark.createDataFrame(
            [tuple(r[c] for c in OPS_INGEST_LOG.columns) for r in log_rows], OPS_INGEST_LOG.schema),
            f"source_file IN ({sql_list(files)})")
    return summaries


_EPOCH = datetime.fromtimestamp(0, timezone.utc)
#: The columns of a batch's documents that decide and describe repeated records.
_KEY_COLUMNS = ("doc_id", "source_file", "record_offset", "warc_record_id", "url", "warc_filename",
                "content_type_source")


def _repeated_records(ctx: StageContext, docs: DataFrame, files: list[str], precedence: list[str]) -> list:
    """The batch's documents (``docs``, at least :data:`_KEY_COLUMNS`) whose doc_id is kept
    elsewhere, each with ``kept_file`` and ``kept_offset``: a copy in the lake from a file outside
    the batch is kept; otherwise the batch's first copy in ``precedence`` order of files, then by
    offset (repeats inside one file the kernel has already set aside). One Spark job; the lake's
    side is a scan of three columns, so its cost follows the table, as the uniqueness check's did."""
    held = (ctx.lake.read(BRONZE_DOCUMENTS).filter(f"NOT (source_file IN ({sql_list(files)}))")
            .select("doc_id", F.col("source_file").alias("lake_file"), F.col("record_offset").alias("lake_offset")))
    order = F.array_position(F.array(*[F.lit(f) for f in precedence]), F.col("source_file"))
    first = Window.partitionBy("doc_id").orderBy(order, "record_offset")
    ranked = (docs.select(*_KEY_COLUMNS)
              .withColumn("n", F.row_number().over(first))
              .withColumn("first_file", F.first("source_file").over(first))
              .withColumn("first_offset", F.first("record_offset").over(first)))
    return (ranked.join(held, "doc_id", "left").filter("lake_file IS NOT NULL OR n > 1")
            .select(*_KEY_COLUMNS, F.coalesce("lake_file", "first_file").alias("kept_file"),
                    F.coalesce("lake_offset", "first_offset").alias("kept_offset"))
            .orderBy("source_file", "record_offset").collect())


def _duplicate_rows(repeated: list) -> list[dict]:
    """``bronze.quarantine`` rows of :func:`_repeated_records`' rows."""
    return [{"source_file": r.source_file, "warc_filename": r.warc_filename, "record_offset": r.record_offset,
             "warc_record_id": r.warc_record_id, "url": r.url, "reason": "duplicate_record",
             "detail": duplicate_detail(r.kept_file, r.kept_offset)} for r in repeated]


def _count_duplicates(summaries: dict[str, dict], repeated: list) -> None:
    """Move the driver-found repeats from each file's documents to its quarantined counts."""
    for r in repeated:
        s = summaries[r.source_file]
        s["documents"] -= 1
        s["content_type_source"][r.content_type_source] -= 1
        s["quarantined"] += 1
        s["duplicates"] += 1
        s["quarantined_by_reason"]["duplicate_record"] = s["quarantined_by_reason"].get("duplicate_record", 0) + 1


def _uniqueness_check(doc_ids: pa.ChunkedArray, sources: pa.ChunkedArray, lake_held: dict[str, str]) -> tuple:
    """The gate's last-line ``doc_id_unique_across_files`` result over the batch's documents as
    published (``doc_ids`` and their ``sources``), with ``lake_held`` (doc_id -> file of the
    lake's copy) from :func:`_repeated_records`; the observed text names the files."""
    where: dict[str, list[str]] = {}
    for doc_id, source in zip(doc_ids.to_pylist(), sources.to_pylist()):
        where.setdefault(doc_id, []).append(source)
    repeated = {d: f for d, f in where.items() if len(f) > 1}
    clashes = {d: [lake_held[d], *f] for d, f in where.items() if d in lake_held}
    examples = "; ".join(f"{d} in {', '.join(sorted(set(f)))}" for d, f in list({**repeated, **clashes}.items())[:3])
    observed = (f"{len(clashes)} clashes with other files, {len(repeated)} repeated in this batch"
                + (f" (e.g. {examples})" if examples else ""))
    return ("doc_id_unique_across_files", "doc_id", not repeated and not clashes, observed)


OUTPUTS = {"documents": BRONZE_DOCUMENTS, "quarantine": BRONZE_QUARANTINE}
#: The suite runs inside the task on at most this many documents at a time (pandas memory).
AUDIT_CHUNK_ROWS = 20_000


def _write_partition(batches, *, limits: IngestConfig, roots: dict[str, str], stats: dict[str, list[str]]):
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


def _set_aside(written: delta_files.Uncommitted, roots: dict[str, str], repeated: list,
               stats: dict[str, list[str]]) -> None:
    """Rewrite each documents file of the tasks that holds a repeated record without it, and write
    those records' ``duplicate_record`` rows as a quarantine file of the same source; the files
    replace the tasks' in ``written.adds`` (the old documents file is deleted)."""
    schemas = {kind: arrow_schema(spec) for kind, spec in OUTPUTS.items()}
    by_source: dict[str, list] = {}
    for r in repeated:
        by_source.setdefault(r.source_file, []).append(r)
    for source, rows in by_source.items():
        prefix = f"part-{delta_files.source_key(source)}-"
        old = next(a for a in written.adds["documents"] if a.path.startswith(prefix))
        drop = pa.array(sorted(r.record_offset for r in rows), pa.int64())
        with delta_files.PartFiles(roots, schemas, delta_files.part_name(source)) as out:
            for batch in pq.ParquetFile(f"{roots['documents']}/{old.path}").iter_batches(batch_size=AUDIT_CHUNK_ROWS):
                out.write("documents", batch.filter(pc.invert(pc.is_in(batch.column("record_offset"), drop))))
            out.write("quarantine", pa.Table.from_pylist(_duplicate_rows(rows), schema=schemas["quarantine"]))
        written.adds["documents"].remove(old)
        os.remove(f"{roots['documents']}/{old.path}")
        for kind, add in out.adds(stats).items():
            written.adds[kind].append(delta_files.DataFile.from_json(add))


def _ingest_with_deltalake(ctx: StageContext, files: list[str], precedence: list[str], limits: IngestConfig,
                           roots: dict[str, str]) -> dict[str, dict]:
    """Tasks write and audit the files' rows; the driver sets repeated records aside, gates, then
    commits each table with deltalake (add actions, and remove actions for the files' earlier
    rows), or, when an earlier row file mixes sources, publishes the written files with Spark's
    ``replaceWhere``."""
    spark, lake = ctx.spark, ctx.lake
    stats = {kind: lake.stats_columns(spec) for kind, spec in OUTPUTS.items()}
    task = partial(_write_partition, limits=limits, roots=roots, stats=stats)
    rows = _one_task_per_file(spark, files).mapInArrow(task, "source_file string, detail string").collect()
    summaries = {r.source_file: json.loads(r.detail) for r in rows}
    adds = delta_files.task_adds(summaries.values(), OUTPUTS)
    with delta_files.Uncommitted(roots, adds) as written:  # the Spark fallback leaves them all to remove
        doc_files = lambda: [f"{roots['documents']}/{a.path}" for a in written.adds["documents"]]  # noqa: E731
        repeated = []
        if doc_files():
            keys = spark.read.schema(BRONZE_DOCUMENTS.schema).parquet(*doc_files())
            repeated = _repeated_records(ctx, keys, files, precedence)
            _set_aside(written, roots, repeated, stats)
            _count_duplicates(summaries, repeated)
        published = (pq.read_table(doc_files(), columns=["doc_id", "source_file"]) if doc_files()
                     else pa.table({"doc_id": pa.array([], pa.string()), "source_file": pa.array([], pa.string())}))
        lake_held = {r.doc_id: r.kept_file for r in repeated if r.kept_file not in files}
        audits = [s["audit"] for s in summaries.values() if "audit" in s]
        results = quality.merge_results(audits) + [
            _uniqueness_check(published.column("doc_id"), published.column("source_file"), lake_held)]
        adds = written.adds
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


def _ingest_with_spark(ctx: StageContext, files: list[str], precedence: list[str],
                       limits: IngestConfig) -> dict[str, dict]:
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
    repeated = _repeated_records(ctx, docs, files, precedence)
    _count_duplicates(summaries, repeated)
    if repeated:
        aside = spark.createDataFrame([(r.source_file, r.record_offset) for r in repeated], "source_file string, record_offset long")
        docs = docs.join(F.broadcast(aside), ["source_file", "record_offset"], "left_anti").select(BRONZE_DOCUMENTS.columns)
        bad = bad.unionByName(spark.createDataFrame(_duplicate_rows(repeated), BRONZE_QUARANTINE.schema))

    in_batch = f"source_file IN ({sql_list(files)})"
    # The suite runs on the new rows (doc_id unique among them); the lake's copies the repeats
    # named must be gone from them.
    lake_held = {r.doc_id: r.kept_file for r in repeated if r.kept_file not in files}
    kept = docs.filter(F.col("doc_id").isin(list(lake_held))).select("doc_id", "source_file").collect() if lake_held else []
    audited = quality.audit(ctx, "ingest", BRONZE_DOCUMENTS, docs, record=False, extra_checks=[_uniqueness_check(
        pa.chunked_array([[r.doc_id for r in kept]], pa.string()), pa.chunked_array([[r.source_file for r in kept]], pa.string()),
        lake_held)])
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
    log = ctx.lake.read(OPS_INGEST_LOG).select("source_file", "size_bytes", "mtime", "committed_at").collect()
    committed = {r.source_file: (r.size_bytes, r.mtime) for r in log}
    committed_at = {r.source_file: r.committed_at for r in log}
    prints = {f: _fingerprint(f) for f in files}
    todo = [f for f in files if committed.get(f) != prints[f]]
    console = Console(stderr=True)
    limits = cfg   # the kernel takes the ingest section as it is

    summaries: dict[str, dict] = {}
    started = time.perf_counter()
    for start in range(0, len(todo), cfg.files_per_commit):
        summaries.update(_ingest_files(ctx, todo[start:start + cfg.files_per_commit], prints, committed_at, limits))
        if cfg.progress:
            elapsed = max(time.perf_counter() - started, 1e-9)
            records = sum(s["records"] for s in summaries.values())
            mbytes = sum(s.get("bytes", 0) for s in summaries.values()) / 1e6
            console.print(f"ingest: {len(files) - len(todo) + len(summaries)}/{len(files)} files, {records:,} records, "
                          f"{records / elapsed:,.0f} records/s, {mbytes / elapsed:,.1f} MB/s", highlight=False)

    notes = _notes(files, todo, summaries)
    return StageResult(rows_in=notes["records"], rows_out=notes["documents"],
                       rows_quarantined=sum(s["quarantined"] for s in summaries.values()),
                       output_versions={BRONZE_DOCUMENTS.qualified_name: ctx.lake.version(BRONZE_DOCUMENTS)},
                       notes=notes)


def _notes(files: list[str], todo: list[str], summaries: dict[str, dict]) -> dict[str, object]:
    """The stage notes. Every record read is counted once:
    ``records == documents + sum(skipped_by_type) + sum(quarantined_by_reason)`` (duplicates are
    the ``duplicate_record`` part of the quarantined); ``damage_by_reason`` counts the quarantine
    rows that stand for a damaged file rather than a record."""
    total = {name: Counter() for name in ("skipped", "quarantined_by_reason", "damage", "content_type_source")}
    for s in summaries.values():
        for name, counts in total.items():
            counts.update(s[name])
    notes: dict[str, object] = {
        "files": len(files), "files_skipped": len(files) - len(todo),
        "records": sum(s["records"] for s in summaries.values()),
        "documents": sum(s["documents"] for s in summaries.values()),
        "documents_by_content_type_source": dict(sorted(total["content_type_source"].items())),
        "skipped_by_type": dict(sorted(total["skipped"].items())),
        "quarantined_by_reason": dict(sorted(total["quarantined_by_reason"].items())),
        "duplicates": sum(s["duplicates"] for s in summaries.values()),
    }
    if total["damage"]:
        notes["damage_by_reason"] = dict(sorted(total["damage"].items()))
    return notes
