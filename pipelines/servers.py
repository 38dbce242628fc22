"""Local stand-ins for a cluster's services, on 127.0.0.1, stopped by their process ids.

* :func:`start_s3` — an S3-compatible object store: moto's server (``moto[server]`` from PyPI),
  speaking the S3 protocol (and DynamoDB's, for Delta's S3 log store) over HTTP.

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


@dataclass
class S3Server:
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

    def stop(self) -> None:
        _stop(self.process)

    def __enter__(self) -> "S3Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


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
