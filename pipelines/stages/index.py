"""index: ``gold.embeddings`` → FAISS index shards + ``gold.index_manifest``.

The configured model revision's vectors are split into ``index.shards`` shards by
``pmod(xxhash64(doc_id), shards)`` (a document's chunks stay together). Only shards whose rows or
settings changed, or whose files are gone, are built (every shard, from scratch, under
``crawlake run --full index``), one Spark task each (``applyInArrow``).

**Which shards changed.** When vectors were only added since this stage's last successful run
(:func:`pipelines.incremental.plan` with the ``index`` and ``embed`` sections' hash says
incremental, ``gold.embeddings``' log shows no removed rows since, and the files of every shard in
the manifest are there), only the added rows are read (:meth:`pipelines.lake.Lake.read`
``added_since``): the shards they fall in changed, the others did not. Otherwise every vector is
read and each shard's content fingerprint (row count and an order-free sum of row hashes, with the
index settings) is compared with the manifest's.

**Extend or rebuild.** A changed shard whose stored rows are all still there is *extended*: the
new vectors are added to its stored index (FAISS ``add``: HNSW inserts them into its graph, as a
build does; IVF-PQ encodes them with the quantizers trained on the stored rows, so only while it
gains at most as many rows as it held), so a new crawl costs its own vectors, not a rebuild of the
history. Only an index that holds its vectors exactly (flat, HNSW, IVF-PQ with refinement) is
extended: tuning needs them. Any other changed shard (rows removed or replaced, other settings, a
stored shard without row hashes) is rebuilt from all its rows. A task then tunes the shard's search
effort (ef_search or nprobe) until recall@10 against exact search reaches ``index.target_recall``
on a sample of its own vectors (:func:`~pipelines.kernels.index.tune_search`), and writes
``<dir>/shard-NNNNN-<fp>.faiss`` and its row map ``.ids.parquet`` (doc_id, chunk_id, char_start,
char_end and the row hash, in index-id order; the index settings in its metadata). An extended
shard holds the same vectors as a rebuilt one (the same fingerprint); its graph or lists, and so
its tuned effort and recall, depend on the order its rows arrived in.

The manifest rows of this revision are then replaced in one commit, and files no manifest row
names any more are removed. The manifest records a shard's path relative to the lake root when it
lies under it (as Delta's own add actions do), so a copied or moved lake searches its own shards.
``<dir>`` is ``<index.path or lake root/_index>/<model>/<revision>``; any fsspec URL works, since
shards are written as bytes (``faiss.serialize_index``).
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
    """A shard's content fingerprint: 16 hex digits of sha256 over the index ``settings``, its
    ``rows`` and the sum of its rows' hashes (xxhash64 of :data:`ROW_KEY`; the sum makes it
    independent of row order)."""
    return hashlib.sha256(f"{settings}:{rows}:{hash_sum}".encode()).hexdigest()[:16]


def _build_shard(table: pa.Table, *, whole: bool, directory: str, params: IndexConfig, target_recall: float,
                 version: int, settings: str, stored: dict[int, str]) -> pa.Table:
    """One shard's rows → its files, and its manifest row with ``outcome`` (runs in a Spark Python
    worker).

    ``whole``: ``table`` holds every row of the shard; else only rows added since the shard was
    stored, and the shard is extended with them or, when it cannot be, comes back with outcome
    ``needs_all_rows`` (``unchanged`` when it holds them all already). ``stored``: shard → URL of
    its current file, for the shards that may be extended."""
    import fsspec
    import faiss
    import numpy as np
    import pyarrow.parquet as pq

    from pipelines.kernels.index import build_index, tune_search

    def matrix(rows: pa.Table):
        flat = rows.column("vector").combine_chunks().values.to_numpy(zero_copy_only=False)
        return np.asarray(flat, np.float32).reshape(len(rows), dim)

    t0 = time.perf_counter()
    shard = table.column("shard")[0].as_py()
    dim = table.column("dim")[0].as_py()
    table = table.sort_by([("doc_id", "ascending"), ("chunk_id", "ascending")])  # a reproducible id order
    extended = _extension(stored.get(shard), table, settings, params.type, whole)
    if extended is None and not whole:
        return _outcome(shard, "needs_all_rows", len(table))
    if extended is None:
        row_map = table.select(list(ROW_MAP_COLUMNS))
        vectors = matrix(table)
        index, built = build_index(vectors, params)
    else:
        index, row_map, held, added = extended
        if not len(added):
            return _outcome(shard, "unchanged", len(table))
        built = params.type   # only a shard built as the configured type is extended
        index.add(matrix(added))
        row_map = pa.concat_tables([row_map, added.select(list(ROW_MAP_COLUMNS))])
        vectors = np.vstack([held, matrix(added)])   # the shard's vectors in index-id order, as tuning needs
    tuned, recall = tune_search(index, vectors, params, target_recall) if target_recall > 0 else (params, float("nan"))
    fp = fingerprint(settings, len(row_map), sum(row_map.column("row_hash").to_pylist()))
    path = f"{directory}/shard-{shard:05d}-{fp[:12]}.faiss"
    with fsspec.open(path, "wb", auto_mkdir=True) as f:
        f.write(faiss.serialize_index(index).tobytes())
    with fsspec.open(path + ".ids.parquet", "wb") as f:
        pq.write_table(row_map.replace_schema_metadata({SETTINGS_KEY: settings.encode()}), f)
    return pa.table({
        "shard": pa.array([shard], pa.int32()), "path": [path], "index_type": [built],
        "rows": pa.array([len(row_map)], pa.int64()), "dim": pa.array([dim], pa.int32()), "fingerprint": [fp],
        "ef_search": pa.array([tuned.ef_search], pa.int32()), "nprobe": pa.array([tuned.nprobe], pa.int32()),
        "refine_k_factor": pa.array([tuned.refine_k_factor], pa.int32()), "tuned_recall": [recall],
        "embeddings_version": pa.array([version], pa.int64()), "build_s": [time.perf_counter() - t0],
        "outcome": ["built" if extended is None else "extended"], "rows_in": pa.array([len(table)], pa.int64()),
    })


def _outcome(shard: int, outcome: str, rows_in: int) -> pa.Table:
    """A task's row for a shard it wrote nothing for: only ``shard``, ``outcome`` and ``rows_in``."""
    return pa.table({"shard": pa.array([shard], pa.int32()), "outcome": [outcome],
                     "rows_in": pa.array([rows_in], pa.int64())})


