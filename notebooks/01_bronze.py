# Databricks notebook source
# MAGIC %md
# MAGIC # crawlake 01 · bronze: what was ingested
# MAGIC
# MAGIC The raw layer: every table's row count, the run ledger, the files ingest committed
# MAGIC (`ops.ingest_log`), the documents it made (`bronze.documents`), what it set aside and why
# MAGIC (`bronze.quarantine`), one record's raw HTTP payload next to the text extracted from it, and the
# MAGIC Delta history of `bronze.documents`.
# MAGIC
# MAGIC Set the `lake_root` widget to the lake (`./lake` locally, a `/Volumes/...` path on Databricks).
# MAGIC The last cell fails if a bronze table is empty, so "Run all" is a check of the layer.
# MAGIC Next: `02_silver` (dedup and filter), `03_gold` (training data), `04_clicks` (click logs).

# COMMAND ----------

from pyspark.sql import functions as F

dbutils.widgets.text("lake_root", "./lake")
lake_root = dbutils.widgets.get("lake_root").rstrip("/")

STAGES = ["ingest", "dedup", "filter", "tokenize", "embed", "index"]
TABLES = [
    "bronze.documents", "bronze.quarantine", "silver.documents_dedup", "silver.duplicate_clusters",
    "silver.dedup_index", "silver.documents_clean", "silver.filter_decisions", "gold.token_sequences",
    "gold.document_tokens", "gold.embeddings", "gold.index_manifest", "ops.runs", "ops.quality", "ops.ingest_log",
]
BRONZE = ["bronze.documents", "bronze.quarantine", "ops.ingest_log"]


def table_path(qualified_name):
    layer, name = qualified_name.split(".")
    return f"{lake_root}/{layer}/{name}"


def exists(qualified_name):
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, table_path(qualified_name))


def load(qualified_name):
    return spark.read.format("delta").load(table_path(qualified_name))


print(f"lake_root = {lake_root}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Row counts
# MAGIC
# MAGIC Every table of the document pipeline; a table a stage has not written yet counts as missing.

# COMMAND ----------

row_counts = {t: (load(t).count() if exists(t) else None) for t in TABLES}
display(
    spark.createDataFrame(
        [(t, t.split(".")[0], row_counts[t], table_path(t)) for t in TABLES],
        "table string, layer string, rows long, path string",
    )
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Run ledger
# MAGIC
# MAGIC The last three runs of each stage (`ops.runs`), in pipeline order, with rows per second.

# COMMAND ----------

from pyspark.sql import Window

runs = load("ops.runs")
stage_order = F.array_position(F.array(*[F.lit(s) for s in STAGES]), F.col("stage"))
latest_first = Window.partitionBy("stage").orderBy(F.col("started_at").desc())
display(
    runs.withColumn("n", F.row_number().over(latest_first))
    .where(F.col("n") <= 3)
    .withColumn("stage_order", stage_order)
    .orderBy("stage_order", F.col("started_at").desc())
    .select("run_id", "stage", "started_at", F.round("duration_s", 1).alias("duration_s"), "rows_in", "rows_out",
            "rows_quarantined", F.round(F.col("rows_in") / F.col("duration_s"), 1).alias("rows_per_s"), "status")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Files ingest committed
# MAGIC
# MAGIC One row per source file (`ops.ingest_log`): every record read is counted once, as a document,
# MAGIC a skipped record (requests, metadata, DNS) or a quarantined one.

# COMMAND ----------

display(
    load("ops.ingest_log")
    .select("source_file", "size_bytes", "records", "documents", "skipped", "quarantined", "duplicates", "run_id",
            "committed_at")
    .orderBy("source_file")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## What the documents are
# MAGIC
# MAGIC Per crawl and HTTP status: documents, hosts, characters of extracted text, and how the content
# MAGIC type was known (declared by the server, or sniffed from the payload's first bytes).

# COMMAND ----------

documents = load("bronze.documents")
display(
    documents.groupBy("crawl_id", "http_status", "content_type_source")
    .agg(F.count("*").alias("documents"), F.countDistinct("host").alias("hosts"),
         F.sum("text_length").alias("characters"), F.round(F.avg("text_length"), 0).alias("avg_characters"))
    .orderBy(F.col("documents").desc())
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Quarantine reasons
# MAGIC
# MAGIC Records that could not become documents, with an example of each reason.

# COMMAND ----------

display(
    load("bronze.quarantine")
    .groupBy("reason")
    .agg(F.count("*").alias("records"), F.countDistinct("source_file").alias("source_files"),
         F.first("detail", ignorenulls=True).alias("example_detail"), F.first("url", ignorenulls=True).alias("example_url"))
    .orderBy(F.col("records").desc())
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## One record: raw payload vs extracted text
# MAGIC
# MAGIC The longest document, read again from its WARC file at its recorded byte offset: the first
# MAGIC bytes of the HTTP payload as crawled, then the first characters of the text ingest extracted.

# COMMAND ----------

import fsspec
from fastwarc.warc import ArchiveIterator

record = documents.orderBy(F.col("text_length").desc(), "doc_id").select(
    "doc_id", "url", "source_file", "record_offset", "extraction", "text").first()
with fsspec.open(record.source_file, "rb") as f:
    f.seek(record.record_offset)
    warc_record = next(iter(ArchiveIterator(f, parse_http=True)))
    raw = warc_record.reader.read()
    record_id = warc_record.headers.get("WARC-Record-ID")
print(f"{record.doc_id}  {record.url}\n{record.source_file} @ {record.record_offset}  ({record_id})\n")
print(f"--- raw payload ({len(raw):,} bytes) ---")
print(raw[:600].decode("utf-8", "replace"))
print(f"\n--- extracted by {record.extraction} ({len(record.text):,} characters) ---")
print(record.text[:600])
raw_vs_text = spark.createDataFrame(
    [(record.doc_id, record.url, len(raw), len(record.text), round(len(record.text) / max(len(raw), 1), 3))],
    "doc_id string, url string, payload_bytes long, text_characters long, text_share double")
display(raw_vs_text)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Delta history of `bronze.documents`

# COMMAND ----------

history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path('bronze.documents')}`")
display(history.select("version", "timestamp", "operation", "operationParameters", "operationMetrics")
        .orderBy(F.col("version").desc()))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check
# MAGIC
# MAGIC Fails if a bronze table is missing or empty, or the record read back is not the one ingested.

# COMMAND ----------

empty = [t for t in BRONZE if not row_counts.get(t)]
if empty:
    raise AssertionError(f"empty or missing bronze tables under {lake_root}: {', '.join(empty)}")
if not raw:
    raise AssertionError(f"no payload at {record.source_file} offset {record.record_offset}")
print(f"bronze is complete: {', '.join(f'{t}={row_counts[t]}' for t in BRONZE)}")
