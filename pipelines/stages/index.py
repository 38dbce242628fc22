"""index: ``gold.embeddings`` → FAISS index shards + ``gold.index_manifest``.

The configured model revision's vectors are split into ``index.shards`` shards by
``pmod(xxhash64(doc_id), shards)`` (a document's chunks stay together). Each shard's content
fingerprint (row count and an order-free sum of row hashes, with the index parameters) is compared
with the manifest: only shards whose rows or parameters changed, or whose files are gone, are
built (every shard, from scratch, under ``crawlake run --full index``), one Spark task each
(``applyInArrow``). A changed shard whose stored rows are all still there is *extended*: the new
vectors are added to its stored index (FAISS ``add``: HNSW inserts them into its graph, as a build
does; IVF-PQ encodes them with the quantizers trained on the stored rows, so only while it gains
at most as many rows as it held), so a new crawl costs its own vectors, not a rebuild of the
history. Any other changed shard (rows removed or replaced, other settings, a stored shard without
row hashes) is rebuilt. A task then tunes the shard's search effort (ef_search or nprobe) until
recall@10 against exact search reaches ``index.target_recall`` on a sample of its own vectors
(:func:`~pipelines.kernels.index.tune_search`), and writes ``<dir>/shard-NNNNN-<fp>.faiss`` and
its row map ``.ids.parquet`` (doc_id, chunk_id, char_start, char_end and the row hash, in index-id
order; the index settings in its metadata). An extended shard holds the same vectors as a rebuilt
one (the same fingerprint); its graph or lists, and so its tuned effort and recall, depend on the
order its rows arrived in. The manifest rows of this revision are then replaced in one commit,
and files no manifest row names any more are removed. The manifest records a shard's path relative to the lake root when it lies
under it (as Delta's own add actions do), so a copied or moved lake searches its own shards.
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


def _build_shard(table: pa.Table, *, directory: str, params: IndexConfig, target_recall: float, fingerprints: dict,
                 version: int, settings: str, stored: dict[int, str]) -> pa.Table:
    """One shard's rows → its files, and its manifest row (runs in a Spark Python worker).

    ``stored``: shard → URL of its current file, for the shards that may be extended."""
    import fsspec
    import faiss
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.kernels.index import build_index, tune_search

    def matrix(rows: pa.Table):
        flat = rows.column("vector").combine_chunks().values.to_numpy(zero_copy_only=False)
        return np.asarray(flat, np.float32).reshape(len(rows), dim)

    t0 = time.perf_counter()
    shard = table.column("shard")[0].as_py()
    dim = table.column("dim")[0].as_py()
    table = table.sort_by([("doc_id", "ascending"), ("chunk_id", "ascending")])  # a reproducible id order
    extended = _extension(stored.get(shard), table, settings, params.type)
    if extended is None:
        row_map = table.select(list(ROW_MAP_COLUMNS))
        vectors = matrix(table)
        index, built = build_index(vectors, params)
    else:
        index, row_map, added = extended
        built = params.type   # only a shard built as the configured type is extended
        index.add(matrix(added))
        row_map = pa.concat_tables([row_map, added.select(list(ROW_MAP_COLUMNS))])
        # the shard's own vectors in index-id order (tuning compares ids with exact search's)
        vectors = matrix(table.take(pc.index_in(row_map.column("row_hash"), value_set=table.column("row_hash"))))
    tuned, recall = tune_search(index, vectors, params, target_recall) if target_recall > 0 else (params, float("nan"))
    fp = fingerprints[shard]
    path = f"{directory}/shard-{shard:05d}-{fp[:12]}.faiss"
    with fsspec.open(path, "wb", auto_mkdir=True) as f:
        f.write(faiss.serialize_index(index).tobytes())
    with fsspec.open(path + ".ids.parquet", "wb") as f:
        pq.write_table(row_map.replace_schema_metadata({SETTINGS_KEY: settings.encode()}), f)
    return pa.table({
        "shard": pa.array([shard], pa.int32()), "path": [path], "index_type": [built],
        "rows": pa.array([len(table)], pa.int64()), "dim": pa.array([dim], pa.int32()), "fingerprint": [fp],
        "ef_search": pa.array([tuned.ef_search], pa.int32()), "nprobe": pa.array([tuned.nprobe], pa.int32()),
        "refine_k_factor": pa.array([tuned.refine_k_factor], pa.int32()), "tuned_recall": [recall],
        "embeddings_version": pa.array([version], pa.int64()), "build_s": [time.perf_counter() - t0],
        "extended": [extended is not None],
    })


def _extension(path: str | None, table: pa.Table, settings: str, kind: str):
    """``(stored index, its row map, the rows to add)`` when the shard of type ``kind`` stored at
    ``path`` can be extended to ``table``'s rows: built with ``settings``, every stored row still
    in ``table`` (by row hash), rows added, and for IVF-PQ at most as many as it holds. Else None."""
    if path is None:
        return None
    import fsspec
    import faiss
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with fsspec.open(path + ".ids.parquet", "rb") as f:
        row_map = pq.read_table(f)
    meta = row_map.schema.metadata or {}
    if meta.get(SETTINGS_KEY) != settings.encode() or "row_hash" not in row_map.column_names:
        return None
    row_map = row_map.replace_schema_metadata(None)
    present = pc.is_in(table.column("row_hash"), value_set=row_map.column("row_hash"))
    added = table.filter(pc.invert(present))
    if len(table) - len(added) != len(row_map) or not added or (kind == "ivfpq" and len(added) > len(row_map)):
        return None
    with fsspec.open(path, "rb") as f:
        index = faiss.deserialize_index(np.frombuffer(f.read(), np.uint8))
    return index, row_map, added


def run(ctx: StageContext) -> StageResult:
    import fsspec

    lake, cfg = ctx.lake, ctx.cfg
    emb_params = EmbedParams.resolve(cfg.embed)
    params = cfg.index   # the kernel takes the index section as it is
    mine = revision_predicate(emb_params)
    version = lake.version(GOLD_EMBEDDINGS) or 0
    directory = index_dir(cfg, emb_params)
    settings = hashlib.sha256(json.dumps([cfg.index.model_dump(exclude={"path"})], sort_keys=True).encode()).hexdigest()[:8]

    rows = (lake.read(GOLD_EMBEDDINGS).filter(mine)
            .withColumn("shard", F.pmod(F.xxhash64("doc_id"), F.lit(cfg.index.shards)).cast("int"))
            .withColumn("row_hash", F.xxhash64(*ROW_KEY)))
    sums = (rows.groupBy("shard")
            .agg(F.count("*").alias("n"), F.sum(F.col("row_hash").cast("decimal(38,0)")).alias("h"))
            .collect())
    fingerprints = {r.shard: hashlib.sha256(f"{settings}:{r.n}:{r.h}".encode()).hexdigest()[:16] for r in sums}

    # this revision's manifest rows: one per shard, read and replaced on the driver
    revision = Rows("model_revision", (emb_params.model_revision,), where={"model": emb_params.model_label})
    old = {r["shard"]: r for r in lake.rows(GOLD_INDEX_MANIFEST, GOLD_INDEX_MANIFEST.columns, revision)}

    def exists(path: str) -> bool:
        fs, p = fsspec.core.url_to_fs(path)
        return fs.exists(p) and fs.exists(p + ".ids.parquet")

    root = cfg.lake.root

    full = ctx.forced_full("index")   # crawlake run --full index: every shard rebuilt, fingerprints aside
    # this revision's shards whose files are still there, each looked up once (S3 round trips)
    on_disk = {} if full else {s: uri for s in fingerprints.keys() & old.keys()
                               if exists(uri := shard_uri(root, old[s]["path"]))}
    keep = {s: old[s] for s in on_disk if old[s]["fingerprint"] == fingerprints[s]}
    todo = sorted(set(fingerprints) - set(keep))
    # a changed shard stored as the configured type may be extended (the task decides)
    stored = {s: on_disk[s] for s in todo if s in on_disk and old[s]["index_type"] == cfg.index.type}
    built = []
    if todo:
        schema = GOLD_INDEX_MANIFEST.schema
        out_schema = ", ".join([f"{f.name} {f.dataType.simpleString()}" for f in schema.fields
                                if f.name not in ("model", "model_revision", "built_at")] + ["extended boolean"])

        def build(table: pa.Table) -> pa.Table:  # type hints: how applyInArrow tells the table API
            return _build_shard(table, directory=directory, params=params, target_recall=cfg.index.target_recall,
                                fingerprints=fingerprints, version=version, settings=settings, stored=stored)

        built = [r.asDict() for r in (rows.filter(F.col("shard").isin(todo))
                                      .select("shard", *ROW_MAP_COLUMNS, "vector", "dim")
                                      .repartition(min(len(todo), ctx.spark.sparkContext.defaultParallelism), "shard")
                                      .groupBy("shard").applyInArrow(build, out_schema).collect())]
    extended = sum(r.pop("extended") for r in built)
    now = datetime.now(timezone.utc)
    entries = list(keep.values()) + [
        {**r, "model": emb_params.model_label, "model_revision": emb_params.model_revision, "built_at": now} for r in built]
    # manifests written before paths were relative get them too when the shard is kept
    entries = [{**e, "path": manifest_path(root, e["path"])} for e in entries]
    audited = quality.gate(ctx, ctx.stage, GOLD_INDEX_MANIFEST, GOLD_INDEX_MANIFEST.suite_name, quality.validate_arrow(
        pa.Table.from_pylist(entries, schema=GOLD_INDEX_MANIFEST.nullable_arrow), GOLD_INDEX_MANIFEST), record=False)
    lake.replace_rows(GOLD_INDEX_MANIFEST, [tuple(e[c] for c in GOLD_INDEX_MANIFEST.columns) for e in entries], revision)
    quality.record_results(ctx, audited)
    _remove_unlisted(directory, {shard_uri(root, e["path"]) for e in entries})
    return StageResult(
        rows_in=sum(r.n for r in sums), rows_out=sum(e["rows"] for e in entries),
        notes={**incremental.mode_notes("--full" if full else None), "index_type": cfg.index.type, "shards": len(entries), "shards_rebuilt": len(built) - extended,
               "shards_extended": extended,
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
