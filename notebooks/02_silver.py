# Databricks notebook source
# MAGIC %md
# MAGIC # crawlake 02 · silver: dedup and filter decisions
# MAGIC
# MAGIC Why documents left between bronze and the clean corpus: duplicate clusters (`silver.duplicate_clusters`:
# MAGIC which cluster, which document was kept, the estimated Jaccard similarity to it), the filter's
# MAGIC decisions (`silver.filter_decisions`: one row per document and rule, with the measured value,
# MAGIC the threshold and the verdict), and **re-thresholding a rule with SQL on the decisions**: which
# MAGIC documents a different threshold would keep, without running the filter again.
# MAGIC
# MAGIC Widgets: `lake_root`; `rule` and `new_threshold` for the re-thresholding (a rule whose
# MAGIC documents fail below its threshold, such as `gopher_min_doc_words` or `fineweb_line_punct_ratio`).

# COMMAND ----------

from pyspark.sql import functions as F

dbutils.widgets.text("lake_root", "./lake")
dbutils.widgets.text("rule", "gopher_min_doc_words")
dbutils.widgets.text("new_threshold", "30")
lake_root = dbutils.widgets.get("lake_root").rstrip("/")
rule = dbutils.widgets.get("rule")
new_threshold = float(dbutils.widgets.get("new_threshold"))
SILVER = ["silver.documents_dedup", "silver.duplicate_clusters", "silver.dedup_index", "silver.documents_clean",
          "silver.filter_decisions"]


def table_path(qualified_name):
    layer, name = qualified_name.split(".")
    return f"{lake_root}/{layer}/{name}"


def load(qualified_name):
    return spark.read.format("delta").load(table_path(qualified_name))


for name in ["bronze.documents", *SILVER]:   # for the SQL cells below
    load(name).createOrReplaceTempView(name.replace(".", "_"))
print(f"lake_root = {lake_root}; re-thresholding {rule} at {new_threshold}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Dedup: what each method removed
# MAGIC
# MAGIC Exact duplicates share their normalized text; near duplicates were found by MinHash-LSH.

# COMMAND ----------

clusters = load("silver.duplicate_clusters")
display(
    clusters.groupBy("method")
    .agg(F.countDistinct("cluster_id").alias("clusters"), F.count("*").alias("documents"),
         F.sum((~F.col("kept")).cast("int")).alias("removed"), F.max("cluster_size").alias("largest_cluster"),
         F.round(F.avg(F.when(~F.col("kept"), F.col("jaccard"))), 3).alias("avg_jaccard_of_removed"))
    .orderBy("method")
)

# COMMAND ----------

display(
    clusters.where("kept").groupBy("method", "cluster_size").agg(F.count("*").alias("clusters"))
    .orderBy("method", "cluster_size")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The largest cluster, member by member
# MAGIC
# MAGIC The kept document first, then each removed copy with its estimated Jaccard similarity to it.

# COMMAND ----------

largest = clusters.where("kept").orderBy(F.col("cluster_size").desc(), "cluster_id").first()
members = spark.sql(f"""
    SELECT c.doc_id, c.kept, c.method, c.jaccard, d.url, d.crawl_date, d.text_length, left(d.text, 120) AS text_start
    FROM silver_duplicate_clusters c JOIN bronze_documents d USING (doc_id)
    WHERE c.cluster_id = '{largest.cluster_id}' AND c.method = '{largest.method}'
    ORDER BY c.kept DESC, c.jaccard DESC, c.doc_id
""")
display(members)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Filter decisions: each rule's verdicts
# MAGIC
# MAGIC `failed` counts every failure of a rule; `removed_first` only the documents for which it was the
# MAGIC first failure in the order the rules ran (what the funnel counts). Informational rows (lines
# MAGIC removed, PII replaced) have an infinite threshold and always pass.

# COMMAND ----------

decisions = load("silver.filter_decisions")
display(spark.sql("""
    SELECT filter, count(*) AS documents, sum(CAST(NOT passed AS INT)) AS failed,
           round(avg(CAST(passed AS DOUBLE)), 4) AS pass_rate,
           min(threshold) AS threshold, round(percentile_approx(value, 0.5), 4) AS median_value
    FROM silver_filter_decisions GROUP BY filter ORDER BY failed DESC, filter
"""))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Languages of the clean documents

# COMMAND ----------

display(
    load("silver.documents_clean").groupBy("language")
    .agg(F.count("*").alias("documents"), F.round(F.avg("language_score"), 4).alias("avg_score"),
         F.sum("text_length").alias("characters"))
    .orderBy(F.col("documents").desc())
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Re-thresholding a rule with SQL
# MAGIC
# MAGIC A document comes back when it failed `rule` only because of its threshold (its value reaches the
# MAGIC new one) and passed every other rule. Rules that fail *above* a maximum (ratios such as
# MAGIC `gopher_symbol_word_ratio`) come back when their value is at or below the new threshold; the
# MAGIC direction is read from the decisions: a failed value above the threshold means a maximum.

# COMMAND ----------

rethreshold = spark.sql(f"""
    WITH r AS (SELECT * FROM silver_filter_decisions WHERE filter = '{rule}'),
    direction AS (SELECT CASE WHEN avg(CASE WHEN NOT passed THEN CAST(value > threshold AS INT) END) > 0.5
                              THEN 'max' ELSE 'min' END AS kind FROM r),
    other_failures AS (SELECT DISTINCT doc_id FROM silver_filter_decisions WHERE NOT passed AND filter <> '{rule}'),
    judged AS (
        SELECT r.doc_id, r.value, r.threshold, r.passed,
               CASE WHEN d.kind = 'min' THEN r.value >= {new_threshold} ELSE r.value <= {new_threshold} END AS passes_new
        FROM r CROSS JOIN direction d)
    SELECT j.doc_id, b.url, j.value, j.threshold AS old_threshold, {new_threshold} AS new_threshold,
           j.passed AS passed_old, j.passes_new AS passes_new, o.doc_id IS NULL AS passes_other_rules,
           CASE WHEN NOT j.passed AND j.passes_new AND o.doc_id IS NULL THEN 'comes back'
                WHEN j.passed AND NOT j.passes_new AND o.doc_id IS NULL THEN 'would be removed'
                ELSE 'unchanged' END AS change
    FROM judged j LEFT JOIN other_failures o USING (doc_id) JOIN bronze_documents b USING (doc_id)
""")
rethreshold.createOrReplaceTempView("rethreshold")
display(spark.sql("SELECT change, count(*) AS documents FROM rethreshold GROUP BY change ORDER BY change"))

# COMMAND ----------

display(spark.sql("SELECT * FROM rethreshold WHERE change <> 'unchanged' ORDER BY change, value DESC, doc_id"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check
# MAGIC
# MAGIC Fails if a silver table is empty, or the clean corpus is not exactly the deduplicated documents
# MAGIC whose decisions all passed.

# COMMAND ----------

counts = {t: load(t).count() for t in SILVER}
empty = [t for t, n in counts.items() if n == 0]
if empty:
    raise AssertionError(f"empty silver tables under {lake_root}: {', '.join(empty)}")
all_passed = decisions.groupBy("doc_id").agg(F.min(F.col("passed").cast("int")).alias("ok")).where("ok = 1")
mismatch = all_passed.select("doc_id").exceptAll(load("silver.documents_clean").select("doc_id")).count()
if mismatch:
    raise AssertionError(f"{mismatch} documents passed every rule but are not in silver.documents_clean")
print(f"silver is consistent: {counts}")
