"""Vector-index shard quality and speed: recall@10 against exact search, query latency, build time.

Datasets:
  random   --n unit vectors of --dim (default 100,000 x 384), Gaussian then L2-normalized, seeded;
           queries are --queries other random unit vectors. The hardest case for any ANN index:
           in 384 dimensions every neighbor is nearly equidistant.
  corpus   real sentence embeddings (all-MiniLM-L6-v2, 384-d): with --lake PATH the vectors of
           PATH/gold/embeddings (deltalake); otherwise texts embedded here on the CPU with
           pipelines.kernels.embed.embed_batch: the WET conversion records of
           cc-main-2024-22-whirlwind.warc.wet.gz (one page), then the extracted documents of the
           WARC files in ../shared/data, then Abt-Buy product descriptions, up to --max-docs.
           A held-out 10% of the vectors (seeded) are the queries; the rest are indexed.

For each --types entry the index is built with pipelines.kernels.index.build_index (IndexConfig
defaults unless overridden), then:
  recall_at_10   mean |approx top-10 ∩ exact top-10| / 10, exact = IndexFlatIP on the same vectors
  query_p50_ms,  one query per call over --queries queries (batch of 1), on --latency-threads
  query_p99_ms   FAISS threads (default 1, as ann-benchmarks measures; unset = FAISS's default)
  build_s        train + add, wall clock, FAISS's default thread count
By default each index's search effort is tuned as the index stage tunes it
(pipelines.kernels.index.tune_search: the smallest ef_search / nprobe whose recall@10 on a sample
of the indexed vectors reaches --target-recall, 0.95), then measured on the held-out queries.
--ef-search / --nprobe take comma lists to sweep the search-time parameter on the same index instead.

    python benchmarks/bench_index.py [--json] [--dataset random|corpus] [--n 100000]
        [--types flat,hnsw,ivfpq] [--ef-search 128,512] [--nprobe 32,128] [--lake PATH]
        [--flat-max-rows 0]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("CRAWLAKE_REAL_DATA", REPO.parent / "shared" / "data"))


def unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


def random_dataset(n: int, dim: int, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return unit(rng.standard_normal((n, dim), dtype=np.float32)), unit(rng.standard_normal((n_queries, dim), dtype=np.float32))


def corpus_texts(max_docs: int) -> list[str]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    from pipelines.kernels.warc import parse_warc_file

    texts = []
    with open(DATA / "cc-main-2024-22-whirlwind.warc.wet.gz", "rb") as fh:
        for record in ArchiveIterator(fh, record_types=WarcRecordType.conversion):
            texts.append(record.reader.read().decode("utf-8", "replace"))
    # the WET file holds one page: add the other real pages and product descriptions
    for name in ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz"):
        texts += [r["text"] for r in parse_warc_file(str(DATA / name)).rows if r["kind"] == "document"]
    for name in ("dedupe-AbtBuy_Abt.csv", "dedupe-AbtBuy_Buy.csv"):
        with open(DATA / name, encoding="latin-1") as fh:
            texts += [row["description"] for row in csv.DictReader(fh) if row.get("description")]
    return [t for t in texts if t and t.strip()][:max_docs]


def corpus_vectors(lake: str | None, max_docs: int) -> tuple[np.ndarray, dict]:
    import pyarrow as pa

    if lake:
        from deltalake import DeltaTable

        table = DeltaTable(os.path.join(lake, "gold", "embeddings")).to_pyarrow_table(columns=["vector"])
        column = table.column("vector").combine_chunks()
        return np.asarray(column.flatten(), np.float32).reshape(len(column), -1), {"source": "lake"}
    from pipelines.config import EmbedConfig
    from pipelines.kernels.embed import EmbedParams, embed_batch

    texts = corpus_texts(max_docs)
    t0 = time.perf_counter()
    out = embed_batch(pa.RecordBatch.from_pydict({"doc_id": [str(i) for i in range(len(texts))], "text": texts}),
                      EmbedParams(EmbedConfig(device="cpu")))
    column = out.column("vector")
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    vectors = np.asarray(column.flatten(), np.float32).reshape(len(column), -1)
    return vectors, {"source": "embedded", "docs": len(texts), "embed_s": round(time.perf_counter() - t0, 2)}


def latencies_ms(index, queries: np.ndarray, k: int, params, threads: int | None) -> np.ndarray:
    import faiss

    from pipelines.kernels.index import search

    previous = faiss.omp_get_max_threads()
    if threads:
        faiss.omp_set_num_threads(threads)
    try:
        search(index, queries[:5], k, params)  # warm caches
        out = np.empty(len(queries))
        for i in range(len(queries)):
            t0 = time.perf_counter()
            search(index, queries[i:i + 1], k, params)
            out[i] = time.perf_counter() - t0
    finally:
        faiss.omp_set_num_threads(previous)
    return out * 1e3


def emit(row: dict, as_json: bool) -> None:
    """Print one result as soon as it is measured (a long sweep shows progress)."""
    if as_json:
        print(json.dumps(row), flush=True)
    else:
        setting = " ".join(f"{key}={row[key]}" for key in ("ef_search", "nprobe", "refine_k_factor") if key in row)
        print(f"{row['dataset']:>7} n={row['n']:<7} {row['index_type']:>6}->{row['built_type']:<6} "
              f"{setting:<32} {row['metric']:>14} {row['value']:>10} {row['unit']}", flush=True)


def int_list(text: str | None) -> list[int | None]:
    return [int(v) for v in text.split(",")] if text else [None]


def main() -> None:
    from pipelines.config import IndexConfig
    from pipelines.kernels.index import build_index, recall_at_k, search, tune_search

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dataset", choices=("random", "corpus"), default="random")
    parser.add_argument("--n", type=int, default=100_000, help="random: vectors indexed")
    parser.add_argument("--dim", type=int, default=384, help="random: dimensions")
    parser.add_argument("--queries", type=int, default=1000, help="random: queries (and latency samples)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lake", default=None, help="corpus: read PATH/gold/embeddings instead of embedding")
    parser.add_argument("--max-docs", type=int, default=300,
                        help="corpus: documents to embed (300 docs ~ 1,800 chunks: 1-3 min on 2 CPU cores)")
    parser.add_argument("--index-type", default=IndexConfig().type)
    parser.add_argument("--types", default=None, help="comma list, e.g. flat,hnsw,ivfpq (overrides --index-type)")
    parser.add_argument("--ef-search", default=None, help="HNSW ef_search, comma list to sweep")
    parser.add_argument("--nprobe", default=None, help="IVF nprobe, comma list to sweep")
    parser.add_argument("--refine-k-factor", default=None, help="IVF-PQ refine_k_factor, comma list to sweep")
    parser.add_argument("--target-recall", type=float, default=0.95,
                        help="tune ef_search/nprobe per index as the index stage does (0 = off; ignored when sweeping)")
    parser.add_argument("--flat-max-rows", type=int, default=IndexConfig().flat_max_rows,
                        help="index.flat_max_rows: at most this many vectors are built flat whatever the type "
                             "(0: always the type asked for)")
    parser.add_argument("--latency-threads", type=int, default=1, help="FAISS threads while timing queries; 0 = default")
    args = parser.parse_args()

    extra: dict = {}
    if args.dataset == "random":
        base, queries = random_dataset(args.n, args.dim, args.queries, args.seed)
    else:
        vectors, extra = corpus_vectors(args.lake, args.max_docs)
        rng = np.random.default_rng(args.seed)
        held_out = np.zeros(len(vectors), bool)
        held_out[rng.choice(len(vectors), max(1, len(vectors) // 10), replace=False)] = True
        base, queries = vectors[~held_out], vectors[held_out]
    n, dim = base.shape

    flat, _ = build_index(base, IndexConfig(type="flat"))
    _, exact = search(flat, queries, args.k)

    refine = int_list(args.refine_k_factor)
    # build with the largest factor asked for: 0 (no refine wrapper) only if that is all that was asked
    overrides = {"refine_k_factor": max(refine)} if refine != [None] else {}
    overrides["flat_max_rows"] = args.flat_max_rows
    common = {"benchmark": "index", "system": "crawlake", "dataset": args.dataset, "n": n, "dim": dim,
              "queries": len(queries), "k": args.k, "cpus": os.cpu_count(),
              "loadavg_1m": round(os.getloadavg()[0], 2), **extra}
    types = args.types.split(",") if args.types else [args.index_type]
    for kind in types:
        params = IndexConfig(type=kind, **overrides)
        t0 = time.perf_counter()
        index, built = build_index(base, params)
        build_s = time.perf_counter() - t0
        head = {**common, "index_type": kind, "built_type": built}
        emit({**head, "metric": "build_s", "value": round(build_s, 2), "unit": "s"}, args.json)
        sweeping = any(v is not None for v in (args.ef_search, args.nprobe, args.refine_k_factor))
        if args.target_recall > 0 and not sweeping and built != "flat":
            t0 = time.perf_counter()
            params, sample_recall = tune_search(index, base, params, args.target_recall, k=args.k)
            head["tuned_to"] = args.target_recall
            emit({**head, "metric": "tune_s", "value": round(time.perf_counter() - t0, 2), "unit": "s",
                  "sample_recall": round(sample_recall, 4)}, args.json)
            int_list_ef, int_list_np, refines = [params.ef_search], [params.nprobe], [params.refine_k_factor]
        else:
            int_list_ef, int_list_np, refines = int_list(args.ef_search), int_list(args.nprobe), refine
        if built == "hnsw":
            sweep = [{"ef_search": v} for v in int_list_ef]
        elif built == "ivfpq":
            sweep = [{"nprobe": v, "refine_k_factor": r} for v in int_list_np for r in refines]
        else:
            sweep = [{}]
        for change in sweep:
            p = params.model_copy(update={key: v for key, v in change.items() if v is not None})
            settings = {"ef_search": p.ef_search} if built == "hnsw" else \
                       {"nprobe": p.nprobe, "refine_k_factor": p.refine_k_factor, "nlist": index_nlist(index),
                        "pq_m": index_pq_m(index)} if built == "ivfpq" else {}
            _, ids = search(index, queries, args.k, p)
            lat = latencies_ms(index, queries, args.k, p, args.latency_threads or None)
            row = {**head, **settings}
            threads = {"latency_threads": args.latency_threads or "default"}
            emit({**row, "metric": f"recall_at_{args.k}", "value": round(recall_at_k(ids, exact, args.k), 4),
                  "unit": "ratio"}, args.json)
            emit({**row, "metric": "query_p50_ms", "value": round(float(np.percentile(lat, 50)), 3), "unit": "ms",
                  **threads}, args.json)
            emit({**row, "metric": "query_p99_ms", "value": round(float(np.percentile(lat, 99)), 3), "unit": "ms",
                  **threads}, args.json)


def index_nlist(index) -> int | None:
    import faiss

    base = faiss.downcast_index(index.base_index) if isinstance(index, faiss.IndexRefine) else index
    return int(base.nlist) if isinstance(base, faiss.IndexIVF) else None


def index_pq_m(index) -> int | None:
    import faiss

    base = faiss.downcast_index(index.base_index) if isinstance(index, faiss.IndexRefine) else index
    return int(base.pq.M) if isinstance(base, faiss.IndexIVFPQ) else None


if __name__ == "__main__":
    main()
