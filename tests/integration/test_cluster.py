"""Beyond one machine: the whole pipeline submitted to a Spark standalone cluster (a master and two
1-core workers on 127.0.0.1) with the crawl and the lake on an S3-compatible server, as the
README types it (``crawlake-submit --master spark://… jobs/run_all.py --input s3://… --lake-root
s3a://…``), with a worker SIGKILLed in the middle of dedup and another in the middle of
tokenize. Its tables equal the same inputs run undisturbed with ``local[*]`` on local disk; no key
is there twice and no lost attempt's file is referenced; planted secrets appear in no output and
in no file of the lake."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ENGINE_SETTINGS, ENGINE_WARCS, REPO, real_file, wait_for

from pipelines.lake import read as lake_read
from schemas.catalog import TABLES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

BUCKET = "cluster"
#: Columns that differ between two runs by design (times, run ids, where files went).
VOLATILE = {"committed_at", "run_id", "ingest_time", "built_at", "build_s", "path", "mtime"}
#: The WARC flow's tables, compared whole (vectors apart, within 1e-5).
TABLES_COMPARED = ("bronze.documents", "bronze.quarantine", "ops.ingest_log", "silver.documents_dedup",
                   "silver.duplicate_clusters", "silver.dedup_index", "silver.documents_clean",
                   "silver.filter_decisions", "gold.token_sequences", "gold.document_tokens", "gold.index_manifest")
#: Recognizable fake credentials: the S3 server accepts any, so the run works with them.
PLANTED = {"env secret key": "PLANTEDsecretKEYfromENV0x5eC", "env session token": "PLANTEDsessionTOKENfromENV0x7a",
           "--set secret key": "PLANTEDsecretKEYfromSET0x9d"}
WAIT_S = 900


@pytest.fixture(scope="session")
def cluster_run(s3_server, tmp_path_factory):
    """The whole pipeline on the cluster, lake on S3, with worker 0 SIGKILLed in the middle of
    dedup and worker 1 in the middle of tokenize (each replaced by a fresh worker, as a cluster
    manager would), going on in a thread: ``(cluster, lake root, future of the run's output)``.

    Session-scoped so that pytest sets it up before ``engine_lakes`` (higher scopes first, then
    argument order), which the run is compared with: the run's processes and the in-process
    builds of the engine lakes share the two cores instead of taking turns. This process's
    environment is not touched (the subprocesses get theirs explicitly). The bucket holds the
    engine lakes' inputs (the built-in sample, written the same, and the real WARCs) under
    crawl/, file names kept."""
    from concurrent.futures import ThreadPoolExecutor

    from pipelines.sample import write_sample_warc
    from pipelines.servers import start_standalone

    s3_server.create_bucket(BUCKET)
    sample = write_sample_warc(tmp_path_factory.mktemp("cluster_inputs") / "crawlake-sample.warc.gz")
    for path in (sample, *(real_file(n) for n in ENGINE_WARCS)):
        s3_server.upload(path, f"s3://{BUCKET}/crawl/{Path(path).name}")
    work = tmp_path_factory.mktemp("spark_work")
    env = {**s3_server.env(), "AWS_SECRET_ACCESS_KEY": PLANTED["env secret key"],
           "AWS_SESSION_TOKEN": PLANTED["env session token"]}
    cluster = start_standalone(2, cores=1, memory="2g", work_dir=str(work), env=env)
    cluster.work_dir, cluster.env = work, env
    pool, proc = ThreadPoolExecutor(1, thread_name_prefix="cluster-run"), None
    try:
        log = tmp_path_factory.mktemp("cluster_run") / "run.log"
        root = f"s3a://{BUCKET}/lake"
        proc = submit(cluster, "--lake-root", root, "--set", "tracking.progress=lines",
                      "--set", "tracking.progress_interval_s=0.25", log=log)
        yield cluster, root, pool.submit(_kill_workers_and_finish, cluster, proc, log)
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, 9)
        pool.shutdown(wait=True)   # the thread ends once the run has
        cluster.stop()


def _kill_workers_and_finish(cluster, proc: subprocess.Popen, log: Path) -> str:
    from pipelines.servers import start_worker

    for stage, worker in (("dedup", 0), ("tokenize", 1)):
        wait_for(lambda: _progress(log, stage), proc, log, f"{stage}'s first tasks", timeout_s=WAIT_S)
        cluster.kill_worker(worker)
        cluster.workers[worker] = start_worker(cluster.master_url, cores=1, memory="2g",
                                               work_dir=str(cluster.work_dir), env=cluster.env)
    return finish(proc, log)


@pytest.fixture(scope="module")
def s3(s3_server, cluster_run):
    """The S3 server with the AWS variables in this process's environment, for the JVM-free reads
    below (for this module only)."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in s3_server.env().items():
            mp.setenv(key, value)
        yield s3_server


@pytest.fixture(scope="module")
def cluster(cluster_run):
    """The run's cluster, stopped once this module's tests are done (the session's end stops it
    again, a no-op)."""
    yield cluster_run[0]
    cluster_run[0].stop()


def submit(cluster, *args: str, log: Path) -> subprocess.Popen:
    """``crawlake-submit --master <cluster> jobs/run_all.py …`` as the README shows it, output in
    ``log``; the AWS variables (with the planted secrets) in its environment, nothing else set."""
    env = {**s3_env_of(cluster), "CI": "1"}
    for key in [k for k in env if k.startswith("PYSPARK_")]:
        del env[key]
    cmd = [str(Path(sys.executable).parent / "crawlake-submit"), "--master", cluster.master_url,
           "--conf", "spark.executor.memory=1g",
           "--conf", f"spark.executor.extraJavaOptions={env['SPARK_SUBMIT_OPTS']}",   # the driver's (conftest)
           "jobs/run_all.py",
           "--input", f"s3://{BUCKET}/crawl/*.gz", *args,
           *(a for s in ENGINE_SETTINGS for a in ("--set", s)),
           "--set", f"spark.conf.spark.hadoop.fs.s3a.secret.key={PLANTED['--set secret key']}"]
    with log.open("w") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def s3_env_of(cluster) -> dict[str, str]:
    return {**os.environ, **cluster.env}


def finish(proc: subprocess.Popen, log: Path) -> str:
    try:
        proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        pytest.fail(f"the cluster run did not finish in {WAIT_S} s:\n{log.read_text()[-4000:]}")
    text = log.read_text()
    assert proc.returncode == 0, text[-6000:]
    return text


def _progress(log: Path, stage: str) -> bool:
    """Whether the run's plain progress lines show ``stage`` running with a task done, not yet done."""
    return any(int(done) > 0 and "(done)" not in line
               for line, done in re.findall(rf"^(\s+{stage}: (\d+)/\d+ tasks.*)$", log.read_text(), re.MULTILINE))


@pytest.fixture(scope="module")
def cluster_lake(s3, cluster_run):
    """The cluster run, finished: returns (lake root, the run's output)."""
    _, root, output = cluster_run
    return root, output.result()


def _basename_inputs(value):
    """Input locations differ between the runs (local paths, s3:// keys): compare by file name."""
    if isinstance(value, str) and (value.startswith(("/", "s3://", "s3a://", "file:")) and value.endswith(".gz")):
        return value.rsplit("/", 1)[-1]
    return value


def rows(root: str, table: str, skip=()) -> list[tuple]:
    data = lake_read.read_spec(TABLES[table], root)
    keep = [c for c in data.column_names if c not in VOLATILE and c not in skip]
    return sorted(tuple(_basename_inputs(r[c]) for c in keep) for r in data.select(keep).to_pylist())


def vectors(root: str) -> dict:
    data = lake_read.read_spec(TABLES["gold.embeddings"], root).to_pylist()
    return {(r["doc_id"], r["chunk_id"], r["model"], r["model_revision"]): r["vector"] for r in data}


@pytest.mark.parametrize("table", TABLES_COMPARED)
def test_the_cluster_run_on_s3_equals_a_local_run(cluster_run, engine_lakes, cluster_lake, table):
    reference = rows(engine_lakes["deltalake"][0].lake.root, table)
    assert reference, f"{table} is empty: nothing compared"
    assert rows(cluster_lake[0], table) == reference


def test_the_cluster_runs_vectors_equal_a_local_runs(cluster_run, engine_lakes, cluster_lake):
    reference, other = vectors(engine_lakes["deltalake"][0].lake.root), vectors(cluster_lake[0])
    assert reference and other.keys() == reference.keys()
    assert max(abs(a - b) for k in reference for a, b in zip(reference[k], other[k])) <= 1e-5


def test_the_cluster_run_conserves_tokens_and_says_who_committed(cluster_lake):
    root, output = cluster_lake
    from pipelines.kernels.tokens import count_tokens

    texts = lake_read.read_spec(TABLES["silver.documents_clean"], root, columns=["text"]).column("text").to_pylist()
    seqs = lake_read.read_spec(TABLES["gold.token_sequences"], root, columns=["num_tokens"]).column("num_tokens")
    assert texts and sum(seqs.to_pylist()) == sum(count_tokens(texts)) + len(texts)   # a separator after each document
    runs = lake_read.read_spec(TABLES["ops.runs"], root).to_pylist()
    assert {r["stage"] for r in runs} == {"ingest", "dedup", "filter", "tokenize", "embed", "index"}
    assert {r["status"] for r in runs} == {"succeeded"}
    # on S3 with conditional PUTs deltalake commits the tables tasks stage (their files written
    # once, by the executors) and the rows the driver writes (the index manifest)
    writers = {table: engine for r in runs for table, engine in (r["writers"] or [])}   # a map: (key, value) pairs
    assert writers["bronze.documents"] == writers["silver.documents_dedup"] == writers["silver.duplicate_clusters"] \
        == writers["silver.documents_clean"] == writers["gold.token_sequences"] \
        == writers["gold.index_manifest"] == "deltalake", writers
    # crawlake's lines stay readable: Spark logs at WARN, so no INFO line reached the output
    assert not re.search(r"^\S+ \S+ INFO ", output, re.MULTILINE), output[:3000]
    assert "succeeded" in output and "index" in output


def _everything_written(s3, cluster, output: str) -> dict[str, bytes]:
    """Every byte the run left: its output, every object in the bucket (the lake: Delta logs,
    data files, index shards), the decoded rows of every table, the executors' logs."""
    found = {"run output": output.encode()}
    client = s3.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="lake/"):
        for obj in page.get("Contents", []):
            found[f"s3://{BUCKET}/{obj['Key']}"] = client.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    for name, spec in TABLES.items():
        if lake_read.exists(spec.path_under(f"s3a://{BUCKET}/lake")):
            found[f"rows of {name}"] = repr(lake_read.read_spec(spec, f"s3a://{BUCKET}/lake").to_pylist()).encode()
    for path in Path(cluster.work_dir).rglob("*"):
        if path.is_file() and path.suffix not in (".jar", ".py", ".zip"):
            found[str(path)] = path.read_bytes()
    return found


