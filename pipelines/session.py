"""SparkSession factory.

Three situations, one function:

* an active session exists (Databricks notebooks and jobs, pytest's fixture): it is returned as it is;
* the driver was launched by ``spark-submit`` (or on Databricks): the submitted configuration wins;
  crawlake only fills in settings that were not given (Delta extension and catalog, Delta's jars
  from the local jar folder, the workers' Python);
* a plain Python process: a local session is built from :class:`~pipelines.config.SparkConfig`,
  with :data:`WORKER_SETTINGS` for its Python workers.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pyspark import SparkConf, StorageLevel
from pyspark.sql import DataFrame, SparkSession

from pipelines.config import LakeConfig, SparkConfig

DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
#: How Spark talks to its Python workers. The daemon: workers import pyspark from its installed
#: package, not from Spark's zips, so the per-task import-cache reset costs nothing
#: (:mod:`pipelines.spark_daemon`). Unix domain sockets instead of TCP on 127.0.0.1: each task's
#: small messages otherwise wait for TCP's delayed acknowledgements, tens of milliseconds a task.
WORKER_SETTINGS = {"spark.python.daemon.module": "pipelines.spark_daemon",
                   "spark.python.unix.domain.socket.enabled": "true"}
_REPO_ROOT = Path(__file__).resolve().parent.parent


def _launched_externally() -> bool:
    # spark-submit starts the JVM first and hands Python the gateway; Databricks sets its runtime.
    return "PYSPARK_GATEWAY_PORT" in os.environ or "DATABRICKS_RUNTIME_VERSION" in os.environ


def delta_jars(jars_dir: str | None) -> list[str]:
    """Absolute paths of the jars in ``jars_dir`` (relative paths resolve against the repo root)."""
    if not jars_dir:
        return []
    folder = Path(jars_dir)
    if not folder.is_absolute():
        folder = _REPO_ROOT / folder
    return sorted(glob.glob(str(folder / "*.jar")))


def _require_delta(spark: SparkSession) -> None:
    """The driver's classpath is fixed when spark-submit starts it: Delta must come from there."""
    from py4j.java_gateway import JavaClass

    if not isinstance(spark._jvm.io.delta.tables.DeltaTable, JavaClass):
        raise RuntimeError(
            "Delta Lake is not on the Spark driver's classpath: run spark-submit with "
            "--jars \"$(ls .jars/*.jar | paste -sd,)\" (after `make setup`) or "
            "--packages io.delta:delta-spark_2.13:4.1.0"
        )


def catalog_settings(lake: LakeConfig) -> dict[str, str]:
    """Spark settings for ``lake.mode: catalog`` outside Databricks: Spark's session catalog backed
    by its bundled Hive metastore on Derby, kept under the lake root (``_metastore``, tables in
    ``_warehouse``), so that a later run finds the tables an earlier one created."""
    root = Path(lake.root).resolve()
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(root / "_warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={root / '_metastore' / 'metastore_db'};create=true",
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={root / '_metastore'}",
    }


#: The Delta log store per ``lake.s3_commits`` (for s3:// and s3a:// paths).
S3_LOG_STORES = {
    "conditional_put": "io.crawlake.delta.S3ConditionalPutLogStore",   # scripts/s3-logstore
    "single_driver": "io.delta.storage.S3SingleDriverLogStore",
}


