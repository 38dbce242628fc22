"""The embed stage on a Dask cluster: ``silver.documents_clean`` → ``gold.embeddings`` through
``deltalake`` (no JVM does the work), the same kernel as the Spark path.

One Dask task per Parquet file of ``silver.documents_clean`` (at its current version); each worker
process loads the model once. Results are inserted with an insert-only Delta MERGE on the table's
keys as they arrive, in commits of about ``commit_rows`` chunks, so a killed run resumes where it
stopped (the refresh anti-join skips what was committed) and never duplicates a vector.

Use a LocalCluster on one machine (the default, ``embed.dask_workers`` processes) or a scheduler
address (``embed.dask_scheduler``), e.g. a ``dask-cuda`` LocalCUDACluster with one worker per GPU.
The lake must be in path mode (a folder or an object-store URL): Unity Catalog tables are written
through Spark.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from pipelines.kernels.embed import EmbedParams, embed_batch

#: Arrow schema of gold.embeddings as Spark declares it (non-null columns and list items).
EMBEDDINGS_ARROW = pa.schema([
    pa.field("doc_id", pa.string(), False), pa.field("chunk_id", pa.int32(), False),
    pa.field("char_start", pa.int32(), False), pa.field("char_end", pa.int32(), False),
    pa.field("vector", pa.list_(pa.field("element", pa.float32(), False)), False),
    pa.field("dim", pa.int32(), False), pa.field("model", pa.string(), False),
    pa.field("model_revision", pa.string(), False),
])
KEYS = ("doc_id", "chunk_id", "model", "model_revision")


def embed_with_dask(lake, params: EmbedParams, cfg) -> dict[str, int]:
    """The stage's entry: ``lake`` a :class:`~pipelines.lake.Lake` in path mode, ``cfg`` an
    ``EmbedConfig``. Raises ValueError for a catalog-mode lake."""
    from schemas.catalog import GOLD_EMBEDDINGS, SILVER_DOCUMENTS_CLEAN

    if lake.cfg.mode != "path":
        raise ValueError("embed.engine=dask writes with deltalake and needs lake.mode=path (a folder or URL)")
    return embed_table(lake.location(SILVER_DOCUMENTS_CLEAN), lake.location(GOLD_EMBEDDINGS), params,
                       scheduler=cfg.dask_scheduler, workers=cfg.dask_workers, refresh=cfg.refresh)


def _revision_filter(params: EmbedParams):
    return (ds.field("model") == params.model_label) & (ds.field("model_revision") == params.model_revision)


def _sql(s: str) -> str:
    """A string literal for deltalake's (DataFusion's) SQL, which doubles quotes (Spark's escapes them)."""
    return "'" + s.replace("'", "''") + "'"


def embed_table(clean_uri: str, embeddings_uri: str, params: EmbedParams, *, scheduler: str | None = None,
                workers: int = 2, refresh: bool = True, commit_rows: int = 50_000) -> dict[str, int]:
    """Embed the documents at ``clean_uri`` into the Delta table at ``embeddings_uri``.

    ``params.model_revision`` must be set (see :func:`~pipelines.kernels.embed.resolve_model`).
    Returns counts: documents, documents_embedded, documents_unchanged, documents_removed.
    Raises FileNotFoundError when ``clean_uri`` is not a Delta table.
    """
    from deltalake import DeltaTable

    if params.model_revision is None:
        raise ValueError("embed_table needs params.model_revision (resolve the model first)")
    if not DeltaTable.is_deltatable(clean_uri):
        raise FileNotFoundError(f"no Delta table at {clean_uri}")
    mine = f"model = {_sql(params.model_label)} AND model_revision = {_sql(params.model_revision)}"
    clean = DeltaTable(clean_uri)
    doc_ids = clean.to_pyarrow_table(columns=["doc_id"]).column("doc_id").combine_chunks()
    have = pa.array([], pa.string())
    if DeltaTable.is_deltatable(embeddings_uri):
        emb = DeltaTable(embeddings_uri)
        if refresh:
            have = pc.unique(emb.to_pyarrow_dataset().to_table(columns=["doc_id"], filter=_revision_filter(params))
                             .column("doc_id").combine_chunks())
        else:
            emb.delete(mine)
    gone = pc.filter(have, pc.invert(pc.is_in(have, value_set=doc_ids))).to_pylist()
    for i in range(0, len(gone), 1000):  # keep each delete predicate a manageable size
        ids = ", ".join(_sql(d) for d in gone[i:i + 1000])
        DeltaTable(embeddings_uri).delete(f"{mine} AND doc_id IN ({ids})")
    n_todo = len(doc_ids) - pc.sum(pc.is_in(doc_ids, value_set=have)).as_py() if len(have) else len(doc_ids)
    if n_todo:
        _run_tasks(clean.file_uris(), have, params, embeddings_uri, scheduler, workers, commit_rows)
    return {"documents": len(doc_ids), "documents_embedded": n_todo, "documents_unchanged": len(doc_ids) - n_todo,
            "documents_removed": len(gone)}


def embed_file(uri: str, skip: pa.Array, params: EmbedParams, threads: int | None = None) -> pa.Table:
    """One Parquet file of documents (doc_id, text) → its embeddings, leaving out ``skip`` doc_ids."""
    if threads:
        import torch

        torch.set_num_threads(threads)  # several workers per machine share its cores
    docs = ds.dataset(uri, format="parquet").to_table(columns=["doc_id", "text"])
    if len(skip):
        docs = docs.filter(pc.invert(pc.is_in(docs.column("doc_id"), value_set=skip)))
    parts = [pa.Table.from_batches([embed_batch(b, params)]) for b in docs.to_batches(max_chunksize=1000)]
    parts = [p for p in parts if p.num_rows]
    return pa.concat_tables(parts).cast(EMBEDDINGS_ARROW) if parts else EMBEDDINGS_ARROW.empty_table()


def _insert(embeddings_uri: str, table: pa.Table) -> None:
    from deltalake import DeltaTable, write_deltalake

    if not DeltaTable.is_deltatable(embeddings_uri):
        write_deltalake(embeddings_uri, table, mode="append")
        return
    cond = " AND ".join(f"t.{k} = s.{k}" for k in KEYS)
    (DeltaTable(embeddings_uri).merge(table, cond, source_alias="s", target_alias="t")
     .when_not_matched_insert_all().execute())


def _run_tasks(files, have, params, embeddings_uri, scheduler, workers, commit_rows) -> None:
    from distributed import Client, LocalCluster, as_completed

    cluster = None if scheduler else LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                   dashboard_address=None)
    threads = max(1, (os.cpu_count() or 1) // workers) if cluster else None
    try:
        with Client(scheduler or cluster) as client:
            skip = client.scatter(have, broadcast=True)
            futures = [client.submit(embed_file, f, skip, params, threads, pure=False) for f in files]
            pending, rows = [], 0
            for fut in as_completed(futures):
                table = fut.result()
                if table.num_rows:
                    pending.append(table)
                    rows += table.num_rows
                if rows >= commit_rows:
                    _insert(embeddings_uri, pa.concat_tables(pending))
                    pending, rows = [], 0
            if pending:
                _insert(embeddings_uri, pa.concat_tables(pending))
    finally:
        if cluster:
            cluster.close()
