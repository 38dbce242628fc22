"""Vector-index shards with FAISS (no Spark, no torch): build, save, load, search, merge shards.

Vectors are L2-normalized float32 embeddings, so cosine similarity equals the inner product and
every index here uses ``METRIC_INNER_PRODUCT``; scores are cosine similarities in [-1, 1], higher
is nearer. Ids are row numbers within one shard (0..n-1, int64); a shard is mapped back to its
documents by the caller (gold.index_manifest).

Index types (FAISS: Johnson, Douze & Jégou 2019, "Billion-scale similarity search with GPUs";
Douze et al. 2024, "The Faiss library"):

``flat``
    exact exhaustive search (``IndexFlatIP``); the recall reference, what any shard or segment of
    at most ``flat_max_rows`` vectors is built as (a scan of it is about as fast as a graph
    search, and it needs no build: a new crawl's small segments), and the fallback for shards too
    small to train IVF-PQ.
``hnsw``
    Hierarchical Navigable Small World graph (Malkov & Yashunin 2018, IEEE TPAMI 42(4)),
    ``IndexHNSWFlat`` with degree ``hnsw_m``, ``ef_construction`` at build and ``ef_search`` at
    query time; vectors are kept uncompressed (4·dim bytes each plus about 8·M bytes of graph).
``ivfpq``
    inverted file over a k-means coarse quantizer with product-quantized residuals (Jégou, Douze &
    Schmid 2011, "Product quantization for nearest neighbor search", IEEE TPAMI 33(1)),
    ``IndexIVFPQ`` with ``nlist`` lists and ``pq_m`` sub-quantizers of ``nbits`` bits, probing
    ``nprobe`` lists; optionally wrapped in ``IndexRefineFlat`` which re-ranks
    ``k * refine_k_factor`` candidates with the exact vectors.

Recall depends on the data far more than on n. Real, clustered embeddings are easy: at the
defaults HNSW reaches recall@10 0.98 on 1,627 all-MiniLM-L6-v2 chunks of real pages, and HNSW 1.00
/ IVF-PQ 0.98 on 10,000 clustered 64-d vectors (the unit tests). Uniform random unit vectors in
384 dimensions, where all neighbors are nearly equidistant, defeat every ANN method: measured on
100,000 of them (``benchmarks/bench_index.py``, 2 shared cores, one thread per query), HNSW M=32
reaches recall@10 0.31 / 0.71 / 0.91 / 0.98 at ef_search 128 / 512 / 1024 / 2048 (p50 1.6 / 5.8 /
10.8 / 16.8 ms; exact flat search 11.8 ms), and IVF-PQ (nlist 1265, 96 x 8-bit codes) 0.13 at
nprobe 32 and 0.948 only when probing every list with refine_k_factor 16 (5.5 ms). Raise
ef_search / nprobe per call through ``params`` when data is that hard; the defaults favour latency
on real embeddings.
"""

from __future__ import annotations

import contextlib
import math
import os

import faiss
import numpy as np

from pipelines.config import IndexConfig

INDEX_TYPES = ("flat", "hnsw", "ivfpq")

# FAISS's k-means warns below 39 training points per centroid (ClusteringParameters
# min_points_per_centroid); below that the centroids are mostly noise.
MIN_POINTS_PER_CENTROID = 39


# ---------------------------------------------------------------------------------------------
# validation


