"""index: ``gold.embeddings`` → FAISS index shards + ``gold.index_manifest``.

The configured model revision's vectors are split into ``index.shards`` shards by
``pmod(xxhash64(doc_id), shards)`` (a document's chunks stay together). A shard is stored as one
or more *segments*, each its own FAISS index over some of the shard's vectors with its own row map
and tuned search effort; a search asks every segment of every shard and merges the top k (the
segments of a log-structured index, as in Lucene). Only shards whose rows or settings changed, or
whose files are gone, are written (every shard, from scratch, under ``crawlake run --full
index``), one Spark task each (``applyInArrow``).

**Which shards changed.** When vectors were only added since this stage's last successful run
(:func:`pipelines.incremental.plan` with the ``index`` and ``embed`` sections' hash says
incremental, ``gold.embeddings``' log shows no removed rows since, and the files of every segment
in the manifest are there), only the added rows are read (:meth:`pipelines.lake.Lake.read`
``added_since``): the shards they fall in changed, the others did not. Otherwise every vector is
read and each shard's row count and row-hash sum (mod 2**64, order-free) are compared with its
segments' in the manifest, whose fingerprints also say they were built with these settings.

**A new segment or a rebuild.** A changed shard whose stored rows are all still there gains a
segment holding the rows it lacks: a new crawl costs its own vectors, not a pass over the
history's. The new segment is built and tuned on those rows alone; the stored segments' files are
only read for their row maps' hashes. A shard with rows removed or replaced, with segments built
with other settings (or from before row hashes), or that would hold more than
``index.max_segments`` segments is rebuilt from all its rows as one segment (compacted). A task
tunes each segment's search effort (ef_search or nprobe) until recall@10 against exact search
reaches ``index.target_recall`` on a sample of its own vectors
(:func:`~pipelines.kernels.index.tune_search`), and writes
``<dir>/shard-NNNNN-SSSS-<fp>.faiss`` and its row map ``.ids.parquet`` (doc_id, chunk_id,
char_start, char_end and the row hash, in index-id order; the index settings in its metadata).
Searching a shard's segments finds the same exact neighbours as one index over all its rows;
approximate results (HNSW, IVF-PQ) differ with the layout, each segment at its tuned recall. A
segment of at most ``index.flat_max_rows`` vectors (a new crawl's, on most lakes) is flat (exact),
whatever ``index.type``: built at once, and scanned about as fast as a graph is searched; so is
a small segment of an IVF-PQ shard, too small to train it.

The manifest rows of this revision, one per segment, are then replaced in one commit, and files
no manifest row names any more are removed. The manifest records a segment's path relative to the
lake root when it lies under it (as Delta's own add actions do), so a copied or moved lake searches
its own shards. ``<dir>`` is ``<index.path or lake root/_index>/<model>/<revision>``; any fsspec
URL works, since segments are written as bytes (``faiss.serialize_index``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from datetime import datetime, timezone

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines import incremental, quality
from pipelines.config import Config, IndexConfig
from pipelines.kernels.embed import EmbedParams
from pipelines.lake import Rows
from pipelines.stage import StageContext, StageResult
from pipelines.stages.embed import revision_predicate
from schemas.catalog import GOLD_EMBEDDINGS, GOLD_INDEX_MANIFEST

ROW_MAP_COLUMNS = ("doc_id", "chunk_id", "char_start", "char_end", "row_hash")
ROW_KEY = ("doc_id", "chunk_id", "char_start", "char_end", "vector")   # what a row's hash covers
SETTINGS_KEY = b"crawlake.index_settings"   # row-map metadata: the settings the shard was built with


def index_dir(cfg: Config, params: EmbedParams) -> str:
    """Where this model revision's shard files live."""
    base = (cfg.index.path or f"{cfg.lake.root.rstrip('/')}/_index").rstrip("/")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", params.model_label).strip("_")
    return f"{base}/{slug}/{params.model_revision}"


def manifest_path(root: str, path: str) -> str:
    """``path`` as the manifest records it: relative to the lake ``root`` when under it, else as is."""
    root = root.rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else path


def shard_uri(root: str, path: str) -> str:
    """A manifest ``path`` → the file's URL or absolute path (inverse of :func:`manifest_path`)."""
    return path if "://" in path or path.startswith("/") else f"{root.rstrip('/')}/{path}"


def fingerprint(settings: str, rows: int, hash_sum: int) -> str:
    """A segment's content fingerprint: 16 hex digits of sha256 over the index ``settings``, its
    ``rows`` and :func:`hash_sum` of its rows' hashes (xxhash64 of :data:`ROW_KEY`)."""
    return hashlib.sha256(f"{settings}:{rows}:{hash_sum}".encode()).hexdigest()[:16]


