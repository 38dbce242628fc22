# Databricks notebook source
# MAGIC %md
# MAGIC # crawlake 04 · click logs: rows, quarantine, CTR, vocabularies, DLRM features
# MAGIC
# MAGIC The Criteo click-log flow (`crawlake clicks ingest | stream | features`): the typed rows
# MAGIC (`bronze.clicks`) per file and day, the lines set aside and why (`bronze.clicks_quarantine`),
# MAGIC click-through rate per day, each categorical column's vocabulary (`silver.click_vocab`), the
# MAGIC DLRM inputs (`silver.click_features`) and the loader that feeds them to training.
# MAGIC
# MAGIC Widget: `lake_root`.

# COMMAND ----------

from pyspark.sql import functions as F

dbutils.widgets.text("lake_root", "./lake")
lake_root = dbutils.widgets.get("lake_root").rstrip("/")
CLICKS = ["bronze.clicks", "bronze.clicks_quarantine", "silver.click_vocab", "silver.click_features",
          "ops.clicks_ingest_log"]


def table_path(qualified_name):
    layer, name = qualified_name.split(".")
    return f"{lake_root}/{layer}/{name}"


def load(qualified_name):
    return spark.read.format("delta").load(table_path(qualified_name))


print(f"lake_root = {lake_root}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Files ingested
# MAGIC
# MAGIC Every line of a file is a row, a quarantined line or a header: `lines = rows + quarantined + header_lines`.

# COMMAND ----------

display(load("ops.clicks_ingest_log")
        .select("source_file", "lines", "rows", "quarantined", "header_lines", "run_id", "committed_at")
        .orderBy("source_file"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Click-through rate per day

# COMMAND ----------

clicks = load("bronze.clicks")
display(
    clicks.groupBy("day")
    .agg(F.count("*").alias("impressions"), F.sum("label").alias("clicks"), F.round(F.avg("label"), 4).alias("ctr"),
         F.countDistinct("source_file").alias("files"))
    .orderBy("day")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Missing values
# MAGIC
# MAGIC Share of empty values per integer feature (an empty field is null).

# COMMAND ----------

ints = [f"I{i}" for i in range(1, 14)]
missing = clicks.agg(*[F.round(F.avg(F.col(c).isNull().cast("double")), 4).alias(c) for c in ints])
display(missing)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Quarantine by reason

# COMMAND ----------

display(
    load("bronze.clicks_quarantine")
    .groupBy("reason")
    .agg(F.count("*").alias("lines"), F.first("detail", ignorenulls=True).alias("example_detail"),
         F.first("raw_line").substr(1, 80).alias("example_line"))
    .orderBy(F.col("lines").desc())
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Vocabularies
# MAGIC
# MAGIC Values seen at least `clicks.vocab_min_frequency` times get an id (>= 2); rarer ones map to 1
# MAGIC (out of vocabulary), empty ones to 0. Share of rows whose value has an id, per column:

# COMMAND ----------

vocab = load("silver.click_vocab")
sizes = vocab.groupBy("column").agg(F.count("*").alias("values"), F.sum("count").alias("rows_covered"))
total = clicks.count()
display(sizes.withColumn("coverage", F.round(F.col("rows_covered") / F.lit(total), 4))
        .orderBy(F.expr("int(substring(column, 2))")))

# COMMAND ----------

# MAGIC %md
# MAGIC ## DLRM features and their loader
# MAGIC
# MAGIC `dense` is `log(1 + max(I, 0))` (13 floats), `sparse` the 26 vocabulary ids. `ClickFeaturesDataset`
# MAGIC reads them without a JVM, one day range at a time (e.g. days 0-22 to train, day 23 to test).

# COMMAND ----------

features = load("silver.click_features")
display(features.select("row_key", "day", "label", F.slice("dense", 1, 4).alias("dense_first4"),
                        F.slice("sparse", 1, 6).alias("sparse_first6")).orderBy("row_key"))

# COMMAND ----------

from pipelines.loaders.clicks import ClickFeaturesDataset

days = [r.day for r in features.select("day").distinct().orderBy("day").collect()]
train = ClickFeaturesDataset(table_path("silver.click_features"), days=days[:-1] or days, batch_size=256, seed=0)
dense, sparse, label = next(iter(train))
display(spark.createDataFrame([(str(tuple(dense.shape)), str(tuple(sparse.shape)), str(tuple(label.shape)),
                                float(label.mean()))], "dense string, sparse string, label string, ctr double"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check
# MAGIC
# MAGIC Fails if a click table is empty or the line counts do not add up.

# COMMAND ----------

counts = {t: load(t).count() for t in CLICKS}
empty = [t for t in ("bronze.clicks", "silver.click_vocab", "silver.click_features", "ops.clicks_ingest_log")
         if counts[t] == 0]
if empty:
    raise AssertionError(f"empty click tables under {lake_root}: {', '.join(empty)}")
log = load("ops.clicks_ingest_log").agg(F.sum("rows"), F.sum("quarantined")).first()
if (log[0], log[1]) != (counts["bronze.clicks"], counts["bronze.clicks_quarantine"]):
    raise AssertionError(f"ingest log says {log[0]} rows, {log[1]} quarantined; the tables hold "
                         f"{counts['bronze.clicks']}, {counts['bronze.clicks_quarantine']}")
if counts["silver.click_features"] != counts["bronze.clicks"]:
    raise AssertionError("silver.click_features does not hold one row per bronze.clicks row")
print(f"click tables are consistent: {counts}")