def _as_matrix(a: np.ndarray, what: str) -> np.ndarray:
    """(n, d) C-contiguous float32 copy/view of ``a``; ValueError if not 2-D or not finite."""
    a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"{what} must be a 2-D (n, dim) array, got shape {a.shape}")
    if a.shape[1] == 0:
        raise ValueError(f"{what} must have dim >= 1, got shape {a.shape}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.size and not np.isfinite(a).all():
        raise ValueError(f"{what} contains NaN or infinite values")
    return a


def auto_nlist(n_train: int) -> int:
    """About 4·sqrt(n) IVF lists, at most n_train/39 (so k-means has >= 39 points per list), >= 1."""
    return max(1, min(int(round(4 * math.sqrt(max(n_train, 1)))), n_train // MIN_POINTS_PER_CENTROID))


def auto_pq_m(dim: int) -> int:
    """The largest divisor of ``dim`` that is <= dim/4 (4 dimensions per sub-quantizer), >= 1."""
    for m in range(max(1, dim // 4), 0, -1):
        if dim % m == 0:
            return m
    return 1


# ---------------------------------------------------------------------------------------------
# build


def build_index(vectors: np.ndarray, params: IndexConfig) -> tuple[faiss.Index, str]:
    """Build one shard's index over ``vectors``.

    Args:
        vectors: (n, dim) float-like array, L2-normalized rows (cast to float32). n == 0 is allowed.
        params: the ``index`` config section (:class:`~pipelines.config.IndexConfig`): type and parameters.

    Returns:
        (index, built_type): ids are 0..n-1 in row order; ``built_type`` is the type actually built,
        ``"flat"`` when n <= ``params.flat_max_rows`` (n == 0 always), or when ``ivfpq`` was asked
        for but the training sample is too small
        (fewer than 39·nlist points for the coarse k-means, or fewer than 39·2**nbits for the PQ
        codebooks) -- small shards are common on small lakes, and exact search is cheap there.
        Search-time parameters (ef_search, nprobe, refine_k_factor) are already applied.

    Raises:
        ValueError: vectors not 2-D, dim 0, NaN/inf values, or an unknown ``params.type``.
    """
    if params.type not in INDEX_TYPES:
        raise ValueError(f"unknown index type {params.type!r}; expected one of {INDEX_TYPES}")
    x = _as_matrix(vectors, "vectors")
    n, dim = x.shape
    kind = params.type if n > params.flat_max_rows else "flat"   # n == 0: flat (flat_max_rows >= 0)

    if kind == "ivfpq":
        n_train = min(n, params.train_sample)
        nlist = params.nlist if params.nlist is not None else auto_nlist(n_train)
        if n_train < MIN_POINTS_PER_CENTROID * max(nlist, 2 ** params.nbits):
            kind = "flat"

    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params.ef_construction
    else:
        pq_m = params.pq_m if params.pq_m is not None else auto_pq_m(dim)
        if dim % pq_m:
            raise ValueError(f"pq_m={pq_m} must divide dim={dim}")
        quantizer = faiss.IndexFlatIP(dim)
        ivf = faiss.IndexIVFPQ(quantizer, dim, nlist, pq_m, params.nbits, faiss.METRIC_INNER_PRODUCT)
        ivf.cp.seed = params.seed        # coarse k-means
        ivf.pq.cp.seed = params.seed     # PQ codebooks
        index = faiss.IndexRefineFlat(ivf) if params.refine_k_factor > 0 else ivf
        rng = np.random.default_rng(params.seed)
        sample = x if n_train == n else x[np.sort(rng.choice(n, n_train, replace=False))]
        index.train(sample)
    if n:
        index.add(x)
    apply_search_params(index, params)
    return index, kind


# ---------------------------------------------------------------------------------------------
# persistence and search-time parameters


def _unwrap(index: faiss.Index):
    """(outer, IVF or None, HNSW or None) of an index as built here or read back from disk."""
    # downcast wrappers do not own their C++ objects: keep the caller's index alive meanwhile
    index = faiss.downcast_index(index)
    base = faiss.downcast_index(index.base_index) if isinstance(index, faiss.IndexRefine) else index
    ivf = base if isinstance(base, faiss.IndexIVF) else None
    hnsw = base if isinstance(base, faiss.IndexHNSW) else None
    return index, ivf, hnsw


def apply_search_params(index: faiss.Index, params: IndexConfig) -> None:
    """Set ef_search (HNSW), nprobe (IVF, at most nlist) and k_factor (refine) on ``index`` in place."""
    index, ivf, hnsw = _unwrap(index)
    if hnsw is not None:
        hnsw.hnsw.efSearch = params.ef_search
    if ivf is not None:
        ivf.nprobe = max(1, min(params.nprobe, ivf.nlist))
    if isinstance(index, faiss.IndexRefine) and params.refine_k_factor > 0:
        index.k_factor = float(params.refine_k_factor)


def save_index(index: faiss.Index, path: str) -> None:
    """Write ``index`` with ``faiss.write_index`` to ``path`` (a local file), creating parent dirs."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    faiss.write_index(index, path)


def load_index(path: str, params: IndexConfig | None = None) -> faiss.Index:
    """Read an index written by :func:`save_index`; if ``params`` is given, apply its search-time
    parameters (ef_search, nprobe, refine_k_factor). Raises RuntimeError (from FAISS) if the file is
    missing or not an index."""
    index = faiss.read_index(path)  # already the concrete subclass, and owns its memory
    if params is not None:
        apply_search_params(index, params)
    return index


def _search_parameters(index: faiss.Index, params: IndexConfig, k: int):
    """Per-call FAISS SearchParameters (leaves the index untouched, so concurrent callers are safe)."""
    index, ivf, hnsw = _unwrap(index)
    base = None
    if hnsw is not None:
        base = faiss.SearchParametersHNSW(efSearch=max(params.ef_search, k))
    elif ivf is not None:
        base = faiss.SearchParametersIVF(nprobe=max(1, min(params.nprobe, ivf.nlist)))
    if isinstance(index, faiss.IndexRefine):
        k_factor = float(params.refine_k_factor) if params.refine_k_factor > 0 else index.k_factor
        return faiss.IndexRefineSearchParameters(k_factor=k_factor, base_index_params=base)
    return base


def search(index: faiss.Index, queries: np.ndarray, k: int,
           params: IndexConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k inner-product (cosine) search.

    Args:
        index: an index from :func:`build_index` or :func:`load_index`.
        queries: (q, dim) float-like array, L2-normalized rows (cast to float32).
        k: neighbors per query, >= 1.
        params: search-time parameters for this call only (ef_search / nprobe / refine_k_factor);
            None uses those set on the index.

    Returns:
        (scores, ids): scores (q, k) float32 in descending order (cosine similarity), ids (q, k)
        int64 row numbers within the shard; where fewer than k results exist the id is -1 and the
        score -inf.

    Raises:
        ValueError: queries not 2-D, NaN/inf, dim != index.d, or k < 1.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    q = _as_matrix(queries, "queries")
    if q.shape[1] != index.d:
        raise ValueError(f"queries have dim {q.shape[1]}, the index has dim {index.d}")
    if q.shape[0] == 0 or index.ntotal == 0:
        return np.full((q.shape[0], k), -np.inf, np.float32), np.full((q.shape[0], k), -1, np.int64)
    sp = _search_parameters(index, params, k) if params is not None else None
    scores, ids = index.search(q, k, params=sp) if sp is not None else index.search(q, k)
    scores = np.asarray(scores, np.float32)
    ids = np.asarray(ids, np.int64)
    scores[ids < 0] = -np.inf  # FAISS pads with -FLT_MAX for inner product; -inf is unambiguous
    return scores, ids


# ---------------------------------------------------------------------------------------------
# shards and evaluation


def merge_topk(scores: list[np.ndarray], ids: list[np.ndarray],
               k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge per-shard top-k lists into a global top-k.

    Args:
        scores: one (q, k_s) float array per shard (higher is nearer); k_s may differ by shard.
        ids: one (q, k_s) int array per shard, -1 for padding (ignored whatever its score).
        k: results per query, >= 1.

    Returns:
        (scores (q, k) float32 descending, shard (q, k) int32 index into the lists, ids (q, k) int64
        id within that shard); slots beyond the valid results have score -inf, shard -1, id -1.
        Ties keep shard order, then rank order (a stable sort).

    Raises:
        ValueError: list lengths differ, no shards, k < 1, or shapes disagree.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(scores) != len(ids) or not scores:
        raise ValueError("scores and ids must be non-empty lists of the same length")
    nq = np.asarray(scores[0]).shape[0]
    s_parts, i_parts, sh_parts = [], [], []
    for shard, (s, i) in enumerate(zip(scores, ids)):
        s, i = np.asarray(s, np.float32), np.asarray(i, np.int64)
        if s.ndim != 2 or s.shape != i.shape or s.shape[0] != nq:
            raise ValueError(f"shard {shard}: scores {s.shape} and ids {i.shape} must both be (q={nq}, k_s)")
        s_parts.append(np.where(i < 0, -np.inf, s))
        i_parts.append(i)
        sh_parts.append(np.full(i.shape, shard, np.int32))
    all_s = np.concatenate(s_parts, axis=1)
    all_i = np.concatenate(i_parts, axis=1)
    all_sh = np.concatenate(sh_parts, axis=1)
    width = all_s.shape[1]
    order = np.argsort(-all_s, axis=1, kind="stable")[:, :k]
    out_s = np.take_along_axis(all_s, order, axis=1)
    out_i = np.take_along_axis(all_i, order, axis=1)
    out_sh = np.take_along_axis(all_sh, order, axis=1)
    if width < k:  # fewer candidates than k in total: pad
        pad = k - width
        out_s = np.pad(out_s, ((0, 0), (0, pad)), constant_values=-np.inf)
        out_i = np.pad(out_i, ((0, 0), (0, pad)), constant_values=-1)
        out_sh = np.pad(out_sh, ((0, 0), (0, pad)), constant_values=-1)
    invalid = out_i < 0
    out_s[invalid], out_sh[invalid] = -np.inf, -1
    return out_s.astype(np.float32), out_sh.astype(np.int32), out_i.astype(np.int64)


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray, k: int) -> float:
    """Mean over queries of |approx[:k] ∩ exact[:k]| / k (recall@k as in ann-benchmarks).

    Args:
        approx_ids: (q, >= k) int ids from the index under test.
        exact_ids: (q, >= k) int ids from exact (flat) search on the same vectors.
        k: >= 1.

    Returns:
        a ratio in [0, 1]; -1 padding never counts as a hit (so a shard with fewer than k vectors
        scores below 1 even for exact search). 0.0 for q == 0.

    Raises:
        ValueError: arrays not 2-D, different number of queries, fewer than k columns, or k < 1.
    """
    a, e = np.asarray(approx_ids), np.asarray(exact_ids)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if a.ndim != 2 or e.ndim != 2 or a.shape[0] != e.shape[0]:
        raise ValueError(f"approx_ids {a.shape} and exact_ids {e.shape} must be (q, >=k) with the same q")
    if a.shape[1] < k or e.shape[1] < k:
        raise ValueError(f"need at least k={k} columns, got {a.shape[1]} and {e.shape[1]}")
    if a.shape[0] == 0:
        return 0.0
    a, e = a[:, :k], e[:, :k]
    # ids within a row are distinct (FAISS never repeats one), so counting matches counts the intersection
    hits = ((a[:, :, None] == e[:, None, :]) & (a[:, :, None] >= 0)).any(axis=2).sum(axis=1)
    return float(np.mean(hits / k))


# ---------------------------------------------------------------------------------------------
# tuning search-time parameters to a recall target


def tune_search(index: faiss.Index, vectors: np.ndarray, params: IndexConfig, target_recall: float = 0.95,
                k: int = 10, n_queries: int = 200) -> tuple[IndexConfig, float]:
    """Smallest search effort that reaches ``target_recall`` (recall@k against exact search) on
    this shard, like FAISS's ``ParameterSpace`` auto-tuning, but along one axis.

    Queries are new points at the data's own neighbor distance: for a seeded sample of
    ``n_queries`` indexed vectors v, q = c·v + sqrt(1 - c²)·u with u a random unit vector
    orthogonal to v and c the median cosine between an indexed vector and its nearest other one.
    (The indexed vectors themselves are easier queries than unseen ones, since the graph links
    them to their neighbors, and tuning on them overstates recall.) HNSW doubles ``ef_search`` (up to 8192), IVF doubles ``nprobe`` (up to ``nlist``, then raises
    ``refine_k_factor`` to 16). Recall on real embeddings usually needs no more than the defaults;
    uniform random vectors in hundreds of dimensions need near-exhaustive effort (see
    benchmarks/bench_index.py), and this says so instead of hiding it.

    Args:
        index: from :func:`build_index` over ``vectors`` (ids = row numbers).
        vectors: (n, dim) float32, the rows the index holds.
        params: the starting point; only ef_search / nprobe / refine_k_factor change.

    Returns:
        (params with the chosen search-time values, the recall@k they reached on the sample);
        unchanged params and 1.0 for a flat index or a shard of at most k vectors.
    """
    x = _as_matrix(vectors, "vectors")
    _, ivf, hnsw = _unwrap(index)
    n = x.shape[0]
    if (ivf is None and hnsw is None) or n <= k:
        return params, 1.0
    rng = np.random.default_rng(params.seed)
    picks = np.sort(rng.choice(n, min(n_queries, n), replace=False))
    exact = faiss.IndexFlatIP(x.shape[1])
    exact.add(x)
    with _blas_distances():
        sims, _ = exact.search(x[picks], 2)
        c = float(np.clip(np.median(sims[:, 1]), -1.0, 1.0))  # column 0 is the vector itself
        v = x[picks]
        u = rng.standard_normal(v.shape).astype(np.float32)
        u -= (u * v).sum(axis=1, keepdims=True) * v
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        queries = (c * v + np.sqrt(max(0.0, 1.0 - c * c)) * u).astype(np.float32)
        _, truth = exact.search(queries, k)

    def recall(p: IndexConfig) -> float:
        _, got = search(index, queries, k, p)
        return recall_at_k(got, truth, k)

    if hnsw is not None:
        candidates = [params.model_copy(update={"ef_search": ef}) for ef in _doublings(params.ef_search, 8192)]
    else:
        candidates = [params.model_copy(update={"nprobe": p}) for p in _doublings(params.nprobe, ivf.nlist)]
        if params.refine_k_factor:
            candidates.append(params.model_copy(update={"nprobe": ivf.nlist,
                                                        "refine_k_factor": max(16, params.refine_k_factor)}))
    best = (params, 0.0)
    for p in candidates:
        r = recall(p)
        best = (p, r)
        if r >= target_recall:
            break
    return best


@contextlib.contextmanager
def _blas_distances():
    """Exact (flat) searches inside compute their distances as one BLAS matrix product. FAISS
    does so only from ``distance_compute_blas_threshold`` queries on (128,000 in FAISS 1.15); the
    ground truth of a few hundred queries over a whole shard is otherwise a scalar loop that
    grows with the shard. The same neighbours, up to float rounding (ties may swap)."""
    saved = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 1
    try:
        yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = saved


def _doublings(start: int, stop: int) -> list[int]:
    out, v = [], max(1, start)
    while v < stop:
        out.append(v)
        v *= 2
    return out + [stop]

