"""ingest: WARC/WET files → ``bronze.documents`` + ``bronze.quarantine``.

Inputs are paths, globs, folders, fsspec URLs (``s3://``, ``https://``) and Common Crawl
``warc.paths.gz`` / ``wet.paths.gz`` listings (lines resolved against ``ingest.paths_prefix``),
optionally sampled (``sample_fraction``) and capped (``max_files``) for trial runs.

One Spark task per file (a gzip-per-record WARC is not splittable without an index). Files are
processed ``files_per_commit`` at a time: parse, audit (write-audit-publish), replace those files'
rows, then record them in ``ops.ingest_log`` with size, mtime and sha256. Each task stages its
file's documents and quarantine rows as Parquet files named by the file's source key and runs the
``bronze.documents`` suite on them; the driver sets aside records repeated across files, checks
doc_id uniqueness, and the lake replaces the files' rows in each table in one commit
(:mod:`pipelines.lake`). A file whose size, mtime and :func:`settings_hash` match its log entry
is skipped; a changed file, one ingested under other settings (an extractor or a cap changed:
notes ``mode: full``, ``full_because: ingest config changed``, and the later stages rebuild in full
after it), or every input file under ``crawlake run --full ingest``, is read again and its rows
replaced. Logged files that are not among this run's inputs and were ingested under other
settings are counted in the notes (``files_under_other_settings``): their rows stay as they were
until a run reads them. A run killed anywhere therefore ends, after a re-run, with each file's records present
exactly once.

Takedowns: the requests of ``ops.takedowns`` (``crawlake forget``) are read once per run on the
driver and handed to the tasks, whose kernel turns every record a request names into a
``taken_down`` quarantine row without text (:mod:`pipelines.kernels.takedown`), so a removed page
never comes back, from a re-ingested, changed or new file. The notes count them (``taken_down``).
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
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from rich.console import Console

from pipelines import incremental
from pipelines.config import IngestConfig
from pipelines.kernels.takedown import TakedownList
from pipelines.kernels.warc import duplicate_detail, parse_files_to_batches
from pipelines.lake import Rows, Staging, sql_list
from pipelines.lake.commits import part_name, source_key
from pipelines.lake.files import LARGE_ROW_GROUPS, TableFiles, Target, collect_staged
from pipelines.session import DOC_ID_BYTES, broadcast_if_fits
from pipelines.stage import StageContext, StageResult
from schemas.catalog import BRONZE_DOCUMENTS, BRONZE_QUARANTINE, OPS_INGEST_LOG, OPS_TAKEDOWNS

#: Ingest settings that do not change a file's rows (which files, how many per commit, progress);
#: every other one does (:func:`settings_hash`).
NOT_SHAPING = frozenset({"input", "paths_prefix", "max_files", "sample_fraction", "sample_seed",
                         "files_per_commit", "progress"})
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


def settings_hash(cfg: IngestConfig) -> str:
    """16 hex digits over the ingest settings that shape a file's rows (all but
    :data:`NOT_SHAPING`: the extractor, the caps, the content types), recorded per file in
    ``ops.ingest_log.settings_hash``."""
    shaping = cfg.model_dump(mode="json", exclude=set(NOT_SHAPING))
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:16]


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


def _ingest_files(ctx: StageContext, files: list[str], prints: dict[str, tuple[int, float]],
                  committed_at: dict[str, datetime], limits: IngestConfig, takedowns: TakedownList,
                  settings: str) -> dict[str, dict]:
    """Parse, audit and publish one commit batch of files; returns each file's summary.

    Tasks (one per file, largest first) parse, stage and audit each file's documents and
    quarantine rows; the driver sets repeated records aside, gates on the suite and doc_id
    uniqueness, replaces the files' rows in both tables, then logs the files in
    ``ops.ingest_log`` — last, so only a fully published file counts as done.
    """
    spark, lake = ctx.spark, ctx.lake
    files = sorted(files, key=lambda f: -prints[f][0])   # the cores finish together (LPT)
    # which copy of a repeated record is kept: the lake's, then the earlier-committed file's, then by name
    precedence = sorted(files, key=lambda f: (f not in committed_at, committed_at.get(f) or _EPOCH, f))
    # the kernel yields a few hundred records at a time: the files get larger row groups
    with ctx.staging(OUTPUTS, dict.fromkeys(OUTPUTS, LARGE_ROW_GROUPS)) as staging:
        task = partial(_write_partition, limits=limits, targets=staging.targets, takedowns=takedowns)
        rows = _one_task_per_file(spark, files).mapInArrow(task, "source_file string, detail string").collect()
        summaries = {r.source_file: json.loads(r.detail) for r in rows}
        staging.add(summaries.values())
        repeated = []
        if staging.files["documents"]:
            docs = spark.read.schema(BRONZE_DOCUMENTS.schema).parquet(*staging.paths("documents"))
            documents = sum(s["documents"] for s in summaries.values())
            repeated = _repeated_records(ctx, docs, documents, files, precedence)
            _set_aside(staging, repeated)
            _count_duplicates(summaries, repeated)
        published = staging.read_arrow("documents", ["doc_id", "source_file"])
        lake_held = {r.doc_id: r.kept_file for r in repeated if r.kept_file not in files}
        unique = _uniqueness_check(published.column("doc_id"), published.column("source_file"), lake_held)
        in_batch = Rows("source_file", tuple(files))
        # documents first: their gate (the suite and doc_id uniqueness) decides for the batch
        staging.publish("documents", replace=in_batch, operation="ingest", checks=[unique])
        staging.publish("quarantine", replace=in_batch, operation="ingest")
    now = datetime.now(timezone.utc)
    log_rows = [(f, prints[f][0], prints[f][1], s.get("sha256"), ctx.run_id, s["documents"], s["quarantined"],
                 sum(s["skipped"].values()), now, s["records"], s["duplicates"], settings)
                for f, s in ((f, summaries[f]) for f in files)]
    lake.replace_rows(OPS_INGEST_LOG, log_rows, in_batch)
    return summaries


_EPOCH = datetime.fromtimestamp(0, timezone.utc)
#: The columns of a batch's documents that decide and describe repeated records.
_KEY_COLUMNS = ("doc_id", "source_file", "record_offset", "warc_record_id", "url", "warc_filename",
                "content_type_source")


def _repeated_records(ctx: StageContext, docs: DataFrame, documents: int, files: list[str],
                      precedence: list[str]) -> list:
    """The batch's documents (``docs``, at least :data:`_KEY_COLUMNS`; ``documents`` of them)
    whose doc_id is kept elsewhere, each with ``kept_file`` and ``kept_offset``: a copy in the lake
    from a file outside the batch is kept; otherwise the batch's first copy in ``precedence`` order
    of files, then by offset (repeats inside one file the kernel has already set aside). One Spark
    job; the lake's side is a scan of three columns, so its cost follows the table, as the
    uniqueness check's did. The batch's doc_ids go to every task when they fit Spark's broadcast
    threshold, so the lake's rows are narrowed to theirs where they lie instead of shuffled."""
    hint = broadcast_if_fits(ctx.spark, documents * DOC_ID_BYTES)
    held = (ctx.lake.read(BRONZE_DOCUMENTS).filter(f"NOT (source_file IN ({sql_list(files)}))")
            .join(hint(docs.select("doc_id")), "doc_id", "left_semi")
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
#: A driver-side rewrite of a staged file reads it this many rows at a time.
REWRITE_CHUNK_ROWS = 20_000


def _write_partition(batches, *, limits: IngestConfig, targets: dict[str, Target], takedowns: TakedownList):
    """A task: parse each file (records ``takedowns`` names become ``taken_down`` rows) and stage
    its documents and quarantine rows as one Parquet file each (named by the file's source key;
    validated with their suites); yields one
    ``(source_file, detail)`` row per file, ``detail`` the kernel's summary JSON plus the files'
    report (``staged``, ``audits``)."""
    for batch in batches:
        sources, details = [], []
        for path in batch.column("path").to_pylist():
            summary = None
            with TableFiles(targets, part_name(path)) as out:
                for rows in parse_files_to_batches([path], limits, takedowns=takedowns):
                    kinds = rows.column("kind")
                    summary = summary or next((json.loads(d) for d in
                                               rows.filter(pc.equal(kinds, "summary")).column("detail").to_pylist()), None)
                    for kind, value in (("documents", "document"), ("quarantine", "quarantine")):
                        out.write(kind, rows.filter(pc.equal(kinds, value)))
            sources.append(path)
            details.append(json.dumps({**summary, **out.report()}))
        yield pa.RecordBatch.from_pydict({"source_file": sources, "detail": details})


def _one_task_per_file(spark, files: list[str]):
    """A ``path`` DataFrame with one partition per file, in ``files``' order, made in the JVM.
    (``repartition(n)`` of n rows deals them round-robin from random offsets: a 16-file batch got
    4 empty partitions and 4 with two files; a parallelized Python list needs a Python worker per
    task just to hand over its rows.)"""
    paths = F.array(*[F.lit(f) for f in files]) if files else F.array().cast("array<string>")
    return spark.range(0, len(files), 1, max(len(files), 1)).select(
        F.element_at(paths, (F.col("id") + 1).cast("int")).alias("path"))


def _set_aside(staging: Staging, repeated: list) -> None:
    """Rewrite each staged documents file that holds a repeated record without it, and stage
    those records' ``duplicate_record`` rows as a quarantine file of the same source."""
    by_source: dict[str, list] = {}
    for r in repeated:
        by_source.setdefault(r.source_file, []).append(r)
    for source, rows in by_source.items():
        prefix = f"part-{source_key(source)}-"
        old = next(f for f in staging.files["documents"] if f.path.startswith(prefix))
        drop = pa.array(sorted(r.record_offset for r in rows), pa.int64())
        with TableFiles(staging.targets, part_name(source)) as out:
            for batch in staging.open("documents", old).iter_batches(batch_size=REWRITE_CHUNK_ROWS):
                out.write("documents", batch.filter(pc.invert(pc.is_in(batch.column("record_offset"), drop))))
            out.write("quarantine", pa.Table.from_pylist(_duplicate_rows(rows), schema=staging.targets["quarantine"].schema))
        new = collect_staged([{"staged": out.staged()}], list(OUTPUTS))
        staging.swap("documents", old, new["documents"])
        staging.files["quarantine"].extend(new["quarantine"])
        staging.audits["quarantine"].append(out.audits["quarantine"])


def run(ctx: StageContext) -> StageResult:
    """Ingest ``ingest.input`` (paths, globs, folders, URLs, listings: resolved here)."""
    cfg = ctx.cfg.ingest
    files = select_files(resolve_inputs(cfg.input, cfg.paths_prefix), cfg.max_files, cfg.sample_fraction, cfg.sample_seed)
    log = ctx.lake.rows(OPS_INGEST_LOG, ["source_file", "size_bytes", "mtime", "committed_at", "settings_hash"])
    committed = {r["source_file"]: (r["size_bytes"], r["mtime"]) for r in log}
    committed_at = {r["source_file"]: r["committed_at"] for r in log}
    settings = settings_hash(cfg)
    # a file logged before its settings were recorded counts as ingested under today's
    other_settings = {r["source_file"] for r in log if r["settings_hash"] not in (None, settings)}
    prints = {f: _fingerprint(f) for f in files}
    if ctx.forced_full("ingest"):   # crawlake run --full ingest: every input file read again
        full_because, todo = "--full", files
    else:
        todo = [f for f in files if committed.get(f) != prints[f] or f in other_settings]
        # the last finished run's settings too: a run that re-read every file under these
        # settings and died before it was recorded leaves no file to re-read, only later stages
        last = [r["notes"].get("settings_hash") for r in incremental.succeeded_runs(ctx) if r["stage"] == "ingest"]
        changed = other_settings & set(files) or (last and last[-1] not in (None, settings))
        full_because = "ingest config changed" if changed else None
    console = Console(stderr=True)
    limits = cfg   # the kernel takes the ingest section as it is
    # the takedown list, read once here: a small ledger, handed to every task as it is
    takedowns = TakedownList.from_rows(ctx.lake.rows(OPS_TAKEDOWNS, ["takedown_id", "requested_at", "urls",
                                                                     "url_prefixes", "domains", "doc_ids"]))

    summaries: dict[str, dict] = {}
    started = time.perf_counter()
    for start in range(0, len(todo), cfg.files_per_commit):
        summaries.update(_ingest_files(ctx, todo[start:start + cfg.files_per_commit], prints, committed_at, limits,
                                       takedowns, settings))
        if cfg.progress:
            elapsed = max(time.perf_counter() - started, 1e-9)
            records = sum(s["records"] for s in summaries.values())
            mbytes = sum(s.get("bytes", 0) for s in summaries.values()) / 1e6
            console.print(f"ingest: {len(files) - len(todo) + len(summaries)}/{len(files)} files, {records:,} records, "
                          f"{records / elapsed:,.0f} records/s, {mbytes / elapsed:,.1f} MB/s", highlight=False)

    notes = {**incremental.mode_notes(full_because), **_notes(files, todo, summaries),
             "files_under_other_settings": len(other_settings - set(files)), "settings_hash": settings}
    return StageResult(rows_in=notes["records"], rows_out=notes["documents"],
                       rows_quarantined=sum(s["quarantined"] for s in summaries.values()), notes=notes)


def _notes(files: list[str], todo: list[str], summaries: dict[str, dict]) -> dict[str, object]:
    """The stage notes. Every record read is counted once:
    ``records == documents + sum(skipped_by_type) + sum(quarantined_by_reason)`` (duplicates are
    the ``duplicate_record`` part of the quarantined, ``taken_down`` the records a takedown kept
    out); ``damage_by_reason`` counts the quarantine rows that stand for a damaged file rather
    than a record."""
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
        "taken_down": total["quarantined_by_reason"]["taken_down"],
    }
    if total["damage"]:
        notes["damage_by_reason"] = dict(sorted(total["damage"].items()))
    return notes
