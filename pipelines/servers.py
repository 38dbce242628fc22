"""Local stand-ins for a cluster's services, on 127.0.0.1, stopped by their process ids.

* :func:`start_s3` — an S3-compatible object store: moto's server (``moto[server]`` from PyPI),
  speaking the S3 protocol (and DynamoDB's, for Delta's S3 log store) over HTTP;
* :func:`start_standalone` — a Spark standalone cluster: a master and workers started with
  pyspark's own ``bin/spark-class``;
* :func:`start_dask` — a ``dask.distributed`` cluster: a scheduler and worker processes started
  with the ``dask scheduler`` / ``dask worker`` commands, for ``embed.engine: dask`` with
  ``embed.dask_scheduler``.

For the tests, the benchmarks, and trying the object-store setup on one machine. Every wait is
bounded in time; a server that does not come up is stopped and raises RuntimeError.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, timeout_s: float = 10) -> None:
    """SIGTERM the process group ``proc`` leads, then SIGKILL after ``timeout_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout_s)


def _wait_http(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    _stop(proc)
    raise RuntimeError(f"no answer from {url} within {timeout_s:.0f} s")


class _Processes:
    """A running service's processes, stopped in :meth:`processes` order by :meth:`stop` or at
    the end of a ``with`` block."""

    def processes(self) -> tuple[subprocess.Popen, ...]:
        raise NotImplementedError

    def stop(self) -> None:
        for proc in self.processes():
            _stop(proc)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class S3Server(_Processes):
    """A running S3-compatible server. ``endpoint``: its URL; the credentials are the fake ones
    the server accepts (moto checks none), passed to clients like real ones."""
    endpoint: str
    process: subprocess.Popen
    access_key: str = "testing-access-key"
    secret_key: str = "testing-secret-key"
    region: str = "us-east-1"
    buckets: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point boto3, fsspec (s3fs), pyarrow, deltalake and
        crawlake's Spark settings at this server."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def client(self):
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=self.region)

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name``; returns ``s3://<name>``."""
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return f"s3://{name}"

    def upload(self, path: str | os.PathLike, url: str) -> str:
        """Upload local file ``path`` to ``s3://bucket/key`` ``url``; returns ``url``."""
        bucket, _, key = url.removeprefix("s3://").removeprefix("s3a://").partition("/")
        self.client().upload_file(str(path), bucket, key)
        return url

    def processes(self) -> tuple[subprocess.Popen, ...]:
        return (self.process,)


def start_s3(port: int | None = None, timeout_s: float = 60) -> S3Server:
    """Start moto's server on 127.0.0.1 (``port``, default a free one) in its own process group;
    returns once it answers HTTP. Raises RuntimeError when it does not within ``timeout_s``
    seconds, ImportError-like RuntimeError when ``moto[server]`` is not installed."""
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        raise RuntimeError("the S3-compatible test server needs moto[server] (pip install 'moto[server]')") from exc
    port = port or free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    _wait_http(f"{endpoint}/moto-api/", proc, timeout_s)
    return S3Server(endpoint, proc)


@dataclass
class SparkCluster(_Processes):
    """A running Spark standalone cluster: ``master_url`` (``spark://127.0.0.1:<port>``), the
    master's web UI, and the processes (master first, then workers) by id."""
    master_url: str
    web_ui: str
    master: subprocess.Popen
    workers: list[subprocess.Popen]

    def alive_workers(self) -> int:
        """Workers the master counts as alive (from its web UI's JSON)."""
        import json

        with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=5) as r:
            return int(json.load(r).get("aliveworkers", 0))

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Kill worker ``index`` and the executor it launched (its whole process group)."""
        proc = self.workers[index]
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(30)

    def processes(self) -> tuple[subprocess.Popen, ...]:
        return (*self.workers, self.master)


def _spark_class() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def start_worker(master_url: str, *, cores: int = 1, memory: str = "2g", work_dir: str | None = None,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """One worker process of a standalone cluster on 127.0.0.1, in its own process group (its
    executors are its children, so killing the group takes them too)."""
    cmd = [_spark_class(), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(free_port()),
           "--webui-port", str(free_port()), "--cores", str(cores), "--memory", memory]
    if work_dir:
        cmd += ["--work-dir", work_dir]
    return subprocess.Popen([*cmd, master_url], env=_cluster_env(env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _cluster_env(env: dict[str, str] | None) -> dict[str, str]:
    out = {**os.environ, **(env or {})}
    out.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1")
    return out


def start_standalone(workers: int = 2, *, cores: int = 1, memory: str = "2g", work_dir: str | None = None,
                     env: dict[str, str] | None = None, timeout_s: float = 120) -> SparkCluster:
    """Start a Spark standalone master and ``workers`` workers (``cores`` cores and ``memory``
    each) on 127.0.0.1 with pyspark's own ``spark-class``, each process in its own group, the
    workers running this interpreter's Python (``env`` added to their environment, e.g. the AWS
    variables of :class:`S3Server`). Returns once the master counts every worker alive; raises
    RuntimeError (after stopping what started) when that takes over ``timeout_s`` seconds."""
    port, ui = free_port(), free_port()
    master = subprocess.Popen([_spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)],
                              env=_cluster_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", master, [])
    try:
        _wait_http(f"{cluster.web_ui}/json/", master, timeout_s)
        for _ in range(workers):
            cluster.workers.append(start_worker(cluster.master_url, cores=cores, memory=memory, work_dir=work_dir,
                                                env=env))
        deadline = time.monotonic() + timeout_s
        while cluster.alive_workers() < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cluster.alive_workers()} of {workers} workers joined {cluster.master_url} "
                                   f"within {timeout_s:.0f} s")
            time.sleep(0.5)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@dataclass
class DaskCluster(_Processes):
    """A running ``dask.distributed`` cluster: the scheduler's ``address``
    (``tcp://127.0.0.1:<port>``, what ``embed.dask_scheduler`` takes) and the processes
    (scheduler first, then workers) by id."""
    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen]

    def processes(self) -> tuple[subprocess.Popen, ...]:
        return (*self.workers, self.scheduler)


def start_dask(workers: int = 2, *, threads: int = 1, env: dict[str, str] | None = None,
               timeout_s: float = 120) -> DaskCluster:
    """Start a Dask scheduler and ``workers`` worker processes (``threads`` threads each) on
    127.0.0.1 with this interpreter's ``dask`` command, each process in its own group (``env``
    added to their environment). Returns once the scheduler counts every worker; raises
    RuntimeError (after stopping what started) when that takes over ``timeout_s`` seconds."""
    from distributed import Client

    dask = [sys.executable, "-m", "dask"]
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    run_env = {**os.environ, **(env or {})}
    quiet = {"env": run_env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    scheduler = subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--no-dashboard"], **quiet)
    cluster = DaskCluster(address, scheduler, [])
    try:
        for _ in range(workers):
            cluster.workers.append(subprocess.Popen(
                [*dask, "worker", address, "--host", "127.0.0.1", "--nthreads", str(threads),
                 "--no-dashboard", "--no-nanny"], **quiet))
        with Client(address, timeout=timeout_s) as client:   # raises OSError if the scheduler never answers
            client.wait_for_workers(workers, timeout=timeout_s)
    except BaseException as exc:
        cluster.stop()
        if isinstance(exc, (OSError, TimeoutError)):
            raise RuntimeError(f"the Dask cluster at {address} did not get {workers} workers within {timeout_s:.0f} s: {exc}") from exc
        raise
    return cluster
