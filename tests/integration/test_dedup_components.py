"""Connected components of dedup's candidate edges: the driver's (scipy) and Spark's (min-label
propagation) give the same components, each labelled with its smallest doc_id."""

from __future__ import annotations

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