def test_planted_secrets_appear_nowhere(s3, cluster, cluster_lake):
    found = _everything_written(s3, cluster, cluster_lake[1])
    assert any(k.endswith(".json") and "_delta_log" in k for k in found) and any("rows of ops.runs" == k for k in found)
    leaks = [(what, where) for what, secret in PLANTED.items() for where, data in found.items()
             if secret.encode() in data]
    assert not leaks, leaks


def test_after_the_worker_kills_keys_are_unique_and_every_referenced_file_exists(s3, cluster_lake):
    """Spark re-ran the lost tasks (the tables equal the local run, above); here: no row twice and
    no file of a lost task attempt referenced by a log."""
    root, client = cluster_lake[0], s3.client()
    for table in TABLES_COMPARED:
        spec = TABLES[table]
        if spec.keys:
            data = lake_read.read_spec(spec, root, columns=list(spec.keys)).to_pylist()
            assert len({tuple(r.values()) for r in data}) == len(data), f"{table} has a key twice"
        files = lake_read.data_files(lake_read.open_table(spec.path_under(root)))
        assert files.uris, table
        for uri in files.uris:
            client.head_object(Bucket=BUCKET, Key=uri.split(f"{BUCKET}/", 1)[1])   # raises if missing


CHECKPOINT_SCRIPT = '''
import sys, time
from pathlib import Path
from pyspark.sql import SparkSession
from pipelines.session import counted_checkpoint, local_checkpoint

spark = SparkSession.builder.getOrCreate()
signals = Path(sys.argv[1])
deadline = time.monotonic() + 120
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
    time.sleep(0.2)   # the driver and both executors, so the blocks spread over the two
df = local_checkpoint(spark.range(0, 100000, numPartitions=4).selectExpr("id", "id % 7 AS k"))
lazy, sevens = counted_checkpoint(spark.range(0, 70000, numPartitions=4).selectExpr("id", "id % 7 AS k"), "k = 0")
(signals / "checkpointed").write_text("")
while not (signals / "killed").exists() and time.monotonic() < deadline:
    time.sleep(0.1)
print("RESULT", df.groupBy().sum("id").first()[0], df.count())
print("COUNTED", sevens, lazy.groupBy().sum("id").first()[0], lazy.count())
'''


