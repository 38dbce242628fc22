"""The embed stage on a Dask cluster: the same kernel as the Spark path, run by Dask workers.

One Dask task per Parquet file of ``silver.documents_clean`` (at the version the stage read); each
worker process loads the model once, embeds the file's documents that have no vectors yet and
stages their vectors as a Parquet file (:mod:`pipelines.lake.files`). The driver publishes the
staged files through the lake in commits of about ``commit_rows`` vectors as results arrive, so a
killed run resumes where it stopped (the stage's refresh anti-join skips what was committed) and
never duplicates a vector. Which engine commits is the lake's choice, as for every table.

Use a LocalCluster on one machine (the default, ``embed.dask_workers`` processes) or a scheduler
address (``embed.dask_scheduler``), e.g. a ``dask-cuda`` LocalCUDACluster with one worker per GPU.
The workers must reach the input files and the staging folder (local disk on one machine, object
storage or a shared file system on a cluster).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from pipelines.kernels.embed import EmbedParams, embed_batch
from pipelines.lake.commits import local_path
from pipelines.lake.files import TableFiles, Target


def embed_with_dask(files: Sequence[str], skip: Sequence[str], params: EmbedParams, staging, cfg,
                    commit_rows: int = 50_000) -> int:
    """Embed the documents of ``files`` (Parquet files with ``doc_id``, ``text``; paths or URLs)
    except those in ``skip`` (doc_ids), staging the vectors for ``staging`` (a
    :class:`~pipelines.lake.Staging` with a ``"vectors"`` target) and publishing them every
    ``commit_rows`` vectors; ``cfg`` is the ``EmbedConfig``. Returns the vectors written.
    ``params.model_revision`` must be set (see :func:`~pipelines.kernels.embed.resolve_model`).
    Raises ValueError when it is not."""
    from distributed import Client, LocalCluster, as_completed

    if params.model_revision is None:
        raise ValueError("embed_with_dask needs params.model_revision (resolve the model first)")
    cluster = None if cfg.dask_scheduler else LocalCluster(
        n_workers=cfg.dask_workers, threads_per_worker=1, processes=True, dashboard_address=None)
    threads = max(1, (os.cpu_count() or 1) // cfg.dask_workers) if cluster else None
    written = pending = 0
    try:
        with Client(cfg.dask_scheduler or cluster) as client:
            skipped = client.scatter(pa.array(list(skip), pa.string()), broadcast=True)
            futures = [client.submit(embed_file, f, skipped, params, staging.targets, threads, pure=False) for f in files]
            for fut in as_completed(futures):
                report, rows = fut.result()
                staging.add([report])
                written += rows
                pending += rows
                if pending >= commit_rows:
                    staging.publish("vectors", operation="embed")
                    pending = 0
            staging.publish("vectors", operation="embed")
    finally:
        if cluster:
            cluster.close()
    return written


def embed_file(uri: str, skip: pa.Array, params: EmbedParams, targets: dict[str, Target],
               threads: int | None = None) -> tuple[dict, int]:
    """A Dask task: one Parquet file of documents (doc_id, text) → its vectors, leaving out the
    ``skip`` doc_ids, staged as one file for ``targets["vectors"]``. Returns its report
    (:meth:`~pipelines.lake.files.TableFiles.report`) and the number of vectors."""
    if threads:
        import torch

        torch.set_num_threads(threads)  # several workers per machine share its cores
    docs = ds.dataset(local_path(uri) or uri, format="parquet").to_table(columns=["doc_id", "text"])
    if len(skip):
        docs = docs.filter(pc.invert(pc.is_in(docs.column("doc_id"), value_set=skip)))
    rows = 0
    with TableFiles(targets) as out:
        for batch in docs.to_batches(max_chunksize=1000):
            vectors = embed_batch(batch, params)
            out.write("vectors", vectors)
            rows += vectors.num_rows
    return out.report(), rows
