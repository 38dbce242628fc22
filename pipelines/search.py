"""Semantic search over the index shards (no Spark, no JVM): embed the query with the model the
index was built from, search every segment of every shard of ``gold.index_manifest``, merge the
top k.

``Searcher(cfg).search("query text", k=10)`` returns :class:`Hit` rows, best first; the CLI's
``crawlake search`` prints the same. Reads the manifest, the shards and ``silver.documents_clean``
through :mod:`pipelines.lake.read` (``deltalake`` + ``pyarrow``, nothing left running at exit), so
the lake must be in path mode (a folder or an object-store URL). Importing this module imports no
stage and no pyspark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.dataset as ds

from pipelines.config import Config
from pipelines.kernels.embed import EmbedParams, encode_chunks
from pipelines.kernels.index import merge_topk, search as search_index
from pipelines.lake import read as lake
from schemas.catalog import GOLD_INDEX_MANIFEST, SILVER_DOCUMENTS_CLEAN

SNIPPET_CHARS = 200


@dataclass(frozen=True)
class Hit:
    doc_id: str
    score: float          # cosine similarity of the query and the best chunk, in [-1, 1]
    url: str | None
    snippet: str          # the start of the best chunk's text, at most SNIPPET_CHARS characters
    chunk_id: int
    char_start: int
    char_end: int
    shard: int


class Searcher:
    """Loads the shards (each segment of each) of the configured model revision once; :meth:`search`
    is then cheap.

    Raises FileNotFoundError when the lake has no index for that model revision (run the
    ``index`` stage) and ValueError for a catalog-mode lake.
    """

    def __init__(self, cfg: Config):
        import faiss

        root = lake.lake_root(cfg)   # ValueError for a catalog-mode lake
        self.cfg = cfg
        self.embed = EmbedParams.resolve(cfg.embed)
        manifest_uri = GOLD_INDEX_MANIFEST.path_under(root)
        self.clean_uri = SILVER_DOCUMENTS_CLEAN.path_under(root)
        rows = []
        if lake.exists(manifest_uri):
            rows = lake.read(manifest_uri, filter=(ds.field("model") == self.embed.model_label)
                             & (ds.field("model_revision") == self.embed.model_revision)).to_pylist()
        if not rows:
            raise FileNotFoundError(
                f"no index for {self.embed.model_label} revision {self.embed.model_revision} in {root}: run the index stage")
        self.shards = []
        for row in sorted(rows, key=lambda r: (r["shard"], r.get("segment") or 0)):   # each segment of each shard
            path = lake.under_root(root, row["path"])
            index = faiss.deserialize_index(np.frombuffer(lake.read_bytes(path), np.uint8))
            ids = lake.read_parquet(path + ".ids.parquet")
            # the search settings tuned for this shard when it was built
            params = cfg.index.model_copy(update={k: row[k] for k in ("ef_search", "nprobe", "refine_k_factor")})
            self.shards.append((row["shard"], index, ids, params))

    def search(self, query: str | list[str], k: int = 10, *, per_document: bool = True) -> list[Hit] | list[list[Hit]]:
        """Top ``k`` hits for ``query`` (a list of queries gives a list of hit lists).

        ``per_document``: one hit per document (its best chunk); otherwise chunks. Raises
        ValueError for k < 1 or an empty query.
        """
        queries = [query] if isinstance(query, str) else list(query)
        if k < 1 or not queries or not all(q.strip() for q in queries):
            raise ValueError("search needs k >= 1 and non-empty query text")
        vectors = encode_chunks(queries, self.embed)
        # Ask each shard for more chunks than k, so k distinct documents survive the collapse.
        k_chunks = k * 4 if per_document else k
        scores, ids = [], []
        for _, index, _, params in self.shards:
            s, i = search_index(index, vectors, min(k_chunks, max(index.ntotal, 1)), params)
            scores.append(s)
            ids.append(i)
        top_s, top_shard, top_id = merge_topk(scores, ids, k_chunks)
        results = [self._hits(top_s[q], top_shard[q], top_id[q], k, per_document) for q in range(len(queries))]
        return results[0] if isinstance(query, str) else results

    def _hits(self, scores, shards, ids, k, per_document) -> list[Hit]:
        picked, seen = [], set()
        for score, s, i in zip(scores, shards, ids):
            if i < 0:
                continue
            shard, _, row_map, _ = self.shards[s]
            row = {c: row_map.column(c)[int(i)].as_py() for c in row_map.column_names}
            if per_document and row["doc_id"] in seen:
                continue
            seen.add(row["doc_id"])
            picked.append((float(score), shard, row))
            if len(picked) == k:
                break
        docs = self._documents([r["doc_id"] for _, _, r in picked])
        hits = []
        for score, shard, r in picked:
            url, text = docs.get(r["doc_id"], (None, ""))
            snippet = " ".join(text[r["char_start"]:r["char_end"]].split())[:SNIPPET_CHARS]
            hits.append(Hit(r["doc_id"], score, url, snippet, r["chunk_id"], r["char_start"], r["char_end"], shard))
        return hits

    def _documents(self, doc_ids: list[str]) -> dict[str, tuple[str | None, str]]:
        if not doc_ids:
            return {}
        table = lake.read(self.clean_uri, ["doc_id", "url", "text"], ds.field("doc_id").isin(doc_ids))
        return {d: (u, t or "") for d, u, t in zip(*(table.column(c).to_pylist() for c in ("doc_id", "url", "text")))}


def search(cfg: Config, query: str, k: int = 10) -> list[Hit]:
    """One query against the lake of ``cfg`` (loads the shards each call; keep a :class:`Searcher`
    for many)."""
    return Searcher(cfg).search(query, k)