def test_a_local_checkpoint_survives_a_lost_worker(cluster, cluster_lake, tmp_path):
    """``pipelines.session.local_checkpoint`` (and ``counted_checkpoint``'s) on the cluster: after the worker holding part of a
    checkpoint is SIGKILLed, jobs that read the checkpoint still give its rows (each block has a
    second copy on the other executor); one copy would fail them with
    CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND, as dedup failed before its checkpoints were replicated."""
    from pipelines.servers import start_worker

    script, log = tmp_path / "checkpoint_job.py", tmp_path / "checkpoint_job.log"
    script.write_text(CHECKPOINT_SCRIPT)
    cmd = [str(Path(sys.executable).parent / "crawlake-submit"), "--master", cluster.master_url,
           "--conf", "spark.executor.memory=1g", str(script), str(tmp_path)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env={**s3_env_of(cluster), "CI": "1"}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "checkpointed").exists(), proc, log, "the checkpoint", timeout_s=300)
        cluster.kill_worker(0)
        (tmp_path / "killed").write_text("")
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        cluster.workers[0] = start_worker(cluster.master_url, cores=1, memory="2g",
                                          work_dir=str(cluster.work_dir), env=cluster.env)
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    assert f"RESULT {sum(range(100000))} 100000" in text
    assert f"COUNTED 10000 {sum(range(70000))} 70000" in text