def _extension(path: str | None, table: pa.Table, settings: str, kind: str, whole: bool):
    """``(stored index, its row map, its vectors, the rows of table it lacks)`` when the shard of
    type ``kind`` stored at ``path`` can be extended with ``table``'s rows: built with
    ``settings``, holding its vectors exactly (:func:`~pipelines.kernels.index.stored_vectors`:
    tuning needs them), and for IVF-PQ gaining at most as many rows as it holds; when ``whole``
    (``table`` is every row of the shard), also every stored row still in ``table`` and some
    rows added. Else None."""
    if path is None:
        return None
    import fsspec
    import faiss
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.kernels.index import stored_vectors

    with fsspec.open(path + ".ids.parquet", "rb") as f:
        row_map = pq.read_table(f)
    meta = row_map.schema.metadata or {}
    if meta.get(SETTINGS_KEY) != settings.encode() or "row_hash" not in row_map.column_names:
        return None
    row_map = row_map.replace_schema_metadata(None)
    present = pc.is_in(table.column("row_hash"), value_set=row_map.column("row_hash"))
    added = table.filter(pc.invert(present))
    if whole and (len(table) - len(added) != len(row_map) or not len(added)):
        return None
    if kind == "ivfpq" and len(added) > len(row_map):
        return None
    with fsspec.open(path, "rb") as f:
        index = faiss.deserialize_index(np.frombuffer(f.read(), np.uint8))
    held = stored_vectors(index)
    return None if held is None else (index, row_map, held, added)


def config_hash(cfg: Config) -> str:
    """The hash of the ``index`` and ``embed`` sections (:func:`pipelines.incremental.config_hash`):
    after a change to either, a run reads every vector again (unchanged shards are still kept, by
    fingerprint)."""
    return incremental.config_hash(cfg, ("index", "embed"))