def hash_sum(hashes) -> int:
    """The sum of int64 row ``hashes`` wrapped to a signed int64 (mod 2**64): independent of row
    order, and the sums of a shard's segments add up to the shard's."""
    return (int(sum(hashes)) + 2**63) % 2**64 - 2**63


def _build_shard(table: pa.Table, *, whole: bool, directory: str, params: IndexConfig, target_recall: float,
                 version: int, settings: str, stored: dict[int, list[tuple[int, str]]], max_segments: int) -> pa.Table:
    """One shard's rows → a segment's files, and its manifest row with ``outcome`` (runs in a
    Spark Python worker).

    ``stored``: shard → (segment, URL of its file) of each stored segment, for the shards whose
    files are all there. The rows of ``table`` that no stored segment holds become a new segment
    (outcome ``extended``) when the stored segments were built with ``settings``, hold only rows
    still in ``table`` (when ``whole``), and number fewer than ``max_segments``. Otherwise, when
    ``whole`` (``table`` is every row of the shard), the shard is rebuilt as segment 0 (``built``);
    when not (only rows added since the shard was stored), nothing is written and the outcome is
    ``needs_all_rows``, or ``unchanged`` when the stored segments hold them all already."""
    import fsspec
    import faiss
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.kernels.index import build_index, tune_search

    t0 = time.perf_counter()
    shard = table.column("shard")[0].as_py()
    dim = table.column("dim")[0].as_py()
    table = table.sort_by([("doc_id", "ascending"), ("chunk_id", "ascending")])  # a reproducible id order
    segments = stored.get(shard, [])
    held = _held_row_hashes([uri for _, uri in segments], settings) if segments else None
    added = None if held is None else table.filter(pc.invert(pc.is_in(table.column("row_hash"), value_set=held)))
    if added is not None and not whole and not len(added):
        return _outcome(shard, "unchanged", len(table))
    extend = (added is not None and len(added) > 0 and len(segments) < max_segments
              and (not whole or len(table) - len(added) == len(held)))
    if not extend and not whole:
        return _outcome(shard, "needs_all_rows", len(table))
    rows = added if extend else table
    segment = max(s for s, _ in segments) + 1 if extend else 0
    flat = rows.column("vector").combine_chunks().values.to_numpy(zero_copy_only=False)
    vectors = np.asarray(flat, np.float32).reshape(len(rows), dim)
    index, built = build_index(vectors, params)
    tuned, recall = tune_search(index, vectors, params, target_recall) if target_recall > 0 else (params, float("nan"))
    row_map = rows.select(list(ROW_MAP_COLUMNS))
    hashes = hash_sum(row_map.column("row_hash").to_pylist())
    fp = fingerprint(settings, len(row_map), hashes)
    path = f"{directory}/shard-{shard:05d}-{segment:04d}-{fp[:12]}.faiss"
    with fsspec.open(path, "wb", auto_mkdir=True) as f:
        f.write(faiss.serialize_index(index).tobytes())
    with fsspec.open(path + ".ids.parquet", "wb") as f:
        pq.write_table(row_map.replace_schema_metadata({SETTINGS_KEY: settings.encode()}), f)
    return pa.table({
        "shard": pa.array([shard], pa.int32()), "segment": pa.array([segment], pa.int32()), "path": [path],
        "index_type": [built], "rows": pa.array([len(row_map)], pa.int64()), "dim": pa.array([dim], pa.int32()),
        "fingerprint": [fp], "row_hash_sum": pa.array([hashes], pa.int64()),
        "ef_search": pa.array([tuned.ef_search], pa.int32()), "nprobe": pa.array([tuned.nprobe], pa.int32()),
        "refine_k_factor": pa.array([tuned.refine_k_factor], pa.int32()), "tuned_recall": [recall],
        "embeddings_version": pa.array([version], pa.int64()), "build_s": [time.perf_counter() - t0],
        "outcome": ["extended" if extend else "built"], "rows_in": pa.array([len(table)], pa.int64()),
    })


def _outcome(shard: int, outcome: str, rows_in: int) -> pa.Table:
    """A task's row for a shard it wrote nothing for: only ``shard``, ``outcome`` and ``rows_in``."""
    return pa.table({"shard": pa.array([shard], pa.int32()), "outcome": [outcome],
                     "rows_in": pa.array([rows_in], pa.int64())})


