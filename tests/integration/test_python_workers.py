"""A local session's Python workers (pipelines.session.WORKER_SETTINGS): started by
pipelines.spark_daemon, they import pyspark from the installed package and hold no importer of
Spark's archives, so pyspark's per-task import-cache reset reads no archive; they talk to the JVM
over Unix domain sockets; tasks still run pyspark's worker."""

import subprocess
import sys
from pathlib import Path

import pyarrow as pa


def test_workers_import_the_installed_pyspark_and_no_spark_archive(spark):
    import pyspark

    def where(batches):   # nested: pickled by value
        import sys as wsys

        import pyspark as wpyspark
        spark_archive = [p for p in (*wsys.path, *wsys.path_importer_cache)
                         if any(n in p for n in ("pyspark.zip", "py4j-", "spark-core"))]
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"origin": [wpyspark.__file__] * batch.num_rows,
                                              "archives": [repr(spark_archive)] * batch.num_rows,
                                              "python": [wsys.executable] * batch.num_rows})

    rows = spark.range(4, numPartitions=4).mapInArrow(where, "origin string, archives string, python string").collect()
    assert len(rows) == 4
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.python.daemon.module") == "pipelines.spark_daemon"
    assert conf.get("spark.python.unix.domain.socket.enabled") == "true"
    assert {r.origin for r in rows} == {pyspark.__file__}
    assert {r.archives for r in rows} == {"[]"}
    assert {r.python for r in rows} == {sys.executable}


def test_a_job_that_reads_part_of_a_python_tasks_output_prints_no_traceback(tmp_path):
    """``limit``/``take`` over Python tasks' output: the JVM closes a worker's socket before the
    worker's last flush, and pyspark 4.1's daemon printed a BrokenPipeError traceback for each
    such worker in a run that succeeded. A session of its own, in a subprocess, so that its JVM's
    stderr (where the daemon writes) is this test's to read."""
    script = tmp_path / "partial.py"
    script.write_text(
        "from pipelines.config import load_config\n"
        "from pipelines.session import get_spark\n"
        "spark = get_spark(load_config('local', []).spark)\n"
        "def same(batches):\n"
        "    yield from batches\n"
        "df = spark.range(2_000_000, numPartitions=2).selectExpr('id', \"repeat('x', 200) AS s\")\n"
        "for _ in range(3):\n"
        "    print(df.mapInArrow(same, df.schema).limit(5).count(), df.mapInArrow(same, df.schema).take(1)[0][0])\n"
        "spark.stop()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == ["5 0"] * 3
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr[-3000:]
