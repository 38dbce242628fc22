"""dedup: ``bronze.documents`` → ``silver.documents_dedup`` + ``silver.duplicate_clusters``.

1. Exact: documents with the same normalized-text hash form a cluster.
2. Near, on the exact survivors: MinHash signatures and LSH band hashes in the kernel
   (:mod:`pipelines.kernels.minhash`); documents sharing a (band, band hash) bucket are linked to
   the bucket's smallest doc_id (a star, not all pairs: O(bucket) edges, no bucket held in
   memory); connected components by iterative min-label propagation in Spark, with the lineage
   cut each round.

In each cluster one document is kept by a deterministic rule: earliest crawl date, then longest
text, then smallest doc_id, so re-runs keep the same one. This is the simple, correct version; the
scale version (large-star/small-star, bucket caps, incremental) is its own piece of work.
"""

from __future__ import annotations

from functools import partial

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DoubleType, StringType

from pipelines.kernels.minhash import SIGNATURE_SCHEMA, band_batch, optimal_bands_rows, shingle_jaccard, text_hash
from pipelines.stage import StageContext, StageResult
from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS



def keep_order() -> list:
    """Keep rule: earliest crawl date, then longest text, then smallest doc_id."""
    return [F.col("crawl_date").asc_nulls_last(), F.col("text_length").desc(), F.col("doc_id").asc()]


@F.pandas_udf(StringType())
def _text_hash(texts: pd.Series) -> pd.Series:
    return texts.map(lambda t: text_hash(t or ""))


def _jaccard_udf(ngram: int):
    @F.pandas_udf(DoubleType())
    def jaccard(a: pd.Series, b: pd.Series) -> pd.Series:
        return pd.Series([shingle_jaccard(x or "", y or "", ngram) for x, y in zip(a, b)])
    return jaccard


def _bands_partition(batches, **params):
    for batch in batches:
        yield band_batch(batch, **params)


def _clusters(docs: DataFrame, component: str, method: str) -> tuple[DataFrame, DataFrame]:
    """(cluster rows, removed doc_ids) for ``docs`` grouped by column ``component``."""
    ranked = (docs
              .withColumn("_rank", F.row_number().over(Window.partitionBy(component).orderBy(*keep_order())))
              .withColumn("cluster_size", F.count("*").over(Window.partitionBy(component)))
              .filter(F.col("cluster_size") > 1))
    kept = ranked.filter(F.col("_rank") == 1).select(component, F.col("doc_id").alias("cluster_id"))
    rows = (ranked.join(kept, component)
            .select("doc_id", "cluster_id", "cluster_size", (F.col("_rank") == 1).alias("kept"),
                    F.lit(method).alias("method")))
    return rows, ranked.filter(F.col("_rank") > 1).select("doc_id")


def connected_components(edges: DataFrame, max_iterations: int) -> DataFrame:
    """``(src, dst)`` undirected edges → ``(doc_id, component)``, component = smallest doc_id.

    Min-label propagation: each round every node takes the smallest label among itself and its
    neighbours, until no label changes. Raises RuntimeError if it has not converged after
    ``max_iterations`` rounds.
    """
    if edges.isEmpty():
        return edges.sparkSession.createDataFrame([], "doc_id string, component string")
    both = edges.select("src", "dst").union(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
    both = both.distinct().localCheckpoint()
    labels = both.select(F.col("src").alias("doc_id")).distinct().withColumn("label", F.col("doc_id"))
    for _ in range(max_iterations):
        proposals = (both.join(labels.withColumnRenamed("doc_id", "src"), "src")
                     .groupBy(F.col("dst").alias("doc_id")).agg(F.min("label").alias("proposal")))
        updated = (labels.join(proposals, "doc_id", "left")
                   .select("doc_id", F.least("label", F.coalesce("proposal", "label")).alias("label"),
                           (F.col("proposal") < F.col("label")).alias("changed"))
                   .localCheckpoint())
        changed = updated.filter("changed").count()
        labels = updated.drop("changed")
        if changed == 0:
            return labels.withColumnRenamed("label", "component")
    raise RuntimeError(f"connected components did not converge in {max_iterations} rounds (dedup.max_iterations)")


def run(ctx: StageContext) -> StageResult:
    lake, cfg = ctx.lake, ctx.cfg.dedup
    docs = lake.read(BRONZE_DOCUMENTS).withColumn("text_hash", _text_hash("text")).persist()
    rows_in = docs.count()

    exact_rows, exact_removed = _clusters(docs, "text_hash", "exact")
    survivors = docs.join(exact_removed, "doc_id", "left_anti")

    bands, rows = optimal_bands_rows(cfg.threshold, cfg.num_perm)
    params = dict(ngram=cfg.ngram, num_perm=cfg.num_perm, seed=cfg.seed, bands=bands, rows=rows)
    band_rows = survivors.select("doc_id", "text").mapInArrow(
        partial(_bands_partition, **params), from_arrow_schema(SIGNATURE_SCHEMA))
    # Star edges: each bucket member links to the bucket's smallest doc_id. A window minimum (which
    # Spark sorts and spills) instead of collecting members, so a huge bucket never sits in memory
    # and no bucket's pairs are materialized.
    bucket = Window.partitionBy("band", "band_hash")
    edges = (band_rows.withColumn("src", F.min("doc_id").over(bucket))
             .filter(F.col("src") != F.col("doc_id"))
             .select("src", F.col("doc_id").alias("dst")).distinct())
    if cfg.verify:
        # Exact Jaccard on shingles for each candidate edge: LSH false positives never join a
        # cluster. Edges are star edges to the bucket's smallest doc_id, so a false positive that
        # is that smallest doc can also hide a true pair in the same bucket (rare; documented).
        text = survivors.select("doc_id", "text")
        edges = (edges.join(text.withColumnRenamed("doc_id", "src").withColumnRenamed("text", "src_text"), "src")
                 .join(text.withColumnRenamed("doc_id", "dst").withColumnRenamed("text", "dst_text"), "dst")
                 .filter(_jaccard_udf(cfg.ngram)("src_text", "dst_text") >= cfg.threshold)
                 .select("src", "dst"))
    components = connected_components(edges, cfg.max_iterations)
    near_rows, near_removed = _clusters(survivors.join(components, "doc_id"), "component", "near")

    removed = exact_removed.union(near_removed)
    lake.overwrite(SILVER_DOCUMENTS_DEDUP, docs.drop("text_hash").join(removed, "doc_id", "left_anti"))
    lake.overwrite(SILVER_DUPLICATE_CLUSTERS, exact_rows.unionByName(near_rows))
    docs.unpersist()

    out = lake.read(SILVER_DOCUMENTS_DEDUP).count()
    clusters = lake.read(SILVER_DUPLICATE_CLUSTERS)
    return StageResult(
        rows_in=rows_in, rows_out=out,
        input_versions={BRONZE_DOCUMENTS.qualified_name: lake.version(BRONZE_DOCUMENTS)},
        output_versions={t.qualified_name: lake.version(t) for t in (SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS)},
        notes={"bands_x_rows": f"{bands}x{rows}", "verified": cfg.verify,
               "exact_removed": clusters.filter("method = 'exact' AND NOT kept").count(),
               "near_removed": clusters.filter("method = 'near' AND NOT kept").count()},
    )
