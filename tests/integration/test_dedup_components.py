"""Connected components of dedup's candidate edges: the driver's (scipy) and Spark's (min-label
propagation) give the same components, each labelled with its smallest doc_id."""

from __future__ import annotations

import random

from pipelines.stages.dedup import connected_components


def union_find(edges: list[tuple[str, str]]) -> dict[str, str]:
    """The oracle: ``{doc_id: smallest doc_id of its component}`` by a plain union-find."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


def test_driver_and_spark_components_agree(spark):
    rng = random.Random(7)
    ids = [f"{n:016x}" for n in rng.sample(range(1 << 60), 400)]
    edges = [(ids[i], ids[i + 1]) for i in range(5)]               # a chain: five propagation rounds
    edges += [(ids[20], ids[j]) for j in range(21, 50)]             # a star, as LSH buckets give
    edges += [(ids[60 + i], ids[60 + (i + 1) % 5]) for i in range(5)]   # a cycle
    edges += [(ids[100 + 2 * i], ids[101 + 2 * i]) for i in range(40)]  # pairs
    edges += [(rng.choice(ids[200:]), rng.choice(ids[200:])) for _ in range(150)]
    edges += edges[:10]                                              # repeated edges
    edges = [(a, b) for a, b in edges if a != b]
    df = spark.createDataFrame(edges, "src string, dst string")

    want = union_find(edges)
    on_driver = {r.doc_id: r.component for r in connected_components(df, 50, driver_max_edges=10_000).collect()}
    on_spark = {r.doc_id: r.component for r in connected_components(df, 50, driver_max_edges=0).collect()}
    assert on_driver == want
    assert on_spark == want
    assert connected_components(df.limit(0), 50, driver_max_edges=10_000).count() == 0
