"""clicks features: ``bronze.clicks`` → ``silver.click_vocab`` + ``silver.click_features`` (DLRM inputs).

The preprocessing of the DLRM / TorchRec Criteo pipelines (Naumov et al. 2019, "Deep Learning
Recommendation Model for Personalization and Recommendation Systems"; facebookresearch/dlrm
``data_utils.py``):

* dense: each ``I`` column, missing → 0, negatives clipped to 0, then ``log(1 + x)`` (float32[13]);
* sparse: each ``C`` column mapped to contiguous ids by a vocabulary of the values seen at least
  ``clicks.vocab_min_frequency`` times (default 3) in ``bronze.clicks``: 0 = empty value, 1 =
  out of vocabulary (rarer values), vocabulary values from 2 (int32[26]).

Vocabularies are counted with a Spark group-by over (column, value) and kept in
``silver.click_vocab`` (column, value, id, count). A later run recounts, keeps every existing id
and appends ids for values that reached the threshold since, in order of count (descending) then
value, so an id never changes meaning. Ids are looked up with one join per column (broadcast when
small, a shuffle join when large); the per-row rules are :func:`pipelines.kernels.clicks.feature_batches`
run through ``mapInArrow``. Both tables are audited before they are published (overwrite).
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipelines import quality
from pipelines.kernels.clicks import CAT_COLUMNS, FIRST_VALUE_ID, INT_COLUMNS, LABEL, feature_batches
from pipelines.stage import StageContext, StageResult
from pipelines.lake import Lake
from schemas.catalog import BRONZE_CLICKS, SILVER_CLICK_FEATURES, SILVER_CLICK_VOCAB, TableSpec

STAGE = "clicks_features"


def _read_at(lake: Lake, spec: TableSpec, version: int | None) -> DataFrame:
    """``spec`` as of Delta ``version`` (a pinned snapshot), or empty when the table is missing."""
    if version is None:
        return lake.read(spec)
    reader = lake.spark.read.format("delta").option("versionAsOf", version)
    return reader.table(lake.location(spec)) if lake.cfg.mode == "catalog" else reader.load(lake.location(spec))


def value_counts(bronze: DataFrame) -> DataFrame:
    """(column, value, count) of every non-empty C value, by a group-by (no driver collect)."""
    pairs = F.array(*[F.struct(F.lit(c).alias("column"), F.col(c).alias("value")) for c in CAT_COLUMNS])
    return (bronze.select(F.explode(pairs).alias("p")).select("p.*")
            .where(F.col("value").isNotNull())
            .groupBy("column", "value").agg(F.count(F.lit(1)).alias("count")))


def build_vocab(counts: DataFrame, previous: DataFrame, min_frequency: int) -> DataFrame:
    """The new ``silver.click_vocab``: ``previous`` ids kept (counts refreshed, 0 when gone), values
    newly at ``min_frequency`` or above appended after each column's largest id, by count
    descending then value."""
    old = previous.select("column", "value", "id")
    joined = counts.join(old, ["column", "value"], "full_outer")
    kept = joined.where(F.col("id").isNotNull()).select(
        "column", "value", "id", F.coalesce("count", F.lit(0)).cast("long").alias("count"))
    last_id = old.groupBy("column").agg(F.max("id").alias("last_id"))
    order = Window.partitionBy("column").orderBy(F.desc("count"), F.asc("value"))
    fresh = (joined.where(F.col("id").isNull() & (F.col("count") >= min_frequency)).drop("id")
             .join(F.broadcast(last_id), "column", "left")
             .select("column", "value",
                     (F.coalesce("last_id", F.lit(FIRST_VALUE_ID - 1)) + F.row_number().over(order)).cast("int").alias("id"),
                     F.col("count").cast("long").alias("count")))
    return kept.unionByName(fresh)


def lookup_ids(bronze: DataFrame, vocab: DataFrame) -> DataFrame:
    """Bronze rows with ``C<k>_id`` = the value's vocabulary id, null when empty or not in it.

    One left join per column, all against the same build side keyed by ``column:value``, so Spark
    broadcasts (or shuffles) the vocabulary once and reuses that exchange for the 26 joins.
    """
    keyed = vocab.select(F.concat_ws(":", "column", "value").alias("key"), "id")
    df = bronze.select("row_key", "day", LABEL, *INT_COLUMNS, *CAT_COLUMNS)
    for i, c in enumerate(CAT_COLUMNS):
        side = keyed.alias(f"v{i}")
        df = (df.join(side, F.concat(F.lit(f"{c}:"), df[c]) == F.col(f"v{i}.key"), "left")
              .select(*[df[name] for name in df.columns], F.col(f"v{i}.id").alias(f"{c}_id")))
    return df


def vocab_sizes(vocab: DataFrame) -> dict[str, int]:
    """Ids per C column (reserved ids included): every sparse id of that column is below it."""
    last = {r["column"]: r["last_id"] for r in vocab.groupBy("column").agg(F.max("id").alias("last_id")).collect()}
    return {c: (last[c] + 1 if last.get(c) is not None else FIRST_VALUE_ID) for c in CAT_COLUMNS}


def audit_view(features: DataFrame, sizes: dict[str, int]) -> DataFrame:
    """``features`` plus the columns the ``silver.click_features`` suite checks (sizes, minimums,
    ``sparse_headroom`` = min over columns of vocabulary size - 1 - id)."""
    size_array = F.array(*[F.lit(sizes[c]) for c in CAT_COLUMNS])
    return features.select(
        "*",
        F.size("dense").alias("dense_size"), F.size("sparse").alias("sparse_size"),
        F.array_min("dense").alias("dense_min"), F.array_min("sparse").alias("sparse_min"),
        F.array_min(F.transform("sparse", lambda x, i: F.element_at(size_array, i + 1) - 1 - x)).alias("sparse_headroom"),
    )


def run(ctx: StageContext) -> StageResult:
    """``crawlake clicks features``. Raises QualityGateError (nothing published) on a failed suite."""
    lake, cfg = ctx.lake, ctx.cfg.clicks
    bronze_version = lake.version(BRONZE_CLICKS)
    if bronze_version is None:
        raise ValueError("bronze.clicks does not exist yet: run `crawlake clicks ingest` or `clicks stream` first")
    bronze = _read_at(lake, BRONZE_CLICKS, bronze_version)
    vocab_version = lake.version(SILVER_CLICK_VOCAB)
    previous = _read_at(lake, SILVER_CLICK_VOCAB, vocab_version)

    vocab = build_vocab(value_counts(bronze), previous, cfg.vocab_min_frequency).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        quality.audit(ctx, STAGE, SILVER_CLICK_VOCAB, vocab)
        before = previous.count()
        lake.overwrite(SILVER_CLICK_VOCAB, vocab)
    finally:
        vocab.unpersist()
    vocab = lake.read(SILVER_CLICK_VOCAB)
    sizes = vocab_sizes(vocab)

    joined = lookup_ids(bronze, vocab)
    features = joined.mapInArrow(feature_batches, SILVER_CLICK_FEATURES.schema).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        quality.audit(ctx, STAGE, SILVER_CLICK_FEATURES, audit_view(features, sizes))
        lake.overwrite(SILVER_CLICK_FEATURES, features)
        rows = features.count()
    finally:
        features.unpersist()
    entries = sum(sizes.values()) - FIRST_VALUE_ID * len(CAT_COLUMNS)
    return StageResult(
        rows_in=rows, rows_out=rows,
        notes={"vocab_entries": entries, "vocab_entries_added": entries - before,
               "min_frequency": cfg.vocab_min_frequency},
    )
