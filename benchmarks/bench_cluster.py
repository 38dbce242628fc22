"""Cluster and object storage overhead: ingest → dedup → filter → tokenize on (a) ``local[2]`` with
the crawl and the lake on local disk and (b) a Spark standalone cluster of two 1-core workers on
127.0.0.1 with the crawl and the lake on an S3-compatible server (moto's, on 127.0.0.1), same
input, same two cores.

Input: the real archives of ../shared/data repeated to >= 200 MB over several files with fresh
WARC-Record-IDs (bench_ingest.build_input). Each side is one ``crawlake`` command started from
this process (a: ``crawlake run``; b: ``crawlake-submit --master spark://… jobs/run_all.py``);
per stage, documents/s = the stage's documents (ingest: written, the others: read) over its
seconds in ``ops.runs``, and the ratio b/a. Target: b/a >= 0.6 for every stage.

    python benchmarks/bench_cluster.py [--json] [--mb 200] [--files 4] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
STAGES = ("ingest", "dedup", "filter", "tokenize")
BIN = Path(sys.executable).parent


def _stage_rates(root: str) -> dict[str, tuple[int, float]]:
    """``{stage: (documents, seconds)}`` of the lake's last run, from ops.runs."""
    from pipelines.lake import read as lake_read
    from schemas.catalog import OPS_RUNS

    runs = lake_read.read_spec(OPS_RUNS, root).to_pylist()
    last = max(runs, key=lambda r: r["started_at"])["run_id"]
    out = {}
    for r in runs:
        if r["run_id"] == last:
            docs = r["rows_out"] if r["stage"] == "ingest" else r["rows_in"]
            out[r["stage"]] = (int(docs), float(r["duration_s"]))
    return out


def _run(cmd: list[str], env: dict, log: Path) -> float:
    t0 = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if code:
        raise SystemExit(f"{' '.join(cmd[:3])} … failed ({code}):\n{log.read_text()[-3000:]}")
    return time.perf_counter() - t0


def main() -> None:
    from bench_ingest import build_input

    from pipelines.servers import start_s3, start_standalone

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "crawlake-bench-cluster")
    args = parser.parse_args()

    paths = build_input(Path(tempfile.gettempdir()) / "crawlake-bench-ingest", args.mb, args.files)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    common = ["--stages", ",".join(STAGES), "--set", "ingest.progress=false", "--set", "tracking.progress=off"]

    # (a) local[2], local disk
    local_root = str(args.workdir / "lake-local")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    wall_a = _run([str(BIN / "crawlake"), "run", "--input", *map(str, paths), "--lake-root", local_root,
                   "--set", "spark.master=local[2]", *common], env, args.workdir / "local.log")
    local = _stage_rates(local_root)

    # (b) standalone cluster, crawl and lake on S3
    with start_s3() as s3:
        s3.create_bucket("bench")
        for p in paths:
            s3.upload(p, f"s3://bench/crawl/{p.name}")
        env_b = {**env, **s3.env()}
        with start_standalone(2, cores=1, memory="3g", work_dir=str(args.workdir / "spark-work"), env=s3.env()) as c:
            wall_b = _run([str(BIN / "crawlake-submit"), "--master", c.master_url, "--conf", "spark.executor.memory=2g",
                           "jobs/run_all.py", "--input", "s3://bench/crawl/*.warc.gz", "--lake-root", "s3a://bench/lake",
                           *common], env_b, args.workdir / "cluster.log")
        os.environ.update(s3.env())   # the JVM-free read of ops.runs below
        cluster = _stage_rates("s3a://bench/lake")

    load = os.getloadavg()[0]
    rows = []
    for stage in STAGES:
        (docs_a, s_a), (docs_b, s_b) = local[stage], cluster[stage]
        for system, docs, seconds in (("crawlake-local", docs_a, s_a), ("crawlake-cluster-s3", docs_b, s_b)):
            rows.append({"benchmark": "cluster", "system": system, "stage": stage, "metric": "docs_per_s",
                         "value": round(docs / seconds, 1), "unit": "documents/s", "documents": docs,
                         "seconds": round(seconds, 2), "input_mb": round(mb, 1)})
        rows.append({"benchmark": "cluster", "system": "crawlake", "stage": stage, "metric": "ratio_cluster_s3_vs_local",
                     "value": round((docs_b / s_b) / (docs_a / s_a), 2), "unit": "x", "target": 0.6})
    rows.append({"benchmark": "cluster", "system": "crawlake", "metric": "wall_ratio_local_vs_cluster_s3",
                 "value": round(wall_a / wall_b, 2), "unit": "x", "load_1m": round(load, 2),
                 "wall_local_s": round(wall_a, 1), "wall_cluster_s": round(wall_b, 1)})
    for row in rows:
        print(json.dumps(row) if args.json else
              f"{row['system']:>20} {row.get('stage', ''):>9} {row['metric']:>30} {row['value']:>10} {row['unit']}")


if __name__ == "__main__":
    main()
