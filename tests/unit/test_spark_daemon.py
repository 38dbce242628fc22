"""pipelines.spark_daemon: Python workers import pyspark from the installed package, so that
pyspark's per-task ``importlib.invalidate_caches()`` re-reads no zip archive (no JVM here; the
integration test ``test_python_workers`` checks a session's real workers)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from pipelines.spark_daemon import installed_pyspark, quiet_on_closed_socket, spark_archives

PACKAGE = Path(pyspark.__file__).parent
LIB = PACKAGE / "python" / "lib"
ZIP = str(LIB / "pyspark.zip")
PY4J = str(next(LIB.glob("py4j-*.zip")))
CORE = str(next((PACKAGE / "jars").glob("spark-core*.jar")))


def test_only_the_archives_shipped_inside_the_package_are_spark_archives(tmp_path):
    copy = tmp_path / "pyspark.zip"
    shutil.copy(ZIP, copy)
    path = [ZIP, PY4J, CORE, str(copy), str(PACKAGE.parent), str(tmp_path / "other.zip")]
    assert spark_archives(path, str(PACKAGE)) == [ZIP, PY4J, CORE]


def test_the_installed_package_is_found_without_archives():
    assert Path(installed_pyspark([ZIP, *sys.path])) == PACKAGE
    assert installed_pyspark([ZIP, PY4J]) is None


def _worker_view(pythonpath: str) -> list[str]:
    """What a worker forked by the daemon sees: pyspark's origin and the Spark archives on its
    path and in its importer cache, after :func:`drop_spark_archives`, in a fresh interpreter
    started as Spark starts it (the archives first on ``PYTHONPATH``)."""
    code = ("import sys; from pipelines.spark_daemon import drop_spark_archives; drop_spark_archives(); "
            "import pyspark; print(pyspark.__file__); "
            "spark = lambda p: any(n in p for n in ('pyspark.zip', 'py4j-', 'spark-core')); "
            "print([p for p in sys.path if spark(p)]); print([p for p in sys.path_importer_cache if spark(p)])")
    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_a_worker_imports_the_installed_pyspark_and_keeps_no_archive_importer():
    origin, path, cached = _worker_view(os.pathsep.join([ZIP, PY4J, CORE]))
    assert Path(origin).parent == PACKAGE
    assert path == "[]" and cached == "[]"


def test_archives_of_another_spark_stay_on_the_path(tmp_path):
    """A Spark distribution whose pyspark is not this interpreter's keeps pyspark's own layout."""
    foreign = tmp_path / "spark" / "python" / "lib" / "pyspark.zip"
    foreign.parent.mkdir(parents=True)
    shutil.copy(ZIP, foreign)
    origin, path, _ = _worker_view(str(foreign))
    assert path == repr([str(foreign)])
    assert origin.startswith(str(foreign))   # PYTHONPATH precedes site-packages, as in Spark's workers


def test_a_worker_whose_socket_the_jvm_closed_exits_without_a_traceback():
    def closed(sock, authenticated):
        raise BrokenPipeError(32, "Broken pipe")

    def reset(sock, authenticated):
        raise ConnectionResetError(104, "Connection reset by peer")

    def failing(sock, authenticated):
        raise ValueError("a bug in the worker")

    assert quiet_on_closed_socket(closed)(None, True) == 1
    assert quiet_on_closed_socket(reset)(None, True) == 1
    assert quiet_on_closed_socket(lambda sock, authenticated: 0)(None, True) == 0
    with pytest.raises(ValueError, match="a bug"):
        quiet_on_closed_socket(failing)(None, True)
