"""``crawlake report`` at scale: seconds to write the HTML report of a lake of N documents.

The lake: N bronze.documents rows from bench_dedup_scale.py's seeded generator (real page texts of
../shared/data cut and recombined, ~10 % planted exact and near duplicates), then the real dedup,
filter and tokenize stages on local Spark (untimed; the lake is kept in ``--workdir`` and reused
by later runs with the same settings), plus ``--click-rows`` Criteo-format click-log lines
through ``clicks ingest`` and ``clicks features`` (so bronze.clicks and silver.click_features hold
that many rows).

What is timed: ``build_report`` (every read, aggregation and the HTML file), each repeat in a fresh
Python process (imports included; the vega-embed bundle comes from its disk cache, as after a
first report on any machine): ``report_s`` is the child's wall time around the call and
``process_s`` the whole child process. ``peak_rss_mb``: the child's maximum resident memory. With
``--browser`` (Debian's chromium on PATH), also ``browser_s``: from navigation to every chart
drawn in headless Chromium.

    python benchmarks/bench_report.py [--docs 100000] [--seed 0] [--click-rows 1000000]
        [--repeats 3] [--workdir DIR] [--browser] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from pipelines.report import build_report
built = build_report(sys.argv[1], sys.argv[2])
print(json.dumps({"report_s": time.perf_counter() - t0, "charts": built.charts, "sections": built.sections,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def build(workdir: Path, docs: int, seed: int, click_rows: int) -> Path:
    """The benchmark lake (built once per settings): bronze from the generator, then the stages."""
    from bench_dedup_scale import build_lake

    from pipelines.config import load_config
    from pipelines.lake import read as lake_read
    from pipelines.runner import run_stages
    from pipelines.stages import STAGES
    from schemas.catalog import BRONZE_CLICKS, OPS_RUNS

    root = workdir / f"report-lake-{docs}-seed{seed}"
    build_lake(root, docs, seed, 5, 0.8)
    cfg = load_config("local", [f"lake.root={root}", "tracking.progress=lines", "tracking.progress_interval_s=30"])
    done = {r["stage"] for r in lake_read.read_rows(OPS_RUNS, str(root), ["stage", "status"]) if r["status"] == "succeeded"}
    todo = [STAGES[s] for s in ("dedup", "filter", "tokenize") if s not in done]
    if todo:
        run_stages(cfg, todo)
    if click_rows and not lake_read.exists(BRONZE_CLICKS.path_under(str(root))):
        from pipelines.clicks.generate import generate

        logs = workdir / f"clicks-{click_rows}-seed{seed}"
        files = 4
        generate(logs, rows=click_rows // files, files=files, bad_lines=50, seed=seed)
        cfg = load_config("local", [f"lake.root={root}", f"clicks.input=[{logs}]", "tracking.progress=lines",
                                    "tracking.progress_interval_s=30"])
        run_stages(cfg, [STAGES["clicks_ingest"], STAGES["clicks_features"]])
    return root


def measure(root: Path, out: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(out)], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_s": wall}


def browser_seconds(page: Path, folder: Path) -> float:
    sys.path.insert(0, str(REPO / "tests"))
    from browser import Chromium

    with Chromium(folder) as browser:
        t0 = time.perf_counter()
        browser.open(page.as_uri(), timeout_s=300)
        browser.wait_for("document.body.dataset.chartsRendered !== undefined", timeout_s=300)
        seconds = time.perf_counter() - t0
        if browser.evaluate("document.body.dataset.chartsFailed") != "0" or browser.errors():
            raise RuntimeError(f"charts failed: {browser.errors()}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--click-rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "crawlake-bench-report"))
    ap.add_argument("--browser", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from pipelines.report.lakedata import LakeReader
    from schemas.catalog import ALL_TABLES

    workdir = Path(args.workdir)
    t0 = time.perf_counter()
    root = build(workdir, args.docs, args.seed, args.click_rows)
    build_s = time.perf_counter() - t0
    reader = LakeReader(str(root))
    rows = {spec.qualified_name: info.rows for spec in ALL_TABLES if (info := reader.info(spec)).exists}
    out = workdir / f"report-{args.docs}.html"
    runs = [measure(root, out) for _ in range(args.repeats)]
    result = {
        "docs": args.docs, "seed": args.seed, "table_rows": rows, "lake_build_s": round(build_s, 1),
        "report_s": [round(r["report_s"], 2) for r in runs],
        "report_s_median": round(statistics.median(r["report_s"] for r in runs), 2),
        "process_s_median": round(statistics.median(r["process_s"] for r in runs), 2),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs)), "charts": runs[-1]["charts"],
        "sections": runs[-1]["sections"], "html_mb": round(out.stat().st_size / 1e6, 2),
    }
    if args.browser:
        result["browser_s"] = round(browser_seconds(out, workdir / "chromium"), 2)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>18}: {value}")


if __name__ == "__main__":
    main()