def _held_row_hashes(paths: list[str], settings: str):
    """The row hashes (int64 array) the segments stored at ``paths`` hold, read from their row
    maps alone; None when one of them was built with other settings or has no row hashes (then a
    new segment cannot join them)."""
    import fsspec
    import pyarrow.parquet as pq

    hashes = []
    for path in paths:
        with fsspec.open(path + ".ids.parquet", "rb") as f:
            pf = pq.ParquetFile(f)
            meta = pf.schema_arrow.metadata or {}
            if meta.get(SETTINGS_KEY) != settings.encode() or "row_hash" not in pf.schema_arrow.names:
                return None
            hashes.append(pf.read(columns=["row_hash"]).column("row_hash"))
    return pa.chunked_array([c for h in hashes for c in h.chunks], pa.int64()).combine_chunks()


def config_hash(cfg: Config) -> str:
    """The hash of the ``index`` and ``embed`` sections (:func:`pipelines.incremental.config_hash`):
    after a change to either, a run reads every vector again (unchanged shards are still kept, by
    fingerprint)."""
    return incremental.config_hash(cfg, ("index", "embed"))


def run(ctx: StageContext) -> StageResult:
    """Build the shards whose vectors changed; see the module docstring. Returns rows_in = vectors
    read, rows_out = vectors indexed, and notes: mode, full_because, stage_config_hash, index_type,
    shards, segments, shards_rebuilt, shards_extended (gained a segment), shards_unchanged,
    min_tuned_recall, built_types, dir."""
    import fsspec

    lake, cfg = ctx.lake, ctx.cfg
    emb_params = EmbedParams.resolve(cfg.embed)
    params = cfg.index   # the kernel takes the index section as it is
    mine = revision_predicate(emb_params)
    version = lake.version(GOLD_EMBEDDINGS) or 0
    directory = index_dir(cfg, emb_params)
    # what a segment's vectors and search depend on: not where files go or how many segments may pile up
    settings = hashlib.sha256(json.dumps([cfg.index.model_dump(exclude={"path", "max_segments"})],
                                         sort_keys=True).encode()).hexdigest()[:8]
    plan = incremental.plan(ctx, "index", config_hash(cfg), (GOLD_INDEX_MANIFEST,), upstream=("embed",))
    forced = ctx.forced_full("index")   # crawlake run --full index: every shard rebuilt, fingerprints aside

    def with_shards(vectors):
        return (vectors.filter(mine)
                .withColumn("shard", F.pmod(F.xxhash64("doc_id"), F.lit(cfg.index.shards)).cast("int"))
                .withColumn("row_hash", F.xxhash64(*ROW_KEY)))

    # this revision's manifest rows: shard → its segments' rows, read and replaced on the driver
    revision = Rows("model_revision", (emb_params.model_revision,), where={"model": emb_params.model_label})
    old: dict[int, list[dict]] = {}
    for r in lake.rows(GOLD_INDEX_MANIFEST, GOLD_INDEX_MANIFEST.columns, revision):
        old.setdefault(r["shard"], []).append({**r, "segment": r["segment"] or 0})   # null: from before segments

    def exists(path: str) -> bool:
        fs, p = fsspec.core.url_to_fs(path)
        return fs.exists(p) and fs.exists(p + ".ids.parquet")

    root = cfg.lake.root
    # shard → (segment, URL) of its segments, for the shards whose files are all still there,
    # each looked up once (S3 round trips); a changed one may gain a segment (the task decides)
    segments = {s: [(e["segment"], shard_uri(root, e["path"])) for e in old[s]] for s in old}
    stored = {} if forced else {s: segs for s, segs in segments.items() if all(exists(uri) for _, uri in segs)}

    def build(vectors, shards: int, whole: bool) -> list[dict]:
        # a manifest row without what the driver adds, plus what the task did and the rows it got
        out = pa.schema([f for f in GOLD_INDEX_MANIFEST.nullable_arrow if f.name not in ("model", "model_revision", "built_at")]
                        + [pa.field("outcome", pa.string()), pa.field("rows_in", pa.int64())])

        def task(table: pa.Table) -> pa.Table:  # type hints: how applyInArrow tells the table API
            got = _build_shard(table, whole=whole, directory=directory, params=params, version=version,
                               target_recall=cfg.index.target_recall, settings=settings, stored=stored,
                               max_segments=cfg.index.max_segments)
            return pa.table([got.column(f.name).cast(f.type) if f.name in got.column_names else pa.nulls(len(got), f.type)
                             for f in out], schema=out)

        # shard s goes to task s mod n (a hash of the shard number would put several in one task
        # while another core idles: with 4 shards in 4 tasks, Murmur3 puts shards 0, 1 and 3 together)
        return [r.asDict() for r in (vectors.select("shard", *ROW_MAP_COLUMNS, "vector", "dim")
                                     .repartitionById(min(shards, ctx.spark.sparkContext.defaultParallelism), "shard")
                                     .groupBy("shard").applyInArrow(task, from_arrow_schema(out)).collect())]

    since = None if plan.full else incremental.last_input_version(ctx, "index", GOLD_EMBEDDINGS)
    if since is not None and stored.keys() == old.keys() and not lake.removed_rows_since(GOLD_EMBEDDINGS, since):
        # Vectors were only added since the last run, and every segment's files are there: the
        # shards that gained rows get a segment of the added rows alone, the others are as they
        # were; a shard that cannot (a new one, one at max_segments) is rebuilt from all its rows.
        outcomes = build(with_shards(lake.read(GOLD_EMBEDDINGS, added_since=since)), cfg.index.shards, whole=False)
        todo = sorted(r["shard"] for r in outcomes if r["outcome"] == "needs_all_rows")
        keep = set(old) - set(todo)
        scanned = 0
    else:
        rows = with_shards(lake.read(GOLD_EMBEDDINGS))
        sums = (rows.groupBy("shard")
                .agg(F.count("*").alias("n"), F.sum(F.col("row_hash").cast("decimal(38,0)")).alias("h"))
                .collect())
        current = {r.shard: (r.n, hash_sum([int(r.h)])) for r in sums}

        def unchanged(stored_rows: list[dict], n: int, h: int) -> bool:
            # every segment built with these settings, together holding the shard's rows
            return (all(e["row_hash_sum"] is not None
                        and e["fingerprint"] == fingerprint(settings, e["rows"], e["row_hash_sum"]) for e in stored_rows)
                    and sum(e["rows"] for e in stored_rows) == n
                    and hash_sum(e["row_hash_sum"] for e in stored_rows) == h)

        keep = {s for s in stored if s in current and unchanged(old[s], *current[s])}
        todo = sorted(set(current) - keep)
        outcomes, scanned = [], sum(r.n for r in sums)
    if todo:
        outcomes += build(with_shards(lake.read(GOLD_EMBEDDINGS)).filter(F.col("shard").isin(todo)), len(todo), whole=True)
    # vectors read: all of the revision's for fingerprints, else what the tasks got
    rows_in = scanned or sum(r["rows_in"] for r in outcomes)
    built = [r for r in outcomes if r["outcome"] in ("built", "extended")]
    extended = {r["shard"] for r in built if r["outcome"] == "extended"}
    now = datetime.now(timezone.utc)
    # the stored segments of shards kept as they were or that gained one, and the new segments
    entries = [e for s in sorted(keep | extended) for e in old[s]] + [
        {**{c: r[c] for c in GOLD_INDEX_MANIFEST.columns if c in r},
         "model": emb_params.model_label, "model_revision": emb_params.model_revision, "built_at": now} for r in built]
    # manifests written before paths were relative get them too when the segment is kept
    entries = [{**e, "path": manifest_path(root, e["path"])} for e in entries]
    audited = quality.gate(ctx, ctx.stage, GOLD_INDEX_MANIFEST, GOLD_INDEX_MANIFEST.suite_name, quality.validate_arrow(
        pa.Table.from_pylist(entries, schema=GOLD_INDEX_MANIFEST.nullable_arrow), GOLD_INDEX_MANIFEST), record=False)
    lake.replace_rows(GOLD_INDEX_MANIFEST, [tuple(e[c] for c in GOLD_INDEX_MANIFEST.columns) for e in entries], revision)
    quality.record_results(ctx, audited)
    _remove_unlisted(directory, {shard_uri(root, e["path"]) for e in entries})
    shards = {e["shard"] for e in entries}
    return StageResult(
        rows_in=rows_in, rows_out=sum(e["rows"] for e in entries),
        notes={**plan.notes(), "index_type": cfg.index.type, "shards": len(shards), "segments": len(entries),
               "shards_rebuilt": len(built) - len(extended), "shards_extended": len(extended),
               "min_tuned_recall": round(min((e["tuned_recall"] for e in entries), default=1.0), 4),
               "shards_unchanged": len(shards - {r["shard"] for r in built}),
               "built_types": ",".join(sorted({e["index_type"] for e in entries})), "dir": directory},
    )


def _remove_unlisted(directory: str, listed: set[str]) -> None:
    """Delete shard files of this revision that the manifest no longer names (after its commit)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(directory)
    if not fs.exists(root):
        return
    keep = {fsspec.core.url_to_fs(p)[1] for p in listed}
    keep |= {p + ".ids.parquet" for p in keep}
    for path in fs.ls(root, detail=False):
        if path not in keep and (path.endswith(".faiss") or path.endswith(".faiss.ids.parquet")):
            fs.rm(path)