def run(ctx: StageContext) -> StageResult:
    """Build the shards whose vectors changed; see the module docstring. Returns rows_in = vectors
    read, rows_out = vectors indexed, and notes: mode, full_because, stage_config_hash, index_type,
    shards, shards_rebuilt, shards_extended, shards_unchanged, min_tuned_recall, built_types, dir."""
    import fsspec

    lake, cfg = ctx.lake, ctx.cfg
    emb_params = EmbedParams.resolve(cfg.embed)
    params = cfg.index   # the kernel takes the index section as it is
    mine = revision_predicate(emb_params)
    version = lake.version(GOLD_EMBEDDINGS) or 0
    directory = index_dir(cfg, emb_params)
    settings = hashlib.sha256(json.dumps([cfg.index.model_dump(exclude={"path"})], sort_keys=True).encode()).hexdigest()[:8]
    plan = incremental.plan(ctx, "index", config_hash(cfg), (GOLD_INDEX_MANIFEST,), upstream=("embed",))
    forced = ctx.forced_full("index")   # crawlake run --full index: every shard rebuilt, fingerprints aside

    def with_shards(vectors):
        return (vectors.filter(mine)
                .withColumn("shard", F.pmod(F.xxhash64("doc_id"), F.lit(cfg.index.shards)).cast("int"))
                .withColumn("row_hash", F.xxhash64(*ROW_KEY)))

    # this revision's manifest rows: one per shard, read and replaced on the driver
    revision = Rows("model_revision", (emb_params.model_revision,), where={"model": emb_params.model_label})
    old = {r["shard"]: r for r in lake.rows(GOLD_INDEX_MANIFEST, GOLD_INDEX_MANIFEST.columns, revision)}

    def exists(path: str) -> bool:
        fs, p = fsspec.core.url_to_fs(path)
        return fs.exists(p) and fs.exists(p + ".ids.parquet")

    root = cfg.lake.root
    # this revision's shards whose files are still there, each looked up once (S3 round trips)
    on_disk = {} if forced else {s: uri for s in old if exists(uri := shard_uri(root, old[s]["path"]))}
    # a changed shard stored as the configured type may be extended (the task decides)
    stored = {s: uri for s, uri in on_disk.items() if old[s]["index_type"] == cfg.index.type}

    def build(vectors, shards: int, whole: bool) -> list[dict]:
        # a manifest row without what the driver adds, plus what the task did and the rows it got
        out = pa.schema([f for f in GOLD_INDEX_MANIFEST.nullable_arrow if f.name not in ("model", "model_revision", "built_at")]
                        + [pa.field("outcome", pa.string()), pa.field("rows_in", pa.int64())])

        def task(table: pa.Table) -> pa.Table:  # type hints: how applyInArrow tells the table API
            got = _build_shard(table, whole=whole, directory=directory, params=params, version=version,
                               target_recall=cfg.index.target_recall, settings=settings, stored=stored)
            return pa.table([got.column(f.name).cast(f.type) if f.name in got.column_names else pa.nulls(len(got), f.type)
                             for f in out], schema=out)

        # shard s goes to task s mod n (a hash of the shard number would put several in one task
        # while another core idles: with 4 shards in 4 tasks, Murmur3 puts shards 0, 1 and 3 together)
        return [r.asDict() for r in (vectors.select("shard", *ROW_MAP_COLUMNS, "vector", "dim")
                                     .repartitionById(min(shards, ctx.spark.sparkContext.defaultParallelism), "shard")
                                     .groupBy("shard").applyInArrow(task, from_arrow_schema(out)).collect())]

    since = None if plan.full else incremental.last_input_version(ctx, "index", GOLD_EMBEDDINGS)
    if since is not None and on_disk.keys() == old.keys() and not lake.removed_rows_since(GOLD_EMBEDDINGS, since):
        # Vectors were only added since the last run, and every shard's files are there: the
        # shards that gained rows are extended from the added rows alone, the others are as they
        # were; a shard that cannot be extended (a new one among them) is rebuilt from all its rows.
        outcomes = build(with_shards(lake.read(GOLD_EMBEDDINGS, added_since=since)), cfg.index.shards, whole=False)
        todo = sorted(r["shard"] for r in outcomes if r["outcome"] == "needs_all_rows")
        changed = {r["shard"] for r in outcomes if r["outcome"] != "unchanged"}
        keep = {s: old[s] for s in old if s not in changed}
        scanned = 0
    else:
        rows = with_shards(lake.read(GOLD_EMBEDDINGS))
        sums = (rows.groupBy("shard")
                .agg(F.count("*").alias("n"), F.sum(F.col("row_hash").cast("decimal(38,0)")).alias("h"))
                .collect())
        fingerprints = {r.shard: fingerprint(settings, r.n, int(r.h)) for r in sums}
        keep = {s: old[s] for s in on_disk if old[s]["fingerprint"] == fingerprints.get(s)}
        todo = sorted(set(fingerprints) - set(keep))
        outcomes, scanned = [], sum(r.n for r in sums)
    if todo:
        outcomes += build(with_shards(lake.read(GOLD_EMBEDDINGS)).filter(F.col("shard").isin(todo)), len(todo), whole=True)
    # vectors read: all of the revision's for fingerprints, else what the tasks got
    rows_in = scanned or sum(r["rows_in"] for r in outcomes)
    built = [r for r in outcomes if r["outcome"] in ("built", "extended")]
    now = datetime.now(timezone.utc)
    entries = list(keep.values()) + [
        {**{c: r[c] for c in GOLD_INDEX_MANIFEST.columns if c in r},
         "model": emb_params.model_label, "model_revision": emb_params.model_revision, "built_at": now} for r in built]
    # manifests written before paths were relative get them too when the shard is kept
    entries = [{**e, "path": manifest_path(root, e["path"])} for e in entries]
    audited = quality.gate(ctx, ctx.stage, GOLD_INDEX_MANIFEST, GOLD_INDEX_MANIFEST.suite_name, quality.validate_arrow(
        pa.Table.from_pylist(entries, schema=GOLD_INDEX_MANIFEST.nullable_arrow), GOLD_INDEX_MANIFEST), record=False)
    lake.replace_rows(GOLD_INDEX_MANIFEST, [tuple(e[c] for c in GOLD_INDEX_MANIFEST.columns) for e in entries], revision)
    quality.record_results(ctx, audited)
    _remove_unlisted(directory, {shard_uri(root, e["path"]) for e in entries})
    extended = sum(r["outcome"] == "extended" for r in built)
    return StageResult(
        rows_in=rows_in, rows_out=sum(e["rows"] for e in entries),
        notes={**plan.notes(), "index_type": cfg.index.type, "shards": len(entries),
               "shards_rebuilt": len(built) - extended, "shards_extended": extended,
               "min_tuned_recall": round(min((e["tuned_recall"] for e in entries), default=1.0), 4),
               "shards_unchanged": len(keep), "built_types": ",".join(sorted({e["index_type"] for e in entries})),
               "dir": directory},
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
