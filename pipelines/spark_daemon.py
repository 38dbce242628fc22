"""The Python worker daemon crawlake's Spark sessions start (``spark.python.daemon.module``):
pyspark's own daemon, imported from the installed pyspark package instead of Spark's archives.

Why: Spark puts ``pyspark.zip``, ``py4j-*.zip`` and the ``spark-core`` jar at the front of every
Python worker's ``PYTHONPATH``, so workers import pyspark from the zip, and pyspark's worker calls
``importlib.invalidate_caches()`` before every task (``pyspark.worker_util.setup_spark_files``).
Since Python 3.10 that makes every ``zipimporter`` re-read its archive's central directory: one
importer per package directory inside ``pyspark.zip`` plus the spark-core jar, a fixed cost of a
core before each task, whatever the task does (measured in docs/benchmarks.md, "Spark's Python
workers"). A Spark job of many small Python tasks (a stage's incremental run, a test's small
table) spent most of its time there.

What it does: when the archives are the ones shipped inside the pyspark package that this
interpreter imports anyway (the pip-installed pyspark, ``<site-packages>/pyspark/python/lib`` and
``<site-packages>/pyspark/jars``), it drops them from ``sys.path`` and from the importer cache
before pyspark is imported, then runs :func:`pyspark.daemon.manager`. Workers fork from it and
inherit the path. With any other layout (a Spark distribution whose pyspark is not this
interpreter's, or no pyspark installed) the path is left as it is, which is pyspark's own
behaviour.

One more change (:func:`quiet_on_closed_socket`): a worker whose JVM side closed its socket before
the worker's last flush exits without a traceback. The JVM closes it when it stops reading a
task's output early (``limit``, ``take``, ``first``), and pyspark 4.1's daemon then printed a
``BrokenPipeError`` traceback in the console of a run that succeeded (``make run`` did). That
worker exits either way, as pyspark's ``killWorkerOnFlushFailure`` has it. Nothing else of the
daemon or the worker changes.
"""

from __future__ import annotations

import importlib.machinery
import os
import socket
import sys
from collections.abc import Callable


def spark_archives(path: list[str], package_dir: str) -> list[str]:
    """The entries of ``path`` that are Spark's archives (``pyspark.zip``, ``py4j-*.zip``, a
    ``spark-core*.jar``) shipped inside the pyspark package at ``package_dir``."""
    package_dir = os.path.realpath(package_dir)
    out = []
    for entry in path:
        name = os.path.basename(entry)
        if name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith(".zip")) \
                or (name.startswith("spark-core") and name.endswith(".jar")):
            if os.path.realpath(entry).startswith(package_dir + os.sep):
                out.append(entry)
    return out


def installed_pyspark(path: list[str]) -> str | None:
    """The directory of the pyspark package that ``path`` without zip or jar entries imports, or
    None when there is none."""
    plain = [p for p in path if not p.endswith((".zip", ".jar"))]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", plain)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def drop_spark_archives() -> list[str]:
    """Remove Spark's archives from ``sys.path`` and ``sys.path_importer_cache`` when the installed
    pyspark ships them (see the module docstring); returns the removed entries."""
    package_dir = installed_pyspark(sys.path)
    if package_dir is None:
        return []
    removed = spark_archives(sys.path, package_dir)
    sys.path[:] = [p for p in sys.path if p not in removed]
    for entry in removed:
        sys.path_importer_cache.pop(entry, None)
    return removed


def quiet_on_closed_socket(worker: Callable[[socket.socket, bool], int]) -> Callable[[socket.socket, bool], int]:
    """pyspark's ``daemon.worker(sock, authenticated) -> exit code``, returning 1 instead of
    raising when the JVM has closed ``sock`` (BrokenPipeError, ConnectionResetError). The forked
    worker then exits, as it does when it raises, but prints no traceback. Nothing is lost: the
    JVM has stopped reading this worker, so nothing more it writes could reach the JVM. Other
    exceptions propagate as before."""
    def run(sock: socket.socket, authenticated: bool) -> int:
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1
    return run


if __name__ == "__main__":
    drop_spark_archives()
    from pyspark import daemon

    daemon.worker = quiet_on_closed_socket(daemon.worker)   # manager() looks it up in its module
    daemon.manager()
