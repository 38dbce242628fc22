"""Click-log ingest throughput: pyarrow alone vs crawlake's batch ingest and streaming query on local Spark.

Input: ``--rows`` (default 2,000,000) generated Criteo TSV lines (pipelines.clicks.generate, no
malformed lines: the baseline has no quarantine) in ``--files`` files, built once under ``--workdir``.

Systems (same files, same process, one after the other):
  pyarrow          per file ``pyarrow.csv.read_csv`` with the bronze schema (label int32, I int64,
                   C string; quoting off) then ``pyarrow.parquet.write_table`` (snappy), all threads
  crawlake-batch   ``clicks ingest`` (pipelines.clicks.ingest.ingest_files) into a fresh lake:
                   parse and validate every line, write rows and quarantine as Parquet, audit
                   (Great Expectations), Delta commits of bronze.clicks and
                   bronze.clicks_quarantine (deltalake, ``clicks.commit: auto``), the ingest log
  crawlake-stream  ``clicks stream --available-now`` over the same files as a landing folder, fresh
                   lake and checkpoint, ``--stream-files-per-trigger`` files per micro-batch

Spark (local[*]) starts once before timing and ingests two 125,000-line files to warm up (JIT of the
JVM, one Python worker per core with its imports: pyarrow, deltalake, Great Expectations); neither is timed.

    python benchmarks/bench_clicks.py [--json] [--rows 2000000] [--files 8] [--repeats 1] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def build_input(workdir: Path, rows: int, files: int) -> list[Path]:
    """``files`` TSV files of ``rows / files`` lines each; reused when already built."""
    from pipelines.clicks.generate import generate

    folder = workdir / f"input-{rows}-{files}"
    if not (folder / "_complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        generate(folder, rows=rows // files, files=files, seed=1)
        (folder / "_complete").touch()
    return sorted(p for p in folder.iterdir() if p.name.startswith("day_"))


def pyarrow_baseline(paths: list[Path], out: Path) -> float:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from pipelines.kernels.clicks import CAT_COLUMNS, FEATURE_COLUMNS, INT_COLUMNS

    types = {"label": pa.int32(), **{c: pa.int64() for c in INT_COLUMNS}, **{c: pa.string() for c in CAT_COLUMNS}}
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    for path in paths:
        table = pacsv.read_csv(path, read_options=pacsv.ReadOptions(column_names=list(FEATURE_COLUMNS)),
                               parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False),
                               convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True))
        pq.write_table(table, out / f"{path.name}.parquet")
    return time.perf_counter() - t0


def _context(spark, lake: Path, *overrides: str):
    from pipelines.config import load_config
    from pipelines.ledger import new_run_id
    from pipelines.stage import StageContext
    from pipelines.lake import Lake

    shutil.rmtree(lake, ignore_errors=True)
    cfg = load_config("local", [f"lake.root={lake}", *overrides])
    return StageContext(spark, cfg, Lake(spark, cfg.lake), new_run_id())


def crawlake_batch(spark, paths: list[Path], lake: Path) -> tuple[int, float]:
    from pipelines.clicks.ingest import ingest_files, resolve_inputs

    ctx = _context(spark, lake)
    files = resolve_inputs([str(p) for p in paths])
    t0 = time.perf_counter()
    result = ingest_files(ctx, files)
    return result.rows_out, time.perf_counter() - t0


def crawlake_stream(spark, landing: Path, lake: Path, files_per_trigger: int) -> tuple[int, float]:
    from pipelines.clicks import stream
    from schemas.catalog import BRONZE_CLICKS

    ctx = _context(spark, lake, f"clicks.max_files_per_trigger={files_per_trigger}", "clicks.path_glob=day_*")
    t0 = time.perf_counter()
    stream.run(spark, ctx.cfg, str(landing), available_now=True)
    seconds = time.perf_counter() - t0
    return ctx.lake.read(BRONZE_CLICKS).count(), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--stream-files-per-trigger", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "crawlake-bench-clicks")
    args = parser.parse_args()

    paths = build_input(args.workdir, args.rows, args.files)
    rows = sum(1 for p in paths for _ in open(p, "rb"))
    mb = sum(p.stat().st_size for p in paths) / 1e6

    from pipelines.clicks.generate import generate
    from pipelines.config import load_config
    from pipelines.session import get_spark

    spark = get_spark(load_config("local").spark)
    # Warm-up, not timed: JIT of the JVM's paths, and two files so that both of local[*]'s Python
    # workers import pyarrow, deltalake and Great Expectations once (a long-running job pays that
    # once per executor worker, not per batch)
    warm = generate(args.workdir / "warmup2", rows=125_000, files=2, seed=9)
    crawlake_batch(spark, [Path(w.path) for w in warm], args.workdir / "lake-warmup")

    seconds: dict[str, list[float]] = {"pyarrow": [], "crawlake-batch": [], "crawlake-stream": []}
    for _ in range(args.repeats):
        seconds["pyarrow"].append(pyarrow_baseline(paths, args.workdir / "parquet"))
        n, s = crawlake_batch(spark, paths, args.workdir / "lake-batch")
        assert n == rows, f"batch ingest wrote {n} rows of {rows}"
        seconds["crawlake-batch"].append(s)
        n, s = crawlake_stream(spark, paths[0].parent, args.workdir / "lake-stream", args.stream_files_per_trigger)
        assert n == rows, f"stream wrote {n} rows of {rows}"
        seconds["crawlake-stream"].append(s)

    out = []
    for system, runs in seconds.items():
        s = statistics.median(runs)
        out.append({"benchmark": "clicks_ingest", "system": system, "metric": "rows_per_s", "value": round(rows / s),
                    "unit": "rows/s", "rows": rows, "files": len(paths), "input_mb": round(mb, 1),
                    "seconds": round(s, 2), "repeats": len(runs), "runs_s": [round(r, 2) for r in runs]})
    base = out[0]["value"]
    for row, target in ((out[1], 0.5), (out[2], 0.4)):
        out.append({"benchmark": "clicks_ingest", "system": row["system"], "metric": "ratio_vs_pyarrow",
                    "value": round(row["value"] / base, 3), "unit": "x", "target": target})
    for row in out:
        print(json.dumps(row) if args.json else f"{row['system']:>16} {row['metric']:>17} {row['value']:>12} {row['unit']}")


if __name__ == "__main__":
    main()
