"""Crashes with the lake on object storage (issue 19, items 4 and 5), on moto's S3 server.

The local-disk crash tests, ported to an ``s3a://`` lake: a driver SIGKILLed mid-ingest
(``test_ingest``), and the click stream's three waves with a SIGKILL and a SIGTERM between them
(``test_clicks_stream``), its landing folder and checkpoint in the bucket too. Every crawlake run
here is a subprocess with the AWS variables set (a Spark session reads them when it starts; the
test's own session started without them). The test reads the tables with ``deltalake``/pyarrow
(:mod:`pipelines.lake.read`) and lists Delta logs and checkpoints with boto3.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from deltalake.exceptions import TableNotFoundError

from pipelines.clicks.generate import generate
from pipelines.lake import read as lake_read
from pipelines.runner import run_pipeline
from tests.conftest import REPO, real_file, s3_env, wait_for
from tests.integration.test_clicks_ingest import expected_bad, expected_rows
from tests.integration.test_clicks_stream import SETTINGS, WAIT_S, _files_done
from tests.integration.test_ingest import REAL, ingest_cfg

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


@pytest.fixture
def aws(s3_server, monkeypatch):
    """The AWS variables in this process too, for ``deltalake``/pyarrow reads of the bucket."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


def _table(root: str, qualified: str, columns=None):
    """A table of the lake at ``root`` (local path or ``s3a://``) as a pyarrow Table; raises
    TableNotFoundError when it has no commit yet."""
    uri = f"{root.replace('s3a://', 's3://', 1).rstrip('/')}/{qualified.replace('.', '/')}"
    return lake_read.read(uri, columns)


def _keys(client, url: str) -> list[str]:
    """Names directly under the folder ``url`` (``s3://`` or ``s3a://``), by a boto3 client."""
    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    prefix = prefix.rstrip("/") + "/"
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"][len(prefix):] for page in pages for o in page.get("Contents", []) if "/" not in o["Key"][len(prefix):]]


def _numbered(client, url: str, suffix: str = "") -> list[int]:
    """The numbered entries under ``url``: Delta log versions (``suffix`` ``.json``) or a
    streaming checkpoint's batch ids (offsets/, commits/)."""
    return sorted(int(m.group(1)) for k in _keys(client, url) if (m := re.fullmatch(rf"(\d+){re.escape(suffix)}", k)))


@pytest.fixture
def spawn():
    """Start a command in its own process group (a kill takes the driver JVM and its Python with
    it), output to a log file; a group still running when the test ends (it failed) is killed."""
    started = []

    def start(cmd: list[str], log: Path, env: dict) -> subprocess.Popen:
        with log.open("w") as out:
            started.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                            start_new_session=True))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            _kill(proc)


def _finish(proc: subprocess.Popen, log: Path) -> None:
    try:
        code = proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{proc.args[1:4]} did not finish:\n{log.read_text()[-4000:]}")
    assert code == 0, log.read_text()[-4000:]


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# -- item 4: the driver SIGKILLed mid-ingest -------------------------------------------------------

def test_killed_ingest_on_s3_restarted_yields_exactly_an_uninterrupted_run(spark, aws, spawn, tmp_path):
    names = [n for n in REAL if not n.startswith("ia-")]   # small files: one commit each
    reference = tmp_path / "reference"
    run_pipeline(ingest_cfg(reference, [real_file(n) for n in names]), stages=("ingest",))

    bucket = aws.create_bucket("ingest-faults")
    inputs = [aws.upload(real_file(n), f"{bucket}/crawl/{n}") for n in names]
    root = bucket.replace("s3://", "s3a://") + "/lake"
    cmd = [str(BIN / "crawlake"), "run", "--stages", "ingest", "--lake-root", root,
           "--set", "ingest.progress=false", "--input", *inputs]
    s3 = aws.client()

    def ingest_log() -> dict[str, str]:
        try:
            return {r["source_file"]: r["run_id"] for r in _table(root, "ops.ingest_log", ["source_file", "run_id"]).to_pylist()}
        except TableNotFoundError:   # not created yet
            return {}

    log = tmp_path / "killed.log"
    proc = spawn([*cmd, "--set", "ingest.files_per_commit=1"], log, s3_env(aws))
    log_versions = f"{root}/ops/ingest_log/_delta_log"   # listed first: cheaper than opening the table
    wait_for(lambda: _numbered(s3, log_versions, ".json") and ingest_log(), proc, log, "the first committed file", timeout_s=WAIT_S, poll_s=0.5)
    _kill(proc)
    committed = ingest_log()
    assert 1 <= len(committed) < len(inputs), "the kill did not land between two commits"

    log = tmp_path / "rerun.log"   # the rest in one commit, as the local test's restart
    proc = spawn(cmd, log, s3_env(aws))
    _finish(proc, log)
    after = ingest_log()
    assert set(after) == set(inputs)
    assert {f: after[f] for f in committed} == committed, "the rerun re-ingested a committed file"

    doc_ids = lambda r: sorted(_table(str(r), "bronze.documents", ["doc_id"]).column("doc_id").to_pylist())
    got = doc_ids(root)
    assert got == doc_ids(reference) and len(set(got)) == len(got)
    quarantine = lambda r: sorted((os.path.basename(x["source_file"]), x["record_offset"], x["reason"]) for x in
                                  _table(str(r), "bronze.quarantine", ["source_file", "record_offset", "reason"]).to_pylist())
    assert quarantine(root) == quarantine(reference)


