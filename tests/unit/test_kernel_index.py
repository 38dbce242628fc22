"""FAISS index kernel against brute-force numpy, the correctness oracle (no Spark)."""

import faiss
import numpy as np
import pytest

from pipelines.config import IndexConfig
from pipelines.kernels.index import (
    auto_nlist,
    auto_pq_m,
    build_index,
    load_index,
    merge_topk,
    recall_at_k,
    save_index,
    search,
)

DIM = 64
pytestmark = pytest.mark.usefixtures("one_thread_while_building")


def unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def clustered():
    """10,000 unit vectors around 50 seeded centers (embeddings cluster by topic), and 200 queries
    drawn near data points. 10,000 >= 39 * 256 so IVF-PQ at default nbits=8 really trains."""
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((50, DIM))
    x = unit(centers[rng.integers(0, 50, 10_000)] + 0.35 * rng.standard_normal((10_000, DIM)))
    q = unit(x[rng.choice(len(x), 200, replace=False)] + 0.1 * rng.standard_normal((200, DIM)))
    return x, q


@pytest.fixture(scope="module")
def exact(clustered):
    x, q = clustered
    index, kind = build_index(x, IndexConfig(type="flat"))
    assert kind == "flat"
    return search(index, q, 10)


@pytest.fixture(scope="module")
def built(clustered):
    """One index per type at default parameters, built once (IVF-PQ training is the slow part)."""
    x, _ = clustered
    return {kind: build_index(x, IndexConfig(type=kind)) for kind in ("flat", "hnsw", "ivfpq")}


def brute_force(x, q, k):
    sims = q @ x.T
    ids = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, ids, axis=1), ids


def test_flat_equals_numpy_brute_force(clustered, exact):
    x, q = clustered
    scores, ids = exact
    ref_scores, ref_ids = brute_force(x, q, 10)
    assert ids.dtype == np.int64 and scores.dtype == np.float32 and ids.shape == (200, 10)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
    # ids may only differ where two scores tie to float precision
    differ = ids != ref_ids
    assert differ.mean() < 0.01
    assert np.all(np.diff(scores, axis=1) <= 1e-7)  # descending


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq"])
def test_approximate_recall_at_10(clustered, exact, built, kind):
    x, q = clustered
    index, built_type = built[kind]
    assert built_type == kind and index.ntotal == len(x)
    scores, ids = search(index, q, 10)
    assert recall_at_k(ids, exact[1], 10) >= 0.9
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # descending


def test_ivfpq_without_refine_still_searches(clustered, exact):
    x, q = clustered
    index, built_type = build_index(x, IndexConfig(type="ivfpq", refine_k_factor=0, nlist=64, pq_m=8, nbits=6))
    assert built_type == "ivfpq" and isinstance(index, faiss.IndexIVFPQ)  # no IndexRefineFlat wrapper
    _, ids = search(index, q, 10)
    # 8 x 6-bit codes of 64-d vectors are coarse: far from exact, far above chance (10/10,000)
    assert 0.15 <= recall_at_k(ids, exact[1], 10) < 0.9


def test_small_shard_falls_back_to_flat(clustered):
    x, q = clustered
    small = x[:500]
    index, built_type = build_index(small, IndexConfig(type="ivfpq", flat_max_rows=0))
    assert built_type == "flat"
    _, ids = search(index, q, 10)
    assert recall_at_k(ids, brute_force(small, q, 10)[1], 10) >= 0.99  # exact up to float ties
    # an explicit nlist needing more than 39 training points per list falls back; one within trains
    assert build_index(x[:2000], IndexConfig(type="ivfpq", nlist=100, nbits=4, flat_max_rows=0))[1] == "flat"
    assert build_index(x[:2000], IndexConfig(type="ivfpq", nlist=40, nbits=4, flat_max_rows=0))[1] == "ivfpq"


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq"])
def test_a_shard_of_at_most_flat_max_rows_is_exact(clustered, exact, kind):
    x, q = clustered
    params = IndexConfig(type=kind, flat_max_rows=len(x))
    index, built_type = build_index(x, params)
    assert built_type == "flat" and isinstance(index, faiss.IndexFlatIP) and index.ntotal == len(x)
    assert np.array_equal(search(index, q, 10, params)[1], exact[1])
    # one vector more than the limit gets the asked-for type; 0 builds a graph for any non-empty shard
    assert build_index(x[:301], IndexConfig(type="hnsw", flat_max_rows=300))[1] == "hnsw"
    assert build_index(x[:300], IndexConfig(type="hnsw", flat_max_rows=300))[1] == "flat"
    assert build_index(x[:5], IndexConfig(type="hnsw", flat_max_rows=0))[1] == "hnsw"
    assert build_index(x[:0], IndexConfig(type="hnsw", flat_max_rows=0))[1] == "flat"


