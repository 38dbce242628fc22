"""The click stream, exactly once: three waves of files, a SIGKILL mid-batch, a restart, a SIGTERM.

Wave 1 runs in this process (availableNow, two micro-batches of at most two files). Wave 2 runs as
``spark-submit jobs/stream_clicks.py --available-now``, whose whole process group (driver JVM and
Python) is SIGKILLed right after the micro-batch's ``bronze.clicks`` commit, before its quarantine,
ingest log and checkpoint commit (the process waits there, at a failpoint, to be killed: the
commits after it take milliseconds). The query restarts as ``python -m pipelines.cli clicks stream
--processing-time 1s``, replays that batch, picks up wave 3 as it lands, and is stopped with
SIGTERM, which must exit 0. After each step ``bronze.clicks`` must hold exactly the files' valid
lines, once each, and the quarantine exactly the planted bad lines.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.clicks import stream
from pipelines.clicks.generate import generate
from pipelines.lake import Lake
from tests.conftest import REPO, lake_config, read_table, wait_for
from tests.integration.test_clicks_ingest import assert_exactly

pytestmark = pytest.mark.slow

WAIT_S = 600  # generous: the machine is shared; nothing here asserts on time
SETTINGS = ["--set", "clicks.max_files_per_trigger=2",
            "--set", "spark.conf.spark.sql.shuffle.partitions=2",
            "--set", "spark.conf.spark.default.parallelism=2"]


def _env() -> dict:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                PYTHONPATH=str(REPO))


def _commits(folder: Path) -> list[int]:
    return sorted(int(Path(p).name.split(".")[0]) for p in glob.glob(str(folder / "[0-9]*.json")))


def _batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("[0-9]*")) if folder.is_dir() else []


def _files_done(log: Path, after: int) -> int:
    """Files the stream reports done in micro-batches after batch ``after`` (from its log)."""
    done = re.findall(r"batch (\d+) done: (\d+) files", log.read_text())
    return sum(int(n) for batch, n in done if int(batch) > after)


def test_three_waves_a_sigkill_and_a_sigterm_leave_every_line_once(spark, tmp_path):
    landing, root = tmp_path / "landing", tmp_path / "lake"
    landing.mkdir()
    cfg = lake_config(root, "clicks.max_files_per_trigger=2")
    checkpoint = Path(stream.checkpoint_location(cfg, Lake(spark, cfg.lake)))
    made = []

    # wave 1: three files, in this process (two micro-batches)
    made += generate(landing, rows=1500, files=3, bad_lines=9, seed=1, first_day=0)
    assert stream.run(spark, cfg, str(landing), available_now=True) == 2
    assert_exactly(spark, root, made)

    # wave 2: spark-submit, killed (SIGKILL, driver JVM and Python) mid-batch
    made += generate(landing, rows=1500, files=2, bad_lines=9, seed=1, first_day=3)
    bronze_log = root / "bronze" / "clicks" / "_delta_log"
    before = _commits(bronze_log)
    log = tmp_path / "submit.log"
    cmd = [str(Path(sys.executable).parent / "crawlake-submit"), str(REPO / "jobs" / "stream_clicks.py"),
           "--landing", str(landing), "--available-now", "--lake-root", str(root), *SETTINGS]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                env=dict(_env(), CRAWLAKE_FAILPOINT="clicks_ingest.after_rows_commit"))
    wait_for(lambda: _commits(bronze_log) != before and "failpoint" in log.read_text(), proc, log,
             "the first bronze commit of wave 2", timeout_s=WAIT_S)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    offsets, committed = _batch_ids(checkpoint / "offsets"), _batch_ids(checkpoint / "commits")
    assert offsets and offsets[-1] not in committed, "the kill did not land inside a micro-batch"
    ingest_log = {r.source_file for r in read_table(spark, root, "ops.clicks_ingest_log").collect()}
    assert ingest_log == {f.path for f in made[:3]}, "the killed batch got as far as the ingest log"

    # restart as the CLI with a processing-time trigger: it replays the killed batch (its bronze
    # write skipped by txnVersion), then picks up wave 3 landing while it runs; SIGTERM stops it
    log = tmp_path / "cli.log"
    cmd = [sys.executable, "-m", "pipelines.cli", "clicks", "stream", "--landing", str(landing),
           "--processing-time", "1s", "--lake-root", str(root), *SETTINGS]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=REPO,
                                start_new_session=True)
    wait_for(lambda: f"batch {offsets[-1]} done: 2 files" in log.read_text(), proc, log, "the replayed micro-batch", timeout_s=WAIT_S)
    assert_exactly(spark, root, made)

    made += generate(landing, rows=1500, files=2, bad_lines=9, seed=1, first_day=5)   # wave 3
    wait_for(lambda: _files_done(log, after=offsets[-1]) == 2, proc, log, "wave 3's files", timeout_s=WAIT_S)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"SIGTERM did not stop the stream:\n{log.read_text()[-4000:]}")
    assert code == 0, log.read_text()[-4000:]
    assert "stop requested" in log.read_text() and "micro-batch(es) committed" in log.read_text()

    assert_exactly(spark, root, made)
    # the ledger counts every row once: the killed attempt never reached it
    runs = read_table(spark, root, "ops.runs").where("stage = 'clicks_stream'").collect()
    assert {r.status for r in runs} == {"succeeded"}
    assert sum(r.rows_out for r in runs) == sum(f.rows for f in made)
    assert sum(r.rows_quarantined for r in runs) == sum(len(f.bad) for f in made)