# -- item 5: the click stream, landing folder and checkpoint in the bucket -------------------------

def _land(server, landing: str, made) -> list:
    """Upload generated files to ``landing`` (one PUT each: an object appears whole); returns
    them as the stream names them (``source_file``)."""
    out = []
    for f in made:
        url = f"{landing}/{os.path.basename(f.path)}"
        server.upload(f.path, url)
        out.append(dataclasses.replace(f, path=url))
    return out


def _assert_exactly(root: str, made) -> None:
    """``test_clicks_ingest.assert_exactly``, read without Spark: bronze.clicks holds exactly the
    valid lines of ``made``, the quarantine exactly the bad ones."""
    got = [(r["source_file"], r["line_number"], r["row_key"]) for r in
           _table(root, "bronze.clicks", ["source_file", "line_number", "row_key"]).to_pylist()]
    assert len({k for _, _, k in got}) == len(got), "duplicate row keys"
    assert Counter((f, n) for f, n, _ in got) == Counter(expected_rows(made)), "bronze rows differ from the files"
    rows = _table(root, "bronze.clicks_quarantine", ["source_file", "line_number", "reason"]).to_pylist()
    bad = {(r["source_file"], r["line_number"]): r["reason"] for r in rows}
    assert len(rows) == len(bad) and bad == expected_bad(made)
    per_file = Counter(f for f, _, _ in got) + Counter(f for f, _ in bad)
    for f in made:   # nothing lost: rows in = rows in bronze + rows quarantined, per file
        assert per_file[f.path] + f.header_lines == f.lines


def test_click_stream_on_s3_three_waves_a_sigkill_and_a_sigterm_leave_every_line_once(aws, spawn, tmp_path):
    bucket = aws.create_bucket("clicks-faults").replace("s3://", "s3a://")
    landing, root, local = f"{bucket}/landing", f"{bucket}/lake", tmp_path / "generated"
    checkpoint = f"{root}/_checkpoints/clicks_stream"
    env, s3 = s3_env(aws), aws.client()
    cli = [sys.executable, "-m", "pipelines.cli", "clicks", "stream", "--landing", landing, "--lake-root", root, *SETTINGS]
    made = []

    # wave 1: three files, available-now (two micro-batches)
    made += _land(aws, landing, generate(local, rows=1500, files=3, bad_lines=9, seed=1, first_day=0))
    log = tmp_path / "wave1.log"
    _finish(spawn([*cli, "--available-now"], log, env), log)
    assert "2 micro-batch(es) committed" in log.read_text()
    _assert_exactly(root, made)

    # wave 2: crawlake-submit, killed (SIGKILL, driver JVM and Python) mid-batch, after its bronze commit
    made += _land(aws, landing, generate(local, rows=1500, files=2, bad_lines=9, seed=1, first_day=3))
    bronze_log = f"{root}/bronze/clicks/_delta_log"
    before = _numbered(s3, bronze_log, ".json")
    log = tmp_path / "submit.log"
    proc = spawn([str(BIN / "crawlake-submit"), str(REPO / "jobs" / "stream_clicks.py"), "--landing", landing,
                   "--available-now", "--lake-root", root, *SETTINGS],
                  log, dict(env, CRAWLAKE_FAILPOINT="clicks_ingest.after_rows_commit"))
    wait_for(lambda: "failpoint" in log.read_text() and _numbered(s3, bronze_log, ".json") != before, proc, log,
             "the first bronze commit of wave 2", timeout_s=WAIT_S, poll_s=0.5)
    _kill(proc)
    offsets, committed = _numbered(s3, f"{checkpoint}/offsets"), _numbered(s3, f"{checkpoint}/commits")
    assert offsets and offsets[-1] not in committed, "the kill did not land inside a micro-batch"
    logged = {r["source_file"] for r in _table(root, "ops.clicks_ingest_log", ["source_file"]).to_pylist()}
    assert logged == {f.path for f in made[:3]}, "the killed batch got as far as the ingest log"

    # restart with a processing-time trigger: it replays the killed batch (its bronze write skipped
    # by txnVersion), then picks up wave 3 landing while it runs; SIGTERM stops it with exit 0
    log = tmp_path / "cli.log"
    proc = spawn([*cli, "--processing-time", "1s"], log, env)
    wait_for(lambda: f"batch {offsets[-1]} done: 2 files" in log.read_text(), proc, log, "the replayed micro-batch", timeout_s=WAIT_S, poll_s=0.5)
    _assert_exactly(root, made)

    made += _land(aws, landing, generate(local, rows=1500, files=2, bad_lines=9, seed=1, first_day=5))   # wave 3
    wait_for(lambda: _files_done(log, after=offsets[-1]) == 2, proc, log, "wave 3's files", timeout_s=WAIT_S, poll_s=0.5)
    proc.send_signal(signal.SIGTERM)
    _finish(proc, log)
    assert "stop requested" in log.read_text() and "micro-batch(es) committed" in log.read_text()

    _assert_exactly(root, made)
    # the ledger counts every row once: the killed attempt never reached it
    runs = [r for r in _table(root, "ops.runs", ["stage", "status", "rows_out", "rows_quarantined"]).to_pylist()
            if r["stage"] == "clicks_stream"]
    assert {r["status"] for r in runs} == {"succeeded"}
    assert sum(r["rows_out"] for r in runs) == sum(f.rows for f in made)
    assert sum(r["rows_quarantined"] for r in runs) == sum(len(f.bad) for f in made)