def test_empty_shard_and_fewer_than_k(clustered):
    x, q = clustered
    index, built_type = build_index(np.zeros((0, DIM), np.float32), IndexConfig())
    assert built_type == "flat" and index.ntotal == 0
    scores, ids = search(index, q[:3], 5)
    assert np.all(ids == -1) and np.all(np.isneginf(scores))
    index, _ = build_index(x[:3], IndexConfig(type="flat"))
    scores, ids = search(index, q[:2], 5)
    assert np.all(ids[:, 3:] == -1) and np.all(np.isneginf(scores[:, 3:]))
    assert sorted(ids[0, :3]) == [0, 1, 2]


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivfpq"])
def test_save_load_round_trip(tmp_path, clustered, built, kind):
    x, q = clustered
    params = IndexConfig(type=kind)
    index, _ = built[kind]
    path = tmp_path / "nested" / "dir" / f"{kind}.faiss"
    save_index(index, str(path))
    assert path.exists()
    loaded = load_index(str(path), params)
    assert loaded.ntotal == index.ntotal
    s0, i0 = search(index, q, 10)
    s1, i1 = search(loaded, q, 10)
    assert np.array_equal(i0, i1)
    np.testing.assert_array_equal(s0, s1)


def test_search_params_are_applied(clustered, exact, built):
    x, q = clustered
    index, _ = built["ivfpq"]
    _, low = search(index, q, 10, IndexConfig(nprobe=1, refine_k_factor=1))
    _, high = search(index, q, 10, IndexConfig(nprobe=64, refine_k_factor=8))
    assert recall_at_k(low, exact[1], 10) < recall_at_k(high, exact[1], 10)


def test_merge_topk_of_three_shards_equals_unsplit_flat(clustered, exact):
    x, q = clustered
    bounds = [0, 3000, 7100, len(x)]
    scores, ids = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        shard, _ = build_index(x[lo:hi], IndexConfig(type="flat"))
        s, i = search(shard, q, 10)
        scores.append(s)
        ids.append(i)
    m_scores, m_shard, m_ids = merge_topk(scores, ids, 10)
    assert m_scores.dtype == np.float32 and m_shard.dtype == np.int32 and m_ids.dtype == np.int64
    global_ids = np.asarray(bounds[:-1])[m_shard] + m_ids
    np.testing.assert_allclose(m_scores, exact[0], atol=1e-6)
    assert recall_at_k(global_ids, exact[1], 10) == 1.0


def test_merge_topk_ignores_padding_and_pads():
    s = [np.array([[0.9, 0.1, 5.0]], np.float32), np.array([[0.5, 0.95]], np.float32)]
    i = [np.array([[4, 7, -1]]), np.array([[2, -1]])]  # -1 with a high score must be ignored
    scores, shard, ids = merge_topk(s, i, 5)
    np.testing.assert_allclose(scores[0, :3], [0.9, 0.5, 0.1])
    assert shard[0].tolist() == [0, 1, 0, -1, -1]
    assert ids[0].tolist() == [4, 2, 7, -1, -1]
    assert np.all(np.isneginf(scores[0, 3:]))
    with pytest.raises(ValueError):
        merge_topk([np.zeros((2, 3))], [np.zeros((3, 3), np.int64)], 3)


