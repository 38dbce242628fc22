"""Documents per second per core of the filter stage (``fineweb`` preset + language ID): the
kernel in one process vs the stage on local Spark, on the same documents.

Input: the documents of the WARC files in ../shared/data (parsed and extracted by crawlake's
ingest kernel), repeated until there are ``--docs`` of them (new doc_ids); ``--limit`` caps that
for a smoke run.

Systems (``--repeats`` runs each, medians reported):
  kernel    ``pipelines.kernels.filters.filter_batch`` over Arrow batches of 1000 documents in this
            process (one core), with the parameters the stage would use
  crawlake  ``pipelines.stages.filter.run`` end to end on local Spark (all cores): read
            silver.documents_dedup, mapInArrow, write silver.filter_decisions and
            silver.documents_clean, funnel and language summaries (session start-up and a
            warm-up run are not timed)

Metric: docs_per_s and docs_per_s_per_core (kernel: one core; crawlake: the machine's cores).
JSON lines: {"benchmark", "system", "metric", "value", "unit", ...}.

    python benchmarks/bench_filters.py [--json] [--docs 20000] [--repeats 2] [--limit N] [--no-spark]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
WARCS = ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz", "cc-main-2024-22-whirlwind.warc.gz")


def real_documents(n: int) -> list[dict]:
    """``n`` document rows (bronze columns), the real ones repeated with new doc_ids."""
    from pipelines.kernels.warc import parse_warc_file

    base = [r for name in WARCS for r in parse_warc_file(str(DATA / name)).rows if r["kind"] == "document"]
    out = []
    for i in range(n):
        row = {k: v for k, v in base[i % len(base)].items() if k != "kind"}
        row["doc_id"] = f"{i:010d}"
        out.append(row)
    return out


def run_kernel(docs: list[dict], params) -> int:
    import pyarrow as pa

    from pipelines.kernels.filters import filter_batch

    kept = 0
    cols = ("doc_id", "url", "host", "text", "http_status")
    for i in range(0, len(docs), 1000):
        batch = pa.RecordBatch.from_pylist([{k: d[k] for k in cols} for d in docs[i:i + 1000]])
        kept += sum(filter_batch(batch, params).column("filter_kept").to_pylist())
    return kept


def write_dedup(spark, lake, docs: list[dict]) -> None:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from schemas.catalog import SILVER_DOCUMENTS_DEDUP

    table = pa.Table.from_pylist(docs, schema=to_arrow_schema(SILVER_DOCUMENTS_DEDUP.schema))
    lake.overwrite(SILVER_DOCUMENTS_DEDUP, spark.createDataFrame(table))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--limit", type=int, default=None, help="at most this many documents (smoke runs)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-spark", action="store_true", help="time the kernel only")
    args = parser.parse_args()

    from pipelines.config import load_config
    from pipelines.kernels.filters import FilterParams

    n = min(args.docs, args.limit) if args.limit else args.docs
    docs = real_documents(n)
    cores = os.cpu_count() or 1
    times: dict[str, list[float]] = {"kernel": []}
    kept: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench_filters_") as tmp:
        cfg = load_config("local", [f"lake.root={tmp}"])
        params = FilterParams.from_config(cfg.filter)
        run_kernel(docs[:100], params)  # warm-up: language model load
        ctx = None
        if not args.no_spark:
            from pipelines.ledger import new_run_id
            from pipelines.session import get_spark
            from pipelines.stage import StageContext
            from pipelines.stages import filter as filter_stage
            from pipelines.lake import Lake

            spark = get_spark(cfg.spark)
            ctx = StageContext(spark=spark, cfg=cfg, lake=Lake(spark, cfg.lake), run_id=new_run_id())
            write_dedup(spark, ctx.lake, docs[:100])
            filter_stage.run(ctx)  # warm-up: JVM, Python workers, language model in each worker
            write_dedup(spark, ctx.lake, docs)
            times["crawlake"] = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            kept["kernel"] = run_kernel(docs, params)
            times["kernel"].append(time.perf_counter() - t0)
            if ctx is not None:
                t0 = time.perf_counter()
                result = filter_stage.run(ctx)
                times["crawlake"].append(time.perf_counter() - t0)
                kept["crawlake"] = result.rows_out
        if ctx is not None:
            ctx.spark.stop()
    if "crawlake" in kept:
        assert kept["crawlake"] == kept["kernel"], kept
    common = {"benchmark": "filter", "preset": cfg.filter.preset, "documents": n, "kept": kept["kernel"],
              "characters": sum(len(d["text"]) for d in docs), "repeats": args.repeats, "cores": cores}
    lines = []
    for system, runs in times.items():
        rate = n / statistics.median(runs)
        used = 1 if system == "kernel" else cores
        rounded = [round(x, 3) for x in runs]
        lines.append({**common, "system": system, "metric": "docs_per_s", "value": round(rate, 1),
                      "unit": "docs/s", "runs_s": rounded, "cores_used": used})
        lines.append({**common, "system": system, "metric": "docs_per_s_per_core", "value": round(rate / used, 1),
                      "unit": "docs/s/core", "runs_s": rounded, "cores_used": used})
    for line in lines:
        print(json.dumps(line) if args.json else f"{line['system']:>9} {line['metric']:>20}: {line['value']:,} {line['unit']}")


if __name__ == "__main__":
    main()
