"""One side of ``benchmarks/bench_peer_dedup.py``, run in that side's own interpreter:

    .venv/bin/python                    _peer_dedup_side.py '{"system": "crawlake", ...}'
    .venv-peers/datatrove/bin/python    _peer_dedup_side.py '{"system": "datatrove", ...}'

crawlake: a Spark session (``local[*]``), an untimed warm-up run of the dedup stage on a small
lake, then one timed full run on the benchmark lake (``bronze.documents`` → the three silver
tables, Delta commits), with ``dedup.bands``/``dedup.rows`` as given; afterwards (untimed) the
``silver.duplicate_clusters`` rows (doc_id, cluster_id) are written to ``clusters`` as Parquet.

datatrove: its MinHash pipeline with ``MinhashConfig()`` defaults (word 5-grams, 14 buckets x 8
hashes, seed 1, 64-bit xxhash), four ``LocalPipelineExecutor`` steps as in its
``minhash_deduplication.py`` example: signatures (ParquetReader of the same files, 2 tasks / 2
workers), buckets (14 tasks / 2 workers), cluster (1 task, with cluster ids), filter (2 tasks /
2 workers) + ParquetWriter of the kept documents. Afterwards (untimed) the cluster ids are mapped
to doc ids by re-reading each task's document order, and written to ``clusters``.

Prints ``RESULT {json}`` with seconds (and per step), documents in/out, warm-up and import times.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _peer_common import emit  # noqa: E402


def crawlake(args: dict) -> dict:
    t0 = time.perf_counter()
    sys.path.insert(0, str(HERE.parent))
    import pyarrow as pa
    import pyarrow.parquet as pq

    import bench_dedup_scale as scale
    from pipelines.config import load_config
    from pipelines.lake.read import read
    from pipelines.session import get_spark
    from pipelines.stages import dedup
    import_s = time.perf_counter() - t0

    overrides = list(args["overrides"])
    t0 = time.perf_counter()
    spark = get_spark(load_config("local", overrides).spark)
    spark_start_s = time.perf_counter() - t0
    warm, root = Path(args["warm_lake"]), Path(args["lake"])
    scale._fresh_silver(warm)
    t0 = time.perf_counter()
    dedup.run(scale._context(spark, warm, overrides))
    warmup_s = time.perf_counter() - t0

    scale._fresh_silver(root)
    ctx = scale._context(spark, root, overrides)
    t0 = time.perf_counter()
    result = dedup.run(ctx)
    seconds = time.perf_counter() - t0
    spark.stop()
    clusters = read(str(root / "silver" / "duplicate_clusters"), ["doc_id", "cluster_id", "method", "kept"])
    pq.write_table(clusters.select(["doc_id", "cluster_id"]), args["clusters"])
    return {"seconds": seconds, "documents": result.rows_in, "kept": result.rows_out, "notes": result.notes,
            "import_s": import_s, "spark_start_s": spark_start_s, "warmup_s": warmup_s,
            "cluster_rows": clusters.num_rows, "removed": int(pa.compute.sum(pa.compute.invert(clusters.column("kept"))).as_py() or 0)}


def datatrove(args: dict) -> dict:
    t0 = time.perf_counter()
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter
    import_s = time.perf_counter() - t0

    work = Path(args["work"])
    shutil.rmtree(work, ignore_errors=True)
    cfg = MinhashConfig()
    tasks, workers = args["tasks"], args["workers"]

    def reader():
        return ParquetReader(args["input"], glob_pattern="*.parquet", recursive=False, text_key="text", id_key="doc_id")

    steps = {
        "signatures": LocalPipelineExecutor(
            pipeline=[reader(), MinhashDedupSignature(output_folder=str(work / "signatures"), config=cfg)],
            tasks=tasks, workers=workers, logging_dir=str(work / "logs" / "signatures")),
        "buckets": LocalPipelineExecutor(
            pipeline=[MinhashDedupBuckets(input_folder=str(work / "signatures"), output_folder=str(work / "buckets"),
                                          config=cfg)],
            tasks=cfg.num_buckets, workers=workers, logging_dir=str(work / "logs" / "buckets")),
        "cluster": LocalPipelineExecutor(
            pipeline=[MinhashDedupCluster(input_folder=str(work / "buckets"), output_folder=str(work / "remove_ids"),
                                          config=cfg, save_cluster_id=True)],
            tasks=1, workers=1, logging_dir=str(work / "logs" / "cluster")),
        "filter": LocalPipelineExecutor(
            pipeline=[reader(), MinhashDedupFilter(input_folder=str(work / "remove_ids")),
                      ParquetWriter(output_folder=str(work / "deduplicated"))],
            tasks=tasks, workers=workers, logging_dir=str(work / "logs" / "filter")),
    }
    step_s = {}
    t_all = time.perf_counter()
    for name, executor in steps.items():
        t0 = time.perf_counter()
        executor.run()
        step_s[name] = time.perf_counter() - t0
    seconds = time.perf_counter() - t_all

    # untimed: cluster ids → doc ids (each task's documents in the order its reader gives them)
    doc_ids, cluster_of = [], []
    removed = 0
    for rank in range(tasks):
        ids = [doc.id for doc in reader().run(rank=rank, world_size=tasks)]
        path = work / "remove_ids" / f"{rank:06d}.clusters"
        if path.exists():
            raw = path.read_bytes()
            for idx, cid in struct.iter_unpack("<II", raw):
                doc_ids.append(ids[idx])
                cluster_of.append(f"c{cid}")
        rpath = work / "remove_ids" / f"{rank:06d}.remove"
        removed += len(rpath.read_bytes()) // 4 if rpath.exists() else 0
    pq.write_table(pa.table({"doc_id": doc_ids, "cluster_id": cluster_of}), args["clusters"])
    kept = sum(pq.ParquetFile(f).metadata.num_rows for f in (work / "deduplicated").rglob("*.parquet"))
    documents = kept + removed
    if not args.get("keep_work"):
        shutil.rmtree(work / "signatures", ignore_errors=True)
        shutil.rmtree(work / "buckets", ignore_errors=True)
    return {"seconds": seconds, "steps_s": step_s, "documents": documents, "kept": kept, "removed": removed,
            "import_s": import_s, "cluster_rows": len(doc_ids)}


def main() -> None:
    args = json.loads(sys.argv[1])
    out = {"crawlake": crawlake, "datatrove": datatrove}[args["system"]](args)
    emit({**out, "pid": os.getpid()})


if __name__ == "__main__":
    main()