def test_recall_at_k_hand_made():
    exact = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    approx = np.array([[0, 1, 9, 8], [7, 6, 5, 4]])
    assert recall_at_k(approx, exact, 4) == pytest.approx((2 / 4 + 4 / 4) / 2)
    assert recall_at_k(approx, exact, 2) == pytest.approx((2 / 2 + 0 / 2) / 2)
    assert recall_at_k(np.array([[-1, -1]]), np.array([[-1, -1]]), 2) == 0.0
    with pytest.raises(ValueError):
        recall_at_k(approx[:, :1], exact, 2)


def test_auto_parameters():
    assert auto_pq_m(384) == 96 and auto_pq_m(64) == 16 and auto_pq_m(10) == 2 and auto_pq_m(3) == 1
    assert auto_nlist(100_000) == 1265
    assert auto_nlist(10_000) == 256 and auto_nlist(10) == 1


def test_bad_input_raises(clustered):
    x, q = clustered
    with pytest.raises(ValueError, match="2-D"):
        build_index(x[0], IndexConfig())
    bad = x[:100].copy()
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        build_index(bad, IndexConfig(type="flat"))
    with pytest.raises(ValueError, match="unknown index type"):
        build_index(x[:100], IndexConfig.model_construct(type="lsh"))  # past validation
    index, _ = build_index(x[:100], IndexConfig(type="flat"))
    with pytest.raises(ValueError, match="dim"):
        search(index, q[:, :32], 10)
    with pytest.raises(ValueError, match="2-D"):
        search(index, q[0], 10)
    with pytest.raises(ValueError, match="NaN"):
        search(index, np.full((1, DIM), np.inf, np.float32), 10)
    with pytest.raises(ValueError):
        search(index, q, 0)


def sphere(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """6,000 uniform unit vectors in 48 dimensions and 200 unseen query vectors: hard for HNSW at
    low effort, so tuning has something to do."""
    rng = np.random.default_rng(seed)
    return unit(rng.standard_normal((6000, 48))), unit(rng.standard_normal((200, 48)))


#: HNSW settings too low for ``sphere`` data until tuned (graphs for segments of any size).
LOW_EFFORT = IndexConfig(type="hnsw", hnsw_m=8, ef_construction=40, ef_search=16, flat_max_rows=0)


def test_tune_search_reaches_the_target_on_unseen_queries():
    """Tuned on the shard's own vectors, the recall holds for queries the index never saw."""
    from pipelines.kernels.index import tune_search

    x, q = sphere(3)
    params = LOW_EFFORT
    index, _ = build_index(x, params)
    flat, _ = build_index(x, IndexConfig(type="flat"))
    _, exact = search(flat, q, 10)
    _, before = search(index, q, 10, params)
    tuned, sample_recall = tune_search(index, x, params, 0.95)
    _, after = search(index, q, 10, tuned)
    assert recall_at_k(before, exact, 10) < 0.9  # the starting effort is too little here
    assert tuned.ef_search > params.ef_search and sample_recall >= 0.95
    assert recall_at_k(after, exact, 10) >= 0.93
    flat_tuned, r = tune_search(flat, x, IndexConfig(type="flat"), 0.95)
    assert r == 1.0 and flat_tuned == IndexConfig(type="flat")


def test_segments_each_tuned_reach_the_target_together():
    """A shard stored as segments (a new crawl's vectors in their own small index), each tuned on
    its own vectors: searching every segment and merging the top k keeps the recall against exact
    search over all the shard's rows, for queries none of them saw."""
    from pipelines.kernels.index import tune_search

    x, q = sphere(5)
    params = LOW_EFFORT
    bounds = [0, 5000, 5700, len(x)]   # the history, then two crawls
    scores, ids = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        segment, _ = build_index(x[lo:hi], params)
        tuned, sample_recall = tune_search(segment, x[lo:hi], params, 0.95)
        assert sample_recall >= 0.95
        s, i = search(segment, q, 10, tuned)
        scores.append(s)
        ids.append(i)
    _, seg, local = merge_topk(scores, ids, 10)
    flat, _ = build_index(x, IndexConfig(type="flat"))
    _, exact = search(flat, q, 10)
    assert recall_at_k(np.asarray(bounds[:-1])[seg] + local, exact, 10) >= 0.93
