"""Connected components of dedup's candidate edges: the driver's (scipy) and Spark's (min-label
propagation) give the same components, each labelled with its smallest doc_id."""

from __future__ import annotations

import pytest

from pipelines.stages.dedup import connected_components
from tests.unit.test_kernel_graph import sample_edges, union_find


def test_driver_and_spark_components_agree(spark):
    edges = sample_edges()
    df = spark.createDataFrame(edges, "src string, dst string")
    want = union_find(edges)
    on_driver = {r.doc_id: r.component for r in connected_components(df, 50, driver_max_edges=10_000).collect()}
    on_spark = {r.doc_id: r.component for r in connected_components(df, 50, driver_max_edges=0).collect()}
    assert on_driver == want
    assert on_spark == want
    assert connected_components(df.limit(0), 50, driver_max_edges=10_000).count() == 0


def test_a_counted_checkpoint_computes_its_frame_once(spark):
    """``counted_checkpoint``: the count (of the rows matching ``where``) is the job that
    materializes the checkpoint; later jobs read the stored rows, not the plan again."""
    from pyspark.sql import functions as F

    from pipelines.session import counted_checkpoint

    computed = spark.sparkContext.accumulator(0)

    @F.udf("long")
    def doubled(x):
        computed.add(1)
        return 2 * x

    frame = spark.range(0, 1000, numPartitions=4).withColumn("y", doubled("id"))
    checkpoint, n = counted_checkpoint(frame, where="y % 10 = 0")
    assert n == 200
    assert computed.value == 1000
    assert checkpoint.agg(F.sum("y")).first()[0] == 999_000
    assert checkpoint.count() == 1000
    assert computed.value == 1000
    assert counted_checkpoint(frame.limit(0))[1] == 0


def test_a_join_side_is_broadcast_only_when_it_fits_sparks_threshold(spark):
    """``broadcast_if_fits``: a side of known size within ``spark.sql.autoBroadcastJoinThreshold``
    is hinted (the large side is then not shuffled); a larger one, or any with broadcasts off
    (-1), is left to Spark's planner."""
    from pipelines.session import broadcast_if_fits

    large = spark.range(0, 1000).withColumnRenamed("id", "k")
    # from an RDD, so that Spark cannot size it (as with a checkpoint): never broadcast unhinted
    keys = spark.createDataFrame(spark.sparkContext.parallelize([(i,) for i in range(10)]), "k long")

    def plan(hint) -> str:
        return large.join(hint(keys), "k", "left_semi")._jdf.queryExecution().executedPlan().toString()

    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    try:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "1k")
        assert "BroadcastHashJoin" in plan(broadcast_if_fits(spark, 1024))
        assert "BroadcastHashJoin" not in plan(broadcast_if_fits(spark, 1025))
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
        assert "BroadcastHashJoin" not in plan(broadcast_if_fits(spark, 0))
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)


@pytest.mark.parametrize("writer", ["deltalake", "spark"])
def test_an_increments_cluster_rows_meet_the_stored_clusters_where_they_lie(spark, tmp_path, writer):
    """``_with_cluster_sizes``: this run's rows, and the stored rows of the clusters they join
    with cluster_size recounted; published by (doc_id, method), a touched document's stored row in
    its other method's cluster stays as it is. Spark cannot size this run's rows (a checkpoint):
    told their bound, it broadcasts them, and the stored table is neither shuffled (a sort-merge
    join) nor filtered by a runtime Bloom filter built over the whole of it and shipped in every task."""
    from conftest import lake_config

    from pipelines.lake import Lake
    from pipelines.session import local_checkpoint
    from pipelines.stages.dedup import _KEYS, _with_cluster_sizes
    from schemas.catalog import SILVER_DUPLICATE_CLUSTERS

    lake = Lake(spark, lake_config(tmp_path, writer=writer).lake)
    stored = [("k1", "k1", 2, True, "exact", 1.0), ("a1", "k1", 2, False, "exact", 1.0),
              ("k1", "k1", 2, True, "near", 1.0), ("n1", "k1", 2, False, "near", 0.9),
              ("k2", "k2", 2, True, "near", 1.0), ("n2", "k2", 2, False, "near", 0.8)]
    lake.overwrite(SILVER_DUPLICATE_CLUSTERS, spark.createDataFrame(stored, SILVER_DUPLICATE_CLUSTERS.schema))
    # this run: a new exact copy of k1 (k1 kept), and a new near pair of its own
    new = [("a2", "k1", 2, False, "exact", 1.0), ("k1", "k1", 2, True, "exact", 1.0),
           ("m1", "m1", 2, True, "near", 1.0), ("m2", "m1", 2, False, "near", 0.7)]
    rows = local_checkpoint(spark.createDataFrame(spark.sparkContext.parallelize(new), SILVER_DUPLICATE_CLUSTERS.schema))

    staged = _with_cluster_sizes(lake, rows, len(new))
    got = sorted(tuple(r) for r in staged.select(*SILVER_DUPLICATE_CLUSTERS.columns).collect())
    exact_k1 = [("k1", "k1", 3, True, "exact", 1.0), ("a1", "k1", 3, False, "exact", 1.0), ("a2", "k1", 3, False, "exact", 1.0)]
    new_pair = [("m1", "m1", 2, True, "near", 1.0), ("m2", "m1", 2, False, "near", 0.7)]
    assert got == sorted(exact_k1 + new_pair)
    with lake.staging({"clusters": SILVER_DUPLICATE_CLUSTERS}) as staging:
        staging.stage("clusters", staged)
        assert staging.publish("clusters", replace=_KEYS["clusters"], operation="dedup")
    table = sorted(tuple(r) for r in lake.read(SILVER_DUPLICATE_CLUSTERS).select(*SILVER_DUPLICATE_CLUSTERS.columns).collect())
    assert table == sorted(exact_k1 + new_pair + stored[2:])   # k1's near cluster as it was
    plan = staged._jdf.queryExecution().executedPlan().toString()
    assert "BroadcastHashJoin" in plan
    assert "SortMergeJoin" not in plan and "might_contain" not in plan
