"""Session-scoped local Spark with Delta, and lakes built once per test session."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REAL_DATA = Path(os.environ.get("CRAWLAKE_REAL_DATA", REPO.parent / "shared" / "data"))

#: JVM options of the tests' Spark drivers (Spark's launcher reads ``SPARK_SUBMIT_OPTS``), for a
#: suite that is CPU-bound on 2 cores. All use the throughput collector: G1's concurrent threads
#: take CPU from the work. The drivers tests start as subprocesses (``crawlake run``,
#: ``crawlake-submit``), each living seconds to a few minutes on a few hundred rows, also compile
#: with C1 only: there C2 spends more CPU compiling than its code saves. The session JVM of
#: :func:`spark` lives the whole run and keeps both tiers. Once :data:`CLASS_ARCHIVE` exists,
#: every driver maps Spark's and Delta's classes from it instead of loading them from the jars
#: (:func:`_use_class_archive`). Set ``SPARK_SUBMIT_OPTS`` (even empty) to choose otherwise.
SESSION_JVM_OPTS = "-XX:+UseParallelGC"
SUBPROCESS_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC"
OWN_JVM_OPTS = "SPARK_SUBMIT_OPTS" not in os.environ
os.environ.setdefault("SPARK_SUBMIT_OPTS", SUBPROCESS_JVM_OPTS)
#: The JVM's own messages about the archive (a JVM whose class path differs, e.g. an executor,
#: silently goes without it).
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _class_archive_path() -> Path:
    """A JDK dynamic class-data-sharing archive (AppCDS, JEP 350) of the classes a whole pipeline
    run loads, for this checkout's jars: named by their paths, sizes and times, so a changed jar
    gets a new archive (the JVM also refuses an archive whose jars changed)."""
    import hashlib
    from importlib.util import find_spec

    spec = find_spec("pyspark")
    folders = [Path(spec.origin).parent / "jars"] if spec and spec.origin else []
    digest = hashlib.sha256()
    for folder in (*folders, REPO / ".jars"):
        for jar in sorted(folder.glob("*.jar")):
            stat = jar.stat()
            digest.update(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return REPO / ".jars" / f"spark-classes-{digest.hexdigest()[:16]}.jsa"


CLASS_ARCHIVE = _class_archive_path()


def _use_class_archive() -> None:
    """Drivers started from now on map :data:`CLASS_ARCHIVE` (if it exists and the options are
    the suite's own): a cold driver's start and first jobs, mostly class loading, get shorter."""
    opts = f"-XX:SharedArchiveFile={CLASS_ARCHIVE} {QUIET_CDS}"
    if OWN_JVM_OPTS and CLASS_ARCHIVE.is_file() and opts not in os.environ["SPARK_SUBMIT_OPTS"]:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{SUBPROCESS_JVM_OPTS} {opts}"


_use_class_archive()


def real_file(name: str) -> str:
    """Absolute path of a file in the real test data folder; fails the test if it is missing."""
    path = REAL_DATA / name
    if not path.is_file():
        pytest.fail(f"real test data {name} not found in {REAL_DATA} "
                    "(../shared/data beside the checkout, or set CRAWLAKE_REAL_DATA=<dir>)")
    return str(path)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local session for the run, with Spark's session catalog on a Hive metastore (Derby) in
    a temporary folder, so catalog-mode lakes (``lake.mode=catalog``) are tested for real."""
    from pipelines.config import LakeConfig, load_config
    from pipelines.session import catalog_settings, get_spark

    metastore = tmp_path_factory.mktemp("metastore")
    catalog = catalog_settings(LakeConfig(root=str(metastore), mode="catalog", catalog="spark_catalog", schema="t"))
    cfg = load_config("local", ["spark.conf.spark.sql.shuffle.partitions=2", "spark.conf.spark.default.parallelism=2",
                                *(f"spark.conf.{k}={v}" for k, v in catalog.items())])
    with pytest.MonkeyPatch.context() as mp:
        if OWN_JVM_OPTS:
            mp.setenv("SPARK_SUBMIT_OPTS", os.environ["SPARK_SUBMIT_OPTS"].replace(SUBPROCESS_JVM_OPTS, SESSION_JVM_OPTS))
        session = get_spark(cfg.spark)
    with _python_workers_kept(session):
        yield session
    session.stop()


#: Seconds between the jobs of :func:`_python_workers_kept`: within Spark's idle timeout (60 s).
KEEP_WORKERS_EVERY_S = 30


@contextmanager
def _python_workers_kept(session):
    """While the block runs, a one-row ``mapInArrow`` job every :data:`KEEP_WORKERS_EVERY_S`
    seconds (job group ``tests-keep-python-workers``).

    Spark kills a session's idle Python workers once none was used for 60 s (PythonWorkerFactory's
    idle timeout, not configurable). The suite often leaves the session that long (subprocess
    runs, the S3 and cluster tests), and then the next stage forks fresh workers that import Great
    Expectations, the kernels and sentence-transformers and load the model again, seconds each.
    Any Python job keeps all of them: a test's stages find workers as warm as a long job's later
    tasks do. What the stages compute does not depend on it."""
    stop = threading.Event()

    def same(batches):   # nested: pickled by value (tests/ is not on the workers' path)
        yield from batches

    def keep():
        session.sparkContext.setJobGroup("tests-keep-python-workers", "keeps the session's Python workers alive")
        one_row = session.range(1, numPartitions=1)
        while not stop.wait(KEEP_WORKERS_EVERY_S):
            try:
                one_row.mapInArrow(same, "id long").collect()
            except Exception:   # noqa: BLE001 - the session is stopping or stopped: nothing to keep
                return

    thread = threading.Thread(target=keep, name="keep-python-workers", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=120)


#: The three ways a lake's writes are committed, as the tests run them: deltalake commits of the
#: tasks' files on a local path-mode lake, Spark's Delta writer on the same, and catalog mode
#: (tables in Spark's session catalog, written by Spark).
WRITERS = ("deltalake", "spark", "catalog")


def writer_overrides(writer: str, root: Path) -> list[str]:
    """Config overrides for a lake at ``root`` written the ``writer`` way (a catalog schema of its
    own per lake, named after the folder)."""
    if writer == "catalog":
        schema = "t_" + "".join(c if c.isalnum() else "_" for c in root.name).lower()
        return ["lake.mode=catalog", "lake.catalog=spark_catalog", f"lake.schema={schema}"]
    return [f"lake.writer={writer}"]


def lake_config(root: Path, *overrides: str, writer: str = "auto"):
    from pipelines.config import load_config

    extra = writer_overrides(writer, root) if writer != "auto" else []
    return load_config("local", [f"lake.root={root}", *extra, *overrides])


def read_lake(spark, cfg, qualified: str):
    """A table of the lake ``cfg`` describes (path or catalog mode), as a Spark DataFrame."""
    from pipelines.lake import Lake
    from schemas.catalog import TABLES

    return Lake(spark, cfg.lake).read(TABLES[qualified])


@pytest.fixture(scope="session")
def sample_lake(spark, tmp_path_factory) -> Path:
    """A lake on which the whole pipeline ran over the built-in sample crawl."""
    from pipelines.runner import run_pipeline

    root = tmp_path_factory.mktemp("sample_lake")
    run_pipeline(lake_config(root))
    return root


def read_table(spark, root: Path, qualified: str):
    layer, name = qualified.split(".")
    return spark.read.format("delta").load(str(root / layer / name))


#: The real archives of :func:`submitted_lake` (a renamed copy of the first is added).
REAL_LAKE_INPUTS = ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz")
RENAMED_COPY = "cc-main-2020-34-excerpt-renamed.warc.gz"


def _start_submitted(base: Path):
    """Start :func:`submitted_lake`'s ``crawlake-submit`` in its own process group, output in
    ``base/submit.log``; returns (process, lake root, input paths, log)."""
    import shutil
    import sys

    copy = base / "crawl-copy" / RENAMED_COPY
    copy.parent.mkdir()
    shutil.copyfile(real_file(REAL_LAKE_INPUTS[0]), copy)
    inputs = [*map(real_file, REAL_LAKE_INPUTS), str(copy)]
    root, log = base / "lake", base / "submit.log"
    cmd = [str(Path(sys.executable).parent / "crawlake-submit"), "jobs/run_all.py",
           "--input", *inputs, "--lake-root", str(root)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    if OWN_JVM_OPTS and not CLASS_ARCHIVE.is_file():   # this run's classes become the archive
        _ARCHIVING.append(CLASS_ARCHIVE.with_suffix(f".{os.getpid()}.tmp"))
        env["SPARK_SUBMIT_OPTS"] = f"{env['SPARK_SUBMIT_OPTS']} -XX:ArchiveClassesAtExit={_ARCHIVING[0]} {QUIET_CDS}"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, root, inputs, log


#: The archive :func:`_start_submitted`'s driver writes at its exit (none when it exists).
_ARCHIVING: list[Path] = []
#: :func:`_submitted_build`'s process, for :func:`pytest_runtest_setup`.
_BUILD: list[subprocess.Popen] = []


def _archive_written() -> None:
    """After the build exits: its archive (written whole: the JVM dumps it at exit) becomes
    :data:`CLASS_ARCHIVE`, unless the build failed; drivers started from now on use it."""
    if not _ARCHIVING or not _BUILD or _BUILD[0].poll() is None:
        return
    tmp = _ARCHIVING.pop()
    if _BUILD[0].returncode == 0 and tmp.is_file():
        os.replace(tmp, CLASS_ARCHIVE)
        for old in CLASS_ARCHIVE.parent.glob("spark-classes-*.jsa"):   # for jars that are gone
            if old != CLASS_ARCHIVE:
                old.unlink(missing_ok=True)
        _use_class_archive()
    else:
        tmp.unlink(missing_ok=True)


def pytest_runtest_setup(item) -> None:
    _archive_written()


@pytest.fixture(scope="session", autouse=True)
def _submitted_build(request, tmp_path_factory):
    """:func:`submitted_lake`'s build, started before the first test when a collected test needs
    the lake (None otherwise): the unit tier runs in one Python process and leaves a core idle,
    which the build uses. Killed (its process group) if still running when the session ends."""
    needed = any("submitted_lake" in getattr(item, "fixturenames", ()) for item in request.session.items)
    build = _start_submitted(tmp_path_factory.mktemp("submitted")) if needed else None
    if build:
        _BUILD.append(build[0])
    yield build
    if build and build[0].poll() is None:
        os.killpg(build[0].pid, signal.SIGKILL)
        build[0].wait()
    for tmp in _ARCHIVING:   # a killed build's
        tmp.unlink(missing_ok=True)


@pytest.fixture
def one_thread_while_building(_submitted_build):
    """torch and FAISS on one OpenMP thread while :func:`_submitted_build` runs, else as they
    were: with the build busy on the other core, two OpenMP threads wait on each other at every
    operator and a CPU-bound test takes several times longer; alone, two threads are faster."""
    import faiss
    import torch

    if _submitted_build is None or _submitted_build[0].poll() is not None:
        yield
        return
    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        faiss.omp_set_num_threads(before[1])


@pytest.fixture(scope="session")
def submitted_lake(_submitted_build) -> tuple[Path, list[str]]:
    """The real archives of :data:`REAL_LAKE_INPUTS` plus :data:`RENAMED_COPY` (a byte copy of the
    excerpt in another folder: ingest keeps one file's pages and quarantines the other's as
    ``duplicate_record``) through ``crawlake-submit jobs/run_all.py`` as the README types it,
    with no PYSPARK_* variable exported (started by :func:`_submitted_build`). Read by
    test_pipeline, test_clean_exit and test_forget; returns (lake root, the input paths)."""
    proc, root, inputs, log = _submitted_build
    try:
        proc.wait(timeout=1200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"crawlake-submit did not finish in 1200 s:\n{log.read_text()[-5000:]}")
    assert proc.returncode == 0, log.read_text()[-8000:]
    _archive_written()
    return root, inputs


@pytest.fixture(scope="session")
def sample_lake_with_clicks(sample_lake, tmp_path_factory) -> Path:
    """A copy of the sample lake plus click logs: three generated Criteo day files (with malformed
    lines) through ``clicks ingest`` and ``clicks features``. For the report and the notebooks,
    which show every layer."""
    import shutil

    from pipelines.clicks.generate import generate
    from pipelines.runner import run_stages
    from pipelines.stages import STAGES

    root = tmp_path_factory.mktemp("full_lake") / "lake"
    shutil.copytree(sample_lake, root)
    logs = tmp_path_factory.mktemp("click_logs")
    generate(logs, rows=3000, files=3, bad_lines=12, seed=7, max_cardinality=400)
    cfg = lake_config(root, f"clicks.input=[{logs}]", "clicks.vocab_min_frequency=2")
    run_stages(cfg, [STAGES["clicks_ingest"], STAGES["clicks_features"]])
    return root


@pytest.fixture(scope="session")
def s3_server():
    """An S3-compatible server (moto's) on 127.0.0.1 for the session, stopped by process group."""
    from pipelines.servers import start_s3

    server = start_s3()
    yield server
    server.stop()


#: One process's deltalake commits, ``python -c DELTALAKE_COMMITTER <table uri> <first value>
#: <commits> [<start at, epoch seconds>]``: values first, first + 1, ..., one row each, each in a
#: file staged by the task side of the lake (TableFiles) and committed by ``commits.commit``. With
#: a start time the first commit waits for it, spinning, so that racing processes reach the log
#: together. For the tests of writers racing on one table.
DELTALAKE_COMMITTER = """
import sys, time
import pyarrow as pa
from pipelines.lake import commits
from pipelines.lake.files import TableFiles, Target, collect_staged

uri, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
schema = pa.schema([("n", pa.int64())])
schema_json = '{"type": "struct", "fields": [{"name": "n", "type": "long", "nullable": true, "metadata": {}}]}'
target = Target("t.race", uri, schema, (), ("n",))
for value in range(first, first + n):
    with TableFiles({"rows": target}) as out:
        out.write("rows", pa.table({"n": [value]}, schema=schema))
    while time.time() < start:   # spin, not sleep: the writers must reach the log together
        pass
    assert commits.commit(uri, schema_json, (), collect_staged([{"staged": out.staged()}], ["rows"])["rows"])
"""


def s3_env(server) -> dict[str, str]:
    """This process's environment plus the standard AWS variables pointing at ``server``, for
    crawlake commands run as subprocesses (their Spark reads the variables when it starts)."""
    return {**os.environ, **server.env()}


def use_s3(spark, server) -> None:
    """Let the test's own (already running) Spark session read ``server``'s buckets through S3A:
    the JVM started before the AWS variables were set, so its Hadoop configuration gets them."""
    conf = spark._jsc.hadoopConfiguration()
    for key, value in {"fs.s3a.endpoint": server.endpoint, "fs.s3a.path.style.access": "true",
                       "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.endpoint.region": server.region,
                       "fs.s3a.access.key": server.access_key, "fs.s3a.secret.key": server.secret_key,
                       "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}.items():
        conf.set(key, value)


#: Real pages for every stage, with the built-in sample crawl for its planted duplicates and
#: non-HTML payloads (bronze's quarantine rows are compared across writers on every real archive
#: in test_ingest_real_world.py).
ENGINE_WARCS = ("cc-main-2020-34-excerpt.warc.gz", "cc-main-2024-22-whirlwind.warc.gz",
                "cc-main-2024-22-whirlwind.warc.wet.gz")
#: Settings of every engine_lakes run (and of the cluster run compared with them).
ENGINE_SETTINGS = ("ingest.progress=false", "index.shards=2")


@pytest.fixture(scope="session")
def engine_lakes(spark, tmp_path_factory):
    """The real WARCs through every stage, and generated click logs through the click flow, once
    per writer: ``{writer: (config, {stage: StageRun})}``; the inputs are ``config.ingest.input``."""
    from pipelines.clicks.generate import generate
    from pipelines.runner import run_pipeline, run_stages
    from pipelines.sample import write_sample_warc
    from pipelines.stages import STAGES

    logs = tmp_path_factory.mktemp("engines_logs")
    generate(logs, rows=800, files=2, bad_lines=9, seed=5)
    sample = str(write_sample_warc(logs / "crawlake-sample.warc.gz"))
    out = {}
    for writer in WRITERS:
        root = tmp_path_factory.mktemp(f"engines_{writer}")
        cfg = lake_config(root, *ENGINE_SETTINGS, writer=writer)
        cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": [sample, *(real_file(n) for n in ENGINE_WARCS)]}),
                                     "clicks": cfg.clicks.model_copy(update={"input": [str(logs)]})})
        runs = run_pipeline(cfg) + run_stages(cfg, [STAGES["clicks_ingest"], STAGES["clicks_features"]])
        out[writer] = (cfg, {r.stage: r for r in runs})
    return out


def wait_for(predicate, proc, log: Path, what: str, *, timeout_s: float, poll_s: float = 0.1) -> None:
    """Poll ``predicate`` every ``poll_s`` seconds while the subprocess ``proc`` (its own process
    group, output in ``log``) runs: fail the test if it exits first, or kill its group and fail
    after ``timeout_s`` seconds; the failure shows the end of ``log``."""
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"the process exited ({proc.returncode}) before {what}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")
        time.sleep(poll_s)
