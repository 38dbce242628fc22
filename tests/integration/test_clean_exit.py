"""Reads exit cleanly: ``crawlake search``, ``crawlake explain`` and a loader epoch, 20 runs each in
fresh processes, all exit 0 with their output (issue 18, item 5).

Before the reads went through :mod:`pipelines.lake.read`, a process that had read the lake with
``deltalake``'s pyarrow dataset aborted after its output at interpreter exit (``terminate called
without an active exception``, exit 134) on 1 run of 3 (search) to 3 of 4 (five tables read);
20 runs make a missed regression unlikely (< 1e-3 for search).

One lake, built once per session (``conftest.submitted_lake``, shared with test_pipeline): the
whole pipeline over the two real WARCs of ``../shared/data`` plus a renamed copy of the Common
Crawl excerpt, so that ingest quarantines ``duplicate_record`` rows that ``explain`` shows. ``search`` and ``explain`` run with no Java reachable (``JAVA_HOME`` and
``PATH`` without it): starting a JVM would fail them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, lake_config

RUNS = 20
CRAWLAKE = str(Path(sys.executable).with_name("crawlake"))


@pytest.fixture(scope="module")
def lake(submitted_lake):
    """The session's lake of real archives (conftest.submitted_lake), as a config."""
    return lake_config(submitted_lake[0])


def no_java_env() -> dict[str, str]:
    """The environment without Java: a command that tried to start Spark's JVM would fail."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    java = shutil.which("java")
    keep = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not (java and Path(p, "java").exists())]
    env["PATH"] = os.pathsep.join(keep)
    env["JAVA_HOME"] = "/nonexistent-java"
    return env


def run_many(cmds: list[list[str]], env: dict | None = None) -> list[tuple[subprocess.CompletedProcess, float]]:
    """Each command in a fresh process, two at a time (a core each), results in ``cmds``' order."""
    from concurrent.futures import ThreadPoolExecutor

    def one(cmd):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        return proc, time.perf_counter() - start

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, cmds))


def check_exits(name: str, results) -> None:
    codes = [p.returncode for p, _ in results]
    seconds = [s for _, s in results]
    print(f"\n{name}: {len(results)} runs, exit codes {sorted(set(codes))}, "
          f"{sum(seconds) / len(seconds):.2f} s per run (min {min(seconds):.2f}, max {max(seconds):.2f})")
    bad = [(i, p.returncode, p.stderr[-1500:]) for i, (p, _) in enumerate(results) if p.returncode != 0]
    assert not bad, f"{name}: {len(bad)} of {len(results)} runs failed; first: {bad[0]}"


def test_explain_exits_zero_every_time(lake):
    from pipelines.explain import explain
    from pipelines.lake import read
    from schemas.catalog import SILVER_DOCUMENTS_CLEAN, SILVER_DUPLICATE_CLUSTERS, SILVER_FILTER_DECISIONS

    removed_dup = read.read_rows(SILVER_DUPLICATE_CLUSTERS, lake, ["doc_id", "kept"], [("kept", "=", False)])
    failed = read.read_rows(SILVER_FILTER_DECISIONS, lake, ["doc_id", "passed"], [("passed", "=", False)])
    kept = read.read_rows(SILVER_DOCUMENTS_CLEAN, lake, ["doc_id"])
    ids = [min(r["doc_id"] for r in rows) for rows in (removed_dup, failed, kept)]
    expected = {d: explain(lake, d) for d in ids}
    assert expected[ids[0]].verdict.startswith("removed: ") and "duplicate of" in expected[ids[0]].verdict
    assert expected[ids[1]].verdict.startswith("removed by filter(s): ")
    assert expected[ids[2]].verdict.startswith("kept")
    # every page of the excerpt was ingested twice (the renamed copy): one copy is quarantined
    with_copies = [d for d in ids if expected[d].copies]
    assert with_copies and all("duplicate_record (kept copy: " in line for d in with_copies
                                for line in expected[d].lines() if line.startswith("  ingest: "))
    cmds = [[CRAWLAKE, "explain", ids[i % len(ids)], "--lake-root", lake.lake.root] for i in range(RUNS)]
    results = run_many(cmds, no_java_env())
    check_exits("crawlake explain", results)
    for (proc, _), cmd in zip(results, cmds):
        assert proc.stdout.splitlines() == expected[cmd[2]].lines(), proc.stdout


LOADER_EPOCH = textwrap.dedent("""
    import sys
    from pipelines.loaders import DeltaLoader, TokenSequenceDataset

    ds = TokenSequenceDataset(sys.argv[1], batch_size=2, seed=int(sys.argv[2]), extra_columns=["seq_id"])
    ds.set_epoch(int(sys.argv[2]))
    seen = [s for batch in DeltaLoader(ds, num_workers=2) for s in batch["seq_id"]]
    print(len(seen), len(set(seen)))
""")


def test_loader_epoch_exits_zero_every_time(lake):
    from pipelines.lake import read
    from schemas.catalog import GOLD_TOKEN_SEQUENCES

    uri = read.table_uri(GOLD_TOKEN_SEQUENCES, lake)
    rows = read.read(uri, ["seq_id"]).num_rows
    assert rows >= 2
    results = run_many([[sys.executable, "-c", LOADER_EPOCH, uri, str(i)] for i in range(RUNS)])
    check_exits("loader epoch (TokenSequenceDataset, DeltaLoader, 2 workers)", results)
    for proc, _ in results:
        assert proc.stdout.split() == [str(rows), str(rows)], proc.stdout


@pytest.mark.timeout(900)  # 20 processes that each import torch and load the model
def test_search_exits_zero_every_time(lake):
    from pipelines.lake import read
    from pipelines.search import Searcher
    from schemas.catalog import SILVER_DOCUMENTS_CLEAN

    clean = read.read_spec(SILVER_DOCUMENTS_CLEAN, lake, ["doc_id", "text", "language"]).to_pylist()
    doc = next(d for d in sorted(clean, key=lambda d: d["doc_id"]) if d["language"] == "en")
    query = " ".join(doc["text"].split()[:40])
    want = [h.doc_id for h in Searcher(lake).search(query, k=3)]
    assert want[0] == doc["doc_id"]
    cmd = [CRAWLAKE, "search", query, "--k", "3", "--json", "--lake-root", lake.lake.root, "--set", "embed.device=cpu"]
    results = run_many([cmd] * RUNS, no_java_env())
    check_exits("crawlake search", results)
    for proc, _ in results:
        hits = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [h["rank"] for h in hits] == [1, 2, 3] and [h["doc_id"] for h in hits] == want, proc.stdout
