"""Connected components on one machine (pipelines.kernels.graph), against a plain union-find."""

from __future__ import annotations

import random

import pyarrow as pa

from pipelines.kernels.graph import COMPONENTS_SCHEMA, components


def union_find(edges: list[tuple[str, str]]) -> dict[str, str]:
    """The oracle: ``{node: smallest node of its component}`` by a plain union-find."""
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


def sample_edges(seed: int = 7) -> list[tuple[str, str]]:
    """A chain, a star (as LSH buckets give), a cycle, pairs, random edges and repeats."""
    rng = random.Random(seed)
    ids = [f"{n:016x}" for n in rng.sample(range(1 << 60), 400)]
    edges = [(ids[i], ids[i + 1]) for i in range(5)]
    edges += [(ids[20], ids[j]) for j in range(21, 50)]
    edges += [(ids[60 + i], ids[60 + (i + 1) % 5]) for i in range(5)]
    edges += [(ids[100 + 2 * i], ids[101 + 2 * i]) for i in range(40)]
    edges += [(rng.choice(ids[200:]), rng.choice(ids[200:])) for _ in range(150)]
    edges += edges[:10] + [(b, a) for a, b in edges[10:20]]
    return [(a, b) for a, b in edges if a != b]


def table(edges: list[tuple[str, str]]) -> pa.Table:
    return pa.table({"src": [a for a, _ in edges], "dst": [b for _, b in edges]})


def test_components_match_union_find():
    edges = sample_edges()
    out = components(table(edges))
    assert out.schema == COMPONENTS_SCHEMA
    assert out.column("doc_id").to_pylist() == sorted(out.column("doc_id").to_pylist())
    assert dict(zip(out.column("doc_id").to_pylist(), out.column("component").to_pylist())) == union_find(edges)


def test_an_edge_repeated_many_times_still_joins_its_ends():
    out = components(table([("b", "a")] * 300 + [("c", "d")]))
    assert out.to_pylist() == [{"doc_id": "a", "component": "a"}, {"doc_id": "b", "component": "a"},
                               {"doc_id": "c", "component": "c"}, {"doc_id": "d", "component": "c"}]


def test_no_edges_no_rows():
    assert components(table([])).num_rows == 0