def object_store_settings(lake: LakeConfig | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """Spark settings for lakes and crawls on S3, from the standard AWS environment variables:
    ``s3://`` read and written like ``s3a://`` (Hadoop's S3A), the endpoint of an S3-compatible
    server (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, path-style), the region, and the
    Delta log store ``lake.s3_commits`` names (:data:`S3_LOG_STORES`). No credential is ever put in
    Spark's configuration: S3A reads them from the environment (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), a profile or an instance role, in every process."""
    env = os.environ if env is None else env
    out = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        out["spark.hadoop.fs.s3a.endpoint"] = endpoint
        out["spark.hadoop.fs.s3a.path.style.access"] = "true"
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = region
    store = S3_LOG_STORES[lake.s3_commits if lake is not None else "conditional_put"]
    for scheme in ("s3", "s3a"):
        out[f"spark.delta.logStore.{scheme}.impl"] = store
    return out


def class_path(jars: list[str]) -> dict[str, str]:
    """The jars on the driver's and the executors' class path (``spark.*.extraClassPath``).
    Not ``spark.jars``: that ships every jar to every executor (the AWS SDK bundle alone is
    640 MB) and loads them in a child class loader, where the log store's Delta base class
    would not be seen from the system one."""
    path = os.pathsep.join(jars)
    return {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}


def get_spark(cfg: SparkConfig, lake: LakeConfig | None = None) -> SparkSession:
    """Return the active SparkSession, or build one with Delta configured, S3 reachable
    (:func:`object_store_settings`), log level WARN, and, for a local catalog-mode ``lake``,
    :func:`catalog_settings` unless the configuration names a catalog; what spark-submit or the
    user set wins over each of these.

    Raises ``RuntimeError`` when a local session is to be built but Delta's jars are missing
    (run ``make setup``).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active

    wanted: dict[str, str] = {**DELTA_SETTINGS, **object_store_settings(lake)}
    # crawlake's own lines (progress, summary, errors) stay readable: WARN unless the user sets a level
    wanted["spark.log.level"] = "WARN"
    if lake is not None and lake.mode == "catalog" and "://" not in lake.root \
            and "spark.sql.catalogImplementation" not in cfg.conf and not _launched_externally():
        wanted.update(catalog_settings(lake))
    wanted.update(cfg.conf)
    jars = delta_jars(cfg.jars_dir)
    if jars:
        wanted.update(class_path(jars))
    # Workers must run the driver's interpreter (the virtualenv), not whatever python3 is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(cfg.app_name)
    if _launched_externally():
        submitted = SparkConf()  # loads what spark-submit / the cluster set
        for key, value in wanted.items():
            if key.endswith("extraClassPath"):
                continue  # fixed when spark-submit started the driver: Delta came on its command line
            if not submitted.contains(key):
                builder = builder.config(key, value)
        spark = _quiet(builder.getOrCreate())
        if "PYSPARK_GATEWAY_PORT" in os.environ:
            _require_delta(spark)
        return spark

    if not jars:
        raise RuntimeError(
            f"Delta jars not found in {cfg.jars_dir!r}: run `make setup` (it resolves them from Maven Central once)"
        )
    # a local session's workers run this interpreter, which imports crawlake's daemon module
    # (crawlake-submit sets these for clusters; a plain spark-submit's executors may lack crawlake)
    wanted = {**WORKER_SETTINGS, **wanted}
    if cfg.master:
        builder = builder.master(cfg.master)
    for key, value in wanted.items():
        builder = builder.config(key, value)
    return _quiet(builder.getOrCreate())


#: Loggers that warn, at every lost commit race on S3, about the conditional PUT they were told
#: to make (the log store turns it into Delta's retry): kept to errors.
_QUIET_LOGGERS = ("org.apache.hadoop.fs.s3a.S3ABlockOutputStream", "org.apache.hadoop.fs.s3a.S3AInstrumentation")


def _quiet(spark: SparkSession) -> SparkSession:
    levels = spark._jvm.org.apache.logging.log4j.core.config.Configurator
    for name in _QUIET_LOGGERS:
        levels.setLevel(name, spark._jvm.org.apache.logging.log4j.Level.ERROR)
    return spark


def local_checkpoint(df: DataFrame) -> DataFrame:
    """``df`` computed now and kept on the executors with its lineage cut
    (``DataFrame.localCheckpoint``), so that later jobs neither recompute it nor see tables this
    run writes in between. On a cluster each block is kept on two executors
    (``MEMORY_AND_DISK_2``): a local checkpoint's blocks cannot be recomputed, so with one copy
    the loss of the executor holding it fails every later job that reads it
    (``CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND``); with two, Spark reads the other copy and re-runs
    only the lost tasks. A local session has one executor: one copy (``MEMORY_AND_DISK``)."""
    return df.localCheckpoint(eager=True, storageLevel=_checkpoint_level(df))


def counted_checkpoint(df: DataFrame, where: str | None = None) -> tuple[DataFrame, int]:
    """:func:`local_checkpoint` of ``df`` and its number of rows (those matching the SQL
    condition ``where``, when given), from one Spark job: the count that computes every
    partition materializes the checkpoint, which is marked lazily (Spark stores an RDD marked
    for checkpointing as the first job that computes it runs). The rows are counted by the RDD
    of the plan, whose tasks each count theirs: ``DataFrame.count`` would add a second job (its
    partial counts are shuffled to one final task), a job with its own launch cost for a few
    numbers."""
    checkpoint = df.localCheckpoint(eager=False, storageLevel=_checkpoint_level(df))
    counted = checkpoint if where is None else checkpoint.filter(where)
    return checkpoint, counted._jdf.queryExecution().toRdd().count()


def _checkpoint_level(df: DataFrame) -> StorageLevel:
    local = df.sparkSession.sparkContext.master.startswith("local")
    return StorageLevel.MEMORY_AND_DISK if local else StorageLevel.MEMORY_AND_DISK_2


def task_count(rows: int, min_rows: int, most: int) -> int:
    """Tasks for ``rows`` input rows (an upper bound will do): ``most`` (the cores, say), fewer so
    that each task gets ``min_rows`` at least, where a task's fixed cost (a Python worker, a model
    to load, files to stage) is worth that many rows' work; 1 at least."""
    return max(1, min(most, -(-rows // min_rows)))


#: Bytes of one doc_id as Spark holds it (32 hex digits and the row's overhead), rounded up: sizes a broadcast.
DOC_ID_BYTES = 64


def broadcast_if_fits(spark: SparkSession, size_bytes: int) -> Callable[[DataFrame], DataFrame]:
    """A join hint for the small side of a join whose size the caller knows and Spark does not:
    ``pyspark.sql.functions.broadcast`` when ``size_bytes`` (an estimate, bytes) is within
    ``spark.sql.autoBroadcastJoinThreshold`` (what Spark itself would broadcast; -1 turns
    broadcasts off), else the identity. Spark sizes a checkpoint or a join's output by its
    estimates before it runs, so a few thousand keys derived from a large table look large to it,
    and it shuffles the other, truly large side to meet them; broadcast, that side is read where
    it lies."""
    from pyspark.sql import functions as F

    value = spark.conf.get("spark.sql.autoBroadcastJoinThreshold").strip()
    if value.startswith("-"):   # broadcasts off (Spark's own parser takes the sign off first, too)
        return lambda df: df
    limit = spark._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(value)
    return F.broadcast if 0 <= size_bytes <= limit else (lambda df: df)
