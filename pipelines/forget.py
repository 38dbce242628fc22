"""``crawlake forget``: take documents down from every table, index shard and later ingest, as one
audited operation recorded in ``ops.takedowns``.

``forget(cfg, Selectors.parse(domains=["example.com"]), "opt-out request 42", purge=True)`` runs,
through the runner (one run id, each step a row of ``ops.runs``, every commit carrying its
lineage, the usual summary):

1. **forget** — the selectors (:mod:`pipelines.kernels.takedown`: ``url``, ``url_prefix``,
   ``domain`` with its subdomains, ``doc_id``) are matched in Spark tasks against
   ``bronze.documents`` (``doc_id``, ``url``) and ``bronze.quarantine`` (``url``, and the doc_id of
   its ``warc_record_id``). The matched documents' rows are deleted, in one commit per table, from
   ``gold.embeddings`` (every model revision), ``gold.document_tokens``,
   ``silver.filter_decisions``, ``silver.documents_clean``, ``silver.duplicate_clusters`` (their
   own rows), ``silver.dedup_index``, ``silver.documents_dedup`` and last ``bronze.documents``;
   the matched quarantine rows from ``bronze.quarantine`` (by ``warc_record_id``). Every index
   segment, of any model revision, whose row map holds a removed document is dropped (its
   ``gold.index_manifest`` row, then its files). Then the request and what it removed
   (``{table: rows}``) are appended to ``ops.takedowns``, after its quality suite passed. Derived
   tables go first and ``bronze.documents`` last, so a forget that dies half way is finished by
   running it again (the deletes are idempotent; the takedown is recorded once it is done).
2. **tokenize** (when ``gold.token_sequences`` exists) — the stage as ``crawlake run`` runs it:
   incremental, it rewrites only the sequences that held a removed document's tokens (where it
   starts, and the sequences it runs on into), without them, and deletes those left empty
   (:mod:`pipelines.stages.tokenize`). ``removed`` counts the sequences where a removed document
   started.
3. **index** (when ``gold.index_manifest`` exists) — the stage as ``crawlake run`` runs it, for the
   configured model revision: a shard that lost a segment gains one holding that segment's
   remaining vectors (:mod:`pipelines.stages.index`), the others are kept. Dropped segments of
   other revisions stay dropped until ``crawlake run --stages index`` runs
   with that model (the notes say how many).
4. **purge** (``purge=True``) — :meth:`Lake.purge <pipelines.lake.Lake.purge>` of every table the
   steps above wrote: files rewritten where deletion vectors only mark deleted rows, then
   VACUUM with zero retention, so no data file still holds a removed row (the tables' earlier
   versions can no longer be read, by time travel or by a loader pinned to them). Also deleted:
   leftover staged files (``<root>/_staging``), FAISS shard files no manifest row names (under
   ``index.path`` or ``<root>/_index``), ``<root>/report.html`` (it samples documents: run
   ``crawlake report`` again), and source files under the lake root that held a removed record
   (the built-in sample crawl, ``<root>/_sample``, written again by the next ``crawlake run``
   without ``--input``). Source files elsewhere are the caller's.

Run it with the configuration the lake's runs use (``--env``, ``--set``): steps 2 and 3 are the
pipeline's own stages and build with it. Nothing else of the lake may run meanwhile.

**Duplicates of a removed document.** A selector names records, not texts: the documents dedup
removed as exact or near duplicates of a removed *kept* document are not removed (they have other
URLs), and they are not promoted either: their ``silver.duplicate_clusters`` rows stay, still
naming the removed document as the kept one, so incremental dedup keeps them decided and removed.
Their doc_ids are listed in ``ops.takedowns.duplicates_kept_out``; ``crawlake forget --doc-id``
removes them too. (A full dedup rebuild, after a dedup setting changed, decides every bronze
document again, and may keep one of them.)

**Later ingests.** Ingest reads ``ops.takedowns`` once per run and turns every record a request
names into a ``taken_down`` quarantine row without text (:mod:`pipelines.stages.ingest`).

**Limits.** ``ops.ingest_log`` keeps the files' counts as they were ingested. Delta logs keep
per-file statistics of removed files (minimum and maximum values, strings cut to 32 characters by
Spark and left out above 32 characters by crawlake's deltalake commits) until Delta's log cleanup;
no row text beyond such a prefix.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial

from rich.console import Console

from pipelines.config import Config
from pipelines.kernels.takedown import Selectors, TakedownList
from pipelines.stage import Stage, StageContext, StageResult
from schemas.catalog import (
    BRONZE_DOCUMENTS,
    BRONZE_QUARANTINE,
    GOLD_DOCUMENT_TOKENS,
    GOLD_EMBEDDINGS,
    GOLD_INDEX_MANIFEST,
    GOLD_TOKEN_SEQUENCES,
    OPS_TAKEDOWNS,
    SILVER_DEDUP_INDEX,
    SILVER_DOCUMENTS_CLEAN,
    SILVER_DOCUMENTS_DEDUP,
    SILVER_DUPLICATE_CLUSTERS,
    SILVER_FILTER_DECISIONS,
)

#: The tables keyed by ``doc_id`` a takedown deletes from, in this order: derived first,
#: ``bronze.documents`` (where matching starts) last.
DOCUMENT_TABLES = (GOLD_EMBEDDINGS, GOLD_DOCUMENT_TOKENS, SILVER_FILTER_DECISIONS, SILVER_DOCUMENTS_CLEAN,
                   SILVER_DUPLICATE_CLUSTERS, SILVER_DEDUP_INDEX, SILVER_DOCUMENTS_DEDUP, BRONZE_DOCUMENTS)
#: What the forget step writes.
FORGET_OUTPUTS = (*DOCUMENT_TABLES, BRONZE_QUARANTINE, GOLD_INDEX_MANIFEST, OPS_TAKEDOWNS)


@dataclass(frozen=True)
class TakedownResult:
    """What one ``forget`` did: its ``takedown_id`` (the ``ops.takedowns`` row) and ``run_id``
    (its ``ops.runs`` rows), the ``documents`` of ``bronze.documents`` it matched, ``removed``
    ``{table: rows}`` (``gold.token_sequences``: sequences where a removed document started;
    ``gold.index_manifest``: shard segments dropped), ``duplicates_kept_out`` (doc_ids, see the module
    docstring), ``purged`` (tables vacuumed; empty without purge) and ``files_removed`` (other
    files purge deleted)."""
    takedown_id: str
    run_id: str
    documents: int
    removed: dict[str, int]
    duplicates_kept_out: tuple[str, ...]
    purged: tuple[str, ...] = ()
    files_removed: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """A few lines for the terminal."""
        removed = ", ".join(f"{t} {n}" for t, n in self.removed.items() if n) or "nothing"
        out = [f"takedown {self.takedown_id} (run {self.run_id}): {self.documents} documents matched",
               f"  removed: {removed}"]
        if self.duplicates_kept_out:
            out.append(f"  {len(self.duplicates_kept_out)} duplicates of removed documents stay removed, not promoted: "
                       + " ".join(self.duplicates_kept_out))
        if self.purged:
            out.append(f"  purged: {len(self.purged)} tables vacuumed, {len(self.files_removed)} other files deleted")
        return out


@dataclass
class _Request:
    """One forget call: what it asks, and what its steps hand on (filled in as they run)."""
    takedown_id: str
    requested_at: datetime
    selectors: Selectors
    reason: str
    purge: bool
    source_files: set[str] = field(default_factory=set)
    result: TakedownResult | None = None
    purged: tuple[str, ...] = ()
    files_removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Step(Stage):
    """A step of one forget call that the runner runs like a pipeline stage."""
    action: Callable[[StageContext], StageResult] | None = None

    def run(self, ctx: StageContext) -> StageResult:
        return self.action(ctx)


def new_takedown_id(at: datetime) -> str:
    """``<at as YYYYmmddTHHMMSSZ>-<8 random hex digits>``."""
    return at.strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(4)


def forget(cfg: Config, selectors: Selectors, reason: str, *, purge: bool = False,
           console: Console | None = None) -> TakedownResult:
    """Take down the documents ``selectors`` name (see the module docstring for every step), with
    ``reason`` (free text, recorded); ``purge``: also remove their bytes from storage.

    Raises ValueError for a blank reason, no selector, or a lake without ``bronze.documents``
    (before any write), and :class:`~pipelines.runner.StageFailed` after recording a failed step in
    ``ops.runs`` (later steps do not run; running the same forget again finishes it). Selectors
    that match nothing are not an error: the request is recorded with nothing removed."""
    from pipelines.lake import Lake
    from pipelines.runner import run_stages
    from pipelines.session import get_spark
    from pipelines.stages import STAGES

    if not reason or not reason.strip():
        raise ValueError("a takedown needs a reason (--reason), e.g. \"opt-out request 42\"")
    if selectors.empty:
        raise ValueError("name what to take down: --url, --url-prefix, --domain or --doc-id (each repeatable)")
    lake = Lake(get_spark(cfg.spark, cfg.lake), cfg.lake)
    if not lake.exists(BRONZE_DOCUMENTS):
        raise ValueError(f"no bronze.documents at {lake.location(BRONZE_DOCUMENTS)}: nothing to take down "
                         "(--lake-root; `crawlake run` makes the tables)")
    now = datetime.now(timezone.utc)
    request = _Request(new_takedown_id(now), now, selectors, reason.strip(), purge)
    steps: list[Stage] = [_Step("forget", __name__, (BRONZE_DOCUMENTS, BRONZE_QUARANTINE, OPS_TAKEDOWNS), FORGET_OUTPUTS,
                                "remove the documents a takedown names, record it in ops.takedowns",
                                action=partial(_forget, request=request))]
    steps += [STAGES[name] for name, spec in (("tokenize", GOLD_TOKEN_SEQUENCES), ("index", GOLD_INDEX_MANIFEST))
              if lake.exists(spec)]
    if purge:
        vacuumed = tuple({spec.qualified_name: spec for step in steps for spec in step.outputs}.values())
        steps.append(_Step("purge", __name__, (), vacuumed, "rewrite and vacuum the files that held removed rows",
                           action=partial(_purge, request=request, tables=vacuumed)))
    run_stages(cfg, steps, console)
    return replace(request.result, purged=request.purged, files_removed=request.files_removed)


# -- step 1: forget ----------------------------------------------------------------------------

def _named(batches, *, takedowns: TakedownList, key: str):
    """A task: the rows of ``batches`` a takedown names. ``key`` ``doc_id``: the rows carry it;
    ``warc_record_id``: their doc_id is derived from it (quarantine rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipelines.kernels.warc import doc_id_for

    for batch in batches:
        ids = batch.column(key)
        if key == "warc_record_id":
            ids = pa.array([doc_id_for(r) if r else None for r in ids.to_pylist()], pa.string())
        yield batch.filter(pc.is_valid(takedowns.match_arrays(batch.column("url"), ids)))


def _forget(ctx: StageContext, request: _Request) -> StageResult:
    from pyspark.sql import functions as F

    lake, spark = ctx.lake, ctx.spark
    takedowns = TakedownList([(request.takedown_id, request.selectors)])
    columns = "{} string, url string, source_file string"
    docs = (lake.read(BRONZE_DOCUMENTS).select("doc_id", "url", "source_file")
            .mapInArrow(partial(_named, takedowns=takedowns, key="doc_id"), columns.format("doc_id")).collect())
    quarantined = (lake.read(BRONZE_QUARANTINE).select("warc_record_id", "url", "source_file")
                   .mapInArrow(partial(_named, takedowns=takedowns, key="warc_record_id"),
                               columns.format("warc_record_id")).collect())
    ids = sorted({r.doc_id for r in docs})
    keys = spark.createDataFrame([(d,) for d in ids], "doc_id string")

    # before the deletes: the duplicates a removed kept document leaves behind, and the
    # sequences where a removed document starts (the tokenize step rewrites them)
    kept_out = sorted(r.doc_id for r in (
        lake.read(SILVER_DUPLICATE_CLUSTERS).filter(~F.col("kept"))
        .join(keys.withColumnRenamed("doc_id", "cluster_id"), "cluster_id", "left_semi")
        .join(keys, "doc_id", "left_anti").select("doc_id").distinct().collect()))
    removed = {GOLD_TOKEN_SEQUENCES.qualified_name: (
        lake.read(GOLD_TOKEN_SEQUENCES).select("seq_id", F.explode("doc_ids").alias("doc_id"))
        .join(keys, "doc_id", "left_semi").select("seq_id").distinct().count())}
    removed[GOLD_INDEX_MANIFEST.qualified_name] = _drop_shards(ctx, set(ids))
    for spec in DOCUMENT_TABLES:
        removed[spec.qualified_name] = lake.read(spec).join(keys, "doc_id", "left_semi").count() if ids else 0
        lake.delete_rows(spec, "doc_id", ids)
    record_ids = sorted({r.warc_record_id for r in quarantined})
    removed[BRONZE_QUARANTINE.qualified_name] = len(quarantined)
    lake.delete_rows(BRONZE_QUARANTINE, "warc_record_id", record_ids)

    row = {"takedown_id": request.takedown_id, "requested_at": request.requested_at, "run_id": ctx.run_id,
           "reason": request.reason, **request.selectors.as_dict(), "documents": len(ids),
           "removed": dict(sorted(removed.items())), "duplicates_kept_out": kept_out, "purge": request.purge}
    _record(ctx, row)
    request.source_files = {r.source_file for r in (*docs, *quarantined)}
    request.result = TakedownResult(request.takedown_id, ctx.run_id, len(ids), row["removed"], tuple(kept_out))
    return StageResult(rows_in=len(ids) + len(quarantined), rows_out=sum(removed.values()),
                       notes={"takedown_id": request.takedown_id, "documents": len(ids),
                              "quarantine_rows": len(quarantined), "removed_by_table": row["removed"],
                              "duplicates_kept_out": len(kept_out)})


def _record(ctx: StageContext, row: dict) -> None:
    """Append ``row`` to ``ops.takedowns`` once its suite passed (write-audit-publish)."""
    import pyarrow as pa

    from pipelines import quality

    results = quality.validate_arrow(pa.Table.from_pylist([row], schema=OPS_TAKEDOWNS.nullable_arrow), OPS_TAKEDOWNS)
    audited = quality.gate(ctx, ctx.stage, OPS_TAKEDOWNS, OPS_TAKEDOWNS.suite_name, results, record=False)
    ctx.lake.append_rows(OPS_TAKEDOWNS, [tuple(row[c] for c in OPS_TAKEDOWNS.columns)])
    quality.record_results(ctx, audited)


def _drop_shards(ctx: StageContext, doc_ids: set[str]) -> int:
    """Drop every index segment, of any model revision, whose row map holds one of ``doc_ids``:
    its manifest row (one commit), then its files. Returns how many."""
    import fsspec

    from pipelines.lake import read as lake_read

    if not doc_ids:
        return 0
    dropped = []
    for entry in ctx.lake.rows(GOLD_INDEX_MANIFEST, ["path"]):
        uri = lake_read.under_root(ctx.cfg.lake.root, entry["path"])
        try:
            held = lake_read.read_parquet(uri + ".ids.parquet", ["doc_id"]).column("doc_id").to_pylist()
        except FileNotFoundError:   # a shard without files: the index stage rebuilds it anyway
            continue
        if doc_ids.intersection(held):
            dropped.append((entry["path"], uri))
    ctx.lake.delete_rows(GOLD_INDEX_MANIFEST, "path", [path for path, _ in dropped])
    for _, uri in dropped:
        for name in (uri, uri + ".ids.parquet"):
            fs, path = fsspec.core.url_to_fs(name)
            if fs.exists(path):
                fs.rm(path)
    return len(dropped)


# -- step 4: purge -----------------------------------------------------------------------------

def _purge(ctx: StageContext, request: _Request, tables: tuple) -> StageResult:
    import fsspec

    from pipelines.lake import read as lake_read

    lake = ctx.lake
    present = [spec for spec in tables if lake.exists(spec)]
    deleted = {spec.qualified_name: lake.purge(spec) for spec in present}
    files: list[str] = []
    if lake.remove_staging():
        files.append(f"{lake.root}/_staging")
    # shard files no manifest row names (of any revision): dropped shards, a build that died
    listed = {fsspec.core.url_to_fs(lake_read.under_root(ctx.cfg.lake.root, r["path"]))[1]
              for r in lake.rows(GOLD_INDEX_MANIFEST, ["path"])}
    listed |= {p + ".ids.parquet" for p in listed}
    fs, base = fsspec.core.url_to_fs((ctx.cfg.index.path or f"{ctx.cfg.lake.root.rstrip('/')}/_index").rstrip("/"))
    if fs.exists(base):
        for path in fs.find(base):
            if path.endswith((".faiss", ".faiss.ids.parquet")) and path not in listed:
                fs.rm(path)
                files.append(path)
    # files under the lake root that hold pages: the report's samples, the built-in sample crawl
    root = ctx.cfg.lake.root.rstrip("/")
    for name in (f"{root}/report.html", *sorted(f for f in request.source_files if _under(f, root))):
        fs, path = fsspec.core.url_to_fs(name)
        if fs.exists(path):
            fs.rm(path)
            files.append(name)
    request.purged, request.files_removed = tuple(deleted), tuple(files)
    return StageResult(rows_in=len(present), rows_out=len(present),
                       notes={"tables_vacuumed": len(present),
                              "files_vacuumed_by_table": {k: v for k, v in deleted.items() if v},
                              "other_files_removed": len(files)})


def _under(path: str, root: str) -> bool:
    """Whether ``path`` lies under the lake ``root`` (local paths compared absolute)."""
    import os

    if "://" not in path and "://" not in root:
        path, root = os.path.abspath(path), os.path.abspath(root)
    return path.startswith(root.rstrip("/") + "/")
