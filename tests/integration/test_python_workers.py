"""A local session's Python workers (pipelines.session.WORKER_SETTINGS): started by
pipelines.spark_daemon, they import pyspark from the installed package and hold no importer of
Spark's archives, so pyspark's per-task import-cache reset reads no archive; they talk to the JVM
over Unix domain sockets; tasks still run pyspark's worker."""

import sys

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
