# Databricks notebook source
# MAGIC %md
# MAGIC # crawlake: explore the lake
# MAGIC
# MAGIC Inspects every Delta table the pipeline writes (`<lake_root>/<layer>/<name>`): row counts, the run
# MAGIC ledger, quarantine reasons, duplicate clusters, filter pass rates, languages, token sequences,
# MAGIC embeddings and the Delta history of `bronze.documents`.
# MAGIC
# MAGIC Set the `lake_root` widget to the lake (e.g. `/Volumes/main/crawlake/lake` on Databricks, `./lake`
# MAGIC locally). The last cell fails if any table is empty, so "Run all" is a check of the lake.

# COMMAND ----------

from pyspark.sql import Window
from pyspark.sql import functions as F

dbutils.widgets.text("lake_root", "./lake")
lake_root = dbutils.widgets.get("lake_root").rstrip("/")

STAGES = ["ingest", "dedup", "filter", "tokenize", "embed", "index"]
TABLES = [
    "bronze.documents",
    "bronze.quarantine",
    "silver.documents_dedup",
    "silver.duplicate_clusters",
    "silver.dedup_index",
    "silver.documents_clean",
    "silver.filter_decisions",
    "gold.token_sequences",
    "gold.document_tokens",
    "gold.embeddings",
    "gold.index_manifest",
    "ops.runs",
    "ops.quality",
    "ops.ingest_log",
]


def table_path(qualified_name):
    layer, name = qualified_name.split(".")
    return f"{lake_root}/{layer}/{name}"


def load(qualified_name):
    return spark.read.format("delta").load(table_path(qualified_name))


print(f"lake_root = {lake_root}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Row counts

# COMMAND ----------

row_counts = {t: load(t).count() for t in TABLES}
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
# MAGIC The last three runs of each stage from `ops.runs`, in pipeline order.

# COMMAND ----------

runs = load("ops.runs")
stage_order = F.array_position(F.array(*[F.lit(s) for s in STAGES]), F.col("stage"))
latest_first = Window.partitionBy("stage").orderBy(F.col("started_at").desc())
last_runs = (
    runs.withColumn("n", F.row_number().over(latest_first))
    .where(F.col("n") <= 3)
    .withColumn("stage_order", stage_order)
    .orderBy("stage_order", F.col("started_at").desc())
    .select("run_id", "stage", "started_at", F.round("duration_s", 1).alias("duration_s"),
            "rows_in", "rows_out", "rows_quarantined", "status")
)
display(last_runs)

# COMMAND ----------

display(
    runs.groupBy("stage")
    .agg(
        F.count("*").alias("runs"),
        F.sum(F.when(F.col("status") == "succeeded", 1).otherwise(0)).alias("succeeded"),
        F.max("started_at").alias("last_started_at"),
        F.round(F.avg("duration_s"), 1).alias("avg_duration_s"),
    )
    .withColumn("stage_order", stage_order)
    .orderBy("stage_order")
    .drop("stage_order")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Quarantine reasons

# COMMAND ----------

display(
    load("bronze.quarantine")
    .groupBy("reason")
    .agg(F.count("*").alias("records"), F.countDistinct("source_file").alias("source_files"),
         F.first("detail", ignorenulls=True).alias("example_detail"))
    .orderBy(F.col("records").desc())
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Duplicate clusters
# MAGIC
# MAGIC Cluster sizes per method (`exact`, `near`): how many clusters have 2, 3, ... members, and how many
# MAGIC documents were dropped.

# COMMAND ----------

clusters = load("silver.duplicate_clusters")
cluster_sizes = clusters.groupBy("method", "cluster_id").agg(
    F.count("*").alias("size"), F.sum(F.col("kept").cast("int")).alias("kept")
)
display(
    cluster_sizes.groupBy("method", "size")
    .agg(F.count("*").alias("clusters"), F.sum("kept").alias("kept_docs"))
    .orderBy("method", "size")
)

# COMMAND ----------

display(
    clusters.groupBy("method")
    .agg(
        F.countDistinct("cluster_id").alias("clusters"),
        F.count("*").alias("documents"),
        F.sum(F.col("kept").cast("int")).alias("kept"),
        F.sum((~F.col("kept")).cast("int")).alias("dropped"),
        F.max("cluster_size").alias("largest_cluster"),
    )
    .orderBy("method")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Filter decisions
# MAGIC
# MAGIC Pass rate of each filter over the documents it ran on.

# COMMAND ----------

display(
    load("silver.filter_decisions")
    .groupBy("filter")
    .agg(
        F.count("*").alias("documents"),
        F.sum(F.col("passed").cast("int")).alias("passed"),
        F.round(F.avg(F.col("passed").cast("double")), 4).alias("pass_rate"),
        F.first("threshold", ignorenulls=True).alias("threshold"),
        F.round(F.avg("value"), 4).alias("avg_value"),
    )
    .orderBy("pass_rate")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Languages of the clean documents

# COMMAND ----------

clean = load("silver.documents_clean")
display(
    clean.groupBy("language")
    .agg(
        F.count("*").alias("documents"),
        F.round(F.avg("language_score"), 4).alias("avg_score"),
        F.round(F.min("language_score"), 4).alias("min_score"),
        F.sum("text_length").alias("characters"),
    )
    .orderBy(F.col("documents").desc())
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Token sequences
# MAGIC
# MAGIC Sequence length (`size(input_ids)`), fill (`num_tokens` over length) and documents per sequence.

# COMMAND ----------

seqs = load("gold.token_sequences")
display(
    seqs.agg(
        F.count("*").alias("sequences"),
        F.collect_set(F.size("input_ids")).alias("sequence_lengths"),
        F.sum("num_tokens").alias("tokens"),
        F.min("num_tokens").alias("min_tokens"),
        F.max("num_tokens").alias("max_tokens"),
        F.round(F.avg(F.col("num_tokens") / F.size("input_ids")), 4).alias("avg_fill"),
        F.round(F.avg(F.size("doc_boundaries")), 2).alias("avg_docs_per_sequence"),
    )
)

# COMMAND ----------

display(seqs.select("seq_id", "num_tokens", "doc_boundaries", F.slice("input_ids", 1, 16).alias("first_ids")).orderBy("seq_id"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Embeddings
# MAGIC
# MAGIC Count and dimension per model; vectors are L2-normalized, so the mean norm should be 1.

# COMMAND ----------

embeddings = load("gold.embeddings")
norm = F.sqrt(F.aggregate("vector", F.lit(0.0), lambda acc, x: acc + x.cast("double") * x.cast("double")))
display(
    embeddings.groupBy("model", "model_revision")
    .agg(
        F.count("*").alias("vectors"),
        F.countDistinct("doc_id").alias("documents"),
        F.collect_set(F.size("vector")).alias("dimensions"),
        F.round(F.avg(norm), 4).alias("avg_norm"),
    )
    .orderBy("model", "model_revision")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Vector index
# MAGIC
# MAGIC One row per FAISS shard: its type, rows and the embeddings version it was built from.

# COMMAND ----------

display(load("gold.index_manifest").orderBy("model", "model_revision", "shard"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Delta history of `bronze.documents`

# COMMAND ----------

history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path('bronze.documents')}`")
display(history.select("version", "timestamp", "operation", "operationParameters", "operationMetrics").orderBy(F.col("version").desc()))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check
# MAGIC
# MAGIC Fails if any table is empty.

# COMMAND ----------

empty = [t for t in TABLES if row_counts[t] == 0]
if empty:
    raise AssertionError(f"empty tables under {lake_root}: {', '.join(empty)}")
print(f"all {len(TABLES)} tables are non-empty")
