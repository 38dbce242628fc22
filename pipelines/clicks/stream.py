"""clicks stream: a Structured Streaming query from a landing folder into ``bronze.clicks``, exactly once.

The query's source is Spark's file source in ``binaryFile`` format with its explicit schema (path,
modificationTime, length, content) and ``maxFilesPerTrigger``; only the file list is read from it
(the ``content`` column is pruned, so no file passes through the JVM whole). The source's
checkpoint (``clicks.checkpoint``, default ``<lake root>/_checkpoints/clicks_stream``, one per
query) records which files each micro-batch holds. ``foreachBatch`` hands them to
:func:`pipelines.clicks.ingest.ingest_files`, the batch ingest's code: each file parsed by one task
with line numbers, audited, published with ``replaceWhere`` on its ``source_file`` and Delta's
``txnAppId`` = query id / ``txnVersion`` = batch id. After a crash Spark replays the unfinished
micro-batch with the same files and batch id: writes it had committed are skipped (same app id and
version), the others redone, so each line lands once in ``bronze.clicks`` or
``bronze.clicks_quarantine``.

Why not ``spark.readStream.text``: it splits files by byte range and drops line positions, so a
row could not get a stable key from (file, line).

Files must land whole: write them under a hidden name (``.name`` or ``_name``, which the source
ignores) and rename. On SIGINT/SIGTERM the query gets ``clicks.stop_timeout_s`` to finish the
running micro-batch, then stops; the process exits 0.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType, TimestampType

from pipelines import ledger
from pipelines.clicks.ingest import LogFile, ingest_files, mtime_seconds
from pipelines.config import Config
from pipelines.kernels.clicks import normalize_source
from pipelines.stage import StageContext
from pipelines.lake import Lake

STAGE = "clicks_stream"
QUERY_NAME = "crawlake_clicks_stream"
#: Spark's binaryFile schema, given explicitly (a streaming file source needs one).
BINARY_FILE_SCHEMA = StructType([
    StructField("path", StringType(), False),
    StructField("modificationTime", TimestampType(), False),
    StructField("length", LongType(), False),
    StructField("content", BinaryType(), True),
])


def checkpoint_location(cfg: Config, lake: Lake) -> str:
    return cfg.clicks.checkpoint or f"{lake.root.rstrip('/')}/_checkpoints/clicks_stream"


def _say(message: str) -> None:
    print(f"clicks stream: {message}", file=sys.stderr, flush=True)


class _BatchWriter:
    """The foreachBatch function: one ingest of the micro-batch's files, one ops.runs row."""

    def __init__(self, spark: SparkSession, cfg: Config, lake: Lake):
        self.spark, self.cfg, self.lake = spark, cfg, lake
        self.query_id: str | None = None
        self.ready = threading.Event()   # set once start() returned the query id
        self.batches = 0

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.ready.wait()
        # PySpark returns timestamps as naive local datetimes: .timestamp() reads them back as such.
        files = [LogFile(normalize_source(r.path), int(r.length), mtime_seconds(r.modificationTime.timestamp()))
                 for r in batch.select("path", "length", "modificationTime").collect()]
        files.sort(key=lambda f: f.path)
        _say(f"batch {batch_id} started: {len(files)} files")
        ctx = StageContext(self.spark, self.cfg, self.lake, ledger.new_run_id())
        self.lake.lineage = ledger.commit_lineage(ctx.run_id, STAGE, self.cfg, {})   # the batch's commits say so
        started, t0 = datetime.now(timezone.utc), time.perf_counter()
        try:
            result = ingest_files(ctx, files, stage=STAGE, txn=(self.query_id, batch_id),
                                  log_run_id=f"stream:{self.query_id}:{batch_id}")
        except Exception as exc:
            ledger.record(ctx, ledger.StageRun(STAGE, started, time.perf_counter() - t0, "failed",
                                               error=str(exc)[:2000]))
            _say(f"batch {batch_id} failed: {type(exc).__name__}: {exc}")
            raise
        result.notes.update(query_id=self.query_id, batch_id=batch_id)
        ledger.record(ctx, ledger.StageRun(STAGE, started, time.perf_counter() - t0, "succeeded", result))
        self.batches += 1
        _say(f"batch {batch_id} done: {len(files)} files, {result.rows_out} rows, "
             f"{result.rows_quarantined} quarantined, {time.perf_counter() - t0:.1f}s")


def start(spark: SparkSession, cfg: Config, landing: str, *, available_now: bool,
          processing_time: str | None = None) -> tuple[StreamingQuery, _BatchWriter]:
    """Start the query on ``landing``; returns it and its batch writer (for the batch count)."""
    lake = Lake(spark, cfg.lake)
    clicks = cfg.clicks
    source = (spark.readStream.format("binaryFile").schema(BINARY_FILE_SCHEMA)
              .option("maxFilesPerTrigger", clicks.max_files_per_trigger)
              .option("pathGlobFilter", clicks.path_glob)
              .load(landing))
    writer = _BatchWriter(spark, cfg, lake)
    stream = (source.writeStream.queryName(QUERY_NAME).foreachBatch(writer)
              .option("checkpointLocation", checkpoint_location(cfg, lake)))
    if available_now:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=processing_time or clicks.processing_time)
    query = stream.start()
    writer.query_id = str(query.id)   # stable across restarts: it lives in the checkpoint
    writer.ready.set()
    return query, writer


def _stop_gracefully(query: StreamingQuery, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


def run(spark: SparkSession, cfg: Config, landing: str, *, available_now: bool,
        processing_time: str | None = None) -> int:
    """Run the query until it ends (``available_now``: when the landed files are done) or until
    SIGINT/SIGTERM. Returns the number of micro-batches this process committed.

    Raises the query's error (``StreamingQueryException``) when a micro-batch fails.
    """
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: stop.set())
    try:
        query, writer = start(spark, cfg, landing, available_now=available_now, processing_time=processing_time)
        _say(f"query {query.id} started on {landing} "
             f"({'available-now' if available_now else processing_time or cfg.clicks.processing_time})")
        while query.isActive:
            if stop.is_set():
                _say("stop requested: finishing the running micro-batch")
                _stop_gracefully(query, cfg.clicks.stop_timeout_s)
                break
            query.awaitTermination(0.5)   # raises if the query failed
        error = query.exception()
        if error is not None:
            raise error
        _say(f"query {query.id} stopped; {writer.batches} micro-batch(es) committed")
        return writer.batches
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
