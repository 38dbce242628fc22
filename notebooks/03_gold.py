# Databricks notebook source
# MAGIC %md
# MAGIC # crawlake 03 · gold: training data, loaders, embeddings, search
# MAGIC
# MAGIC The tables training reads: packed token sequences (`gold.token_sequences`, with document
# MAGIC boundaries) and tokens per document (`gold.document_tokens`); the PyTorch loader that reads them
# MAGIC without a JVM; chunk embeddings (`gold.embeddings`) and the FAISS index shards
# MAGIC (`gold.index_manifest`); and a semantic search over the clean corpus.
# MAGIC
# MAGIC Widgets: `lake_root`; `query` for the search. The loader and search cells need the `crawlake`
# MAGIC package on the cluster (the bundle's wheel).

# COMMAND ----------

from pyspark.sql import functions as F

dbutils.widgets.text("lake_root", "./lake")
dbutils.widgets.text("query", "how do I upload a show")
lake_root = dbutils.widgets.get("lake_root").rstrip("/")
query = dbutils.widgets.get("query")
GOLD = ["gold.token_sequences", "gold.document_tokens", "gold.embeddings", "gold.index_manifest"]


def table_path(qualified_name):
    layer, name = qualified_name.split(".")
    return f"{lake_root}/{layer}/{name}"


def load(qualified_name):
    return spark.read.format("delta").load(table_path(qualified_name))


print(f"lake_root = {lake_root}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Token sequences
# MAGIC
# MAGIC Sequence length (`size(input_ids)` = seq_len + 1), fill (`num_tokens` over length; the rest is
# MAGIC padding) and documents starting per sequence.

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

display(seqs.select("seq_id", "num_tokens", "doc_boundaries", "doc_ids", F.slice("input_ids", 1, 16).alias("first_ids"))
        .orderBy("seq_id"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Tokens per document
# MAGIC
# MAGIC `sum(num_tokens)` plus one separator per document is every token packed.

# COMMAND ----------

doc_tokens = load("gold.document_tokens")
display(
    doc_tokens.agg(F.count("*").alias("documents"), F.sum("num_tokens").alias("tokens"),
                   F.round(F.avg("num_tokens"), 1).alias("avg_tokens"),
                   F.expr("percentile_approx(num_tokens, array(0.1, 0.5, 0.9))").alias("p10_p50_p90"))
    .crossJoin(seqs.agg(F.sum("num_tokens").alias("tokens_packed")))
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The training loader
# MAGIC
# MAGIC `TokenSequenceDataset` reads the table's files with `deltalake`/`pyarrow` (no JVM), shards them
# MAGIC over ranks and DataLoader workers, shuffles by (seed, epoch) and yields `input_ids`/`labels`
# MAGIC (labels are -100 on padding). Two batches of rank 0 of 2:

# COMMAND ----------

from pipelines.loaders import TokenSequenceDataset

dataset = TokenSequenceDataset(table_path("gold.token_sequences"), rank=0, world_size=2, batch_size=2, seed=0)
batches = []
for batch in dataset:
    batches.append((tuple(batch["input_ids"].shape), int((batch["labels"] != -100).sum())))
    if len(batches) == 2:
        break
display(spark.createDataFrame([(i, str(shape), n) for i, (shape, n) in enumerate(batches)],
                              "batch int, shape string, target_tokens long"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Embeddings
# MAGIC
# MAGIC Vectors per model revision; they are L2-normalized, so the mean norm should be 1.

# COMMAND ----------

embeddings = load("gold.embeddings")
norm = F.sqrt(F.aggregate("vector", F.lit(0.0), lambda acc, x: acc + x.cast("double") * x.cast("double")))
display(
    embeddings.groupBy("model", "model_revision")
    .agg(F.count("*").alias("vectors"), F.countDistinct("doc_id").alias("documents"),
         F.collect_set(F.size("vector")).alias("dimensions"), F.round(F.avg(norm), 4).alias("avg_norm"))
    .orderBy("model", "model_revision")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Vector index
# MAGIC
# MAGIC One row per segment of a FAISS shard (a new crawl's vectors become a segment of their own):
# MAGIC the type built, rows, the search settings tuned to the target recall.

# COMMAND ----------

display(load("gold.index_manifest")
        .select("model", "shard", "segment", "index_type", "rows", "dim", "ef_search", "nprobe", "tuned_recall",
                "embeddings_version")
        .orderBy("model", "shard", "segment"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## A search
# MAGIC
# MAGIC The query is embedded with the same model revision, every shard is searched and the top hits
# MAGIC merged (one per document).

# COMMAND ----------

from pipelines.config import load_config
from pipelines.search import Searcher

searcher = Searcher(load_config("local", [f"lake.root={lake_root}"]))
hits = searcher.search(query, k=5)
display(spark.createDataFrame([(i + 1, h.score, h.doc_id, h.url, h.snippet[:160]) for i, h in enumerate(hits)],
                              "rank int, score double, doc_id string, url string, snippet string"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check
# MAGIC
# MAGIC Fails if a gold table is empty, tokens do not add up, or the search found nothing.

# COMMAND ----------

counts = {t: load(t).count() for t in GOLD}
empty = [t for t, n in counts.items() if n == 0]
if empty:
    raise AssertionError(f"empty gold tables under {lake_root}: {', '.join(empty)}")
packed = seqs.agg(F.sum("num_tokens")).first()[0]
documents, doc_sum = doc_tokens.agg(F.count("*"), F.sum("num_tokens")).first()
if packed != doc_sum + documents:
    raise AssertionError(f"{packed} tokens packed, but documents hold {doc_sum} plus {documents} separators")
if not hits:
    raise AssertionError(f"no search hits for {query!r}")
print(f"gold is consistent: {counts}")
