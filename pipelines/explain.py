"""``crawlake explain <doc_id>``: why a document is (or is not) in the clean corpus.

Reads the provenance tables: ``bronze.documents`` (was it ingested), ``bronze.quarantine`` (its
other copies, set aside at ingest as ``duplicate_record``), ``silver.duplicate_clusters`` (which
cluster, which document was kept, the MinHash-estimated Jaccard similarity to it),
``silver.filter_decisions`` (each filter's value, threshold and verdict) and
``silver.documents_clean`` (the outcome).

No Spark and no JVM: each table is read through :mod:`pipelines.lake.read` with a filter on the
document's key, which Delta's file statistics and Parquet's row-group statistics push down, so a
lookup reads a handful of rows and answers in about a second. The lake must be in path mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow.dataset as ds

from pipelines.lake import read as lake_read
from schemas.catalog import (
    BRONZE_DOCUMENTS,
    BRONZE_QUARANTINE,
    SILVER_DOCUMENTS_CLEAN,
    SILVER_DUPLICATE_CLUSTERS,
    SILVER_FILTER_DECISIONS,
)


@dataclass
class Explanation:
    doc_id: str
    url: str | None = None
    ingested: bool = False
    in_clean: bool = False
    duplicate_of: list[dict] = field(default_factory=list)   # one per method that removed it
    decisions: list[dict] = field(default_factory=list)
    copies: list[dict] = field(default_factory=list)          # its duplicate_record quarantine rows

    @property
    def verdict(self) -> str:
        if not self.ingested:
            return "not in bronze.documents (never ingested, or quarantined at ingest)"
        if self.in_clean:
            return "kept: in silver.documents_clean"
        if self.duplicate_of:
            d = self.duplicate_of[0]
            return (f"removed: {d['method']} duplicate of {d['cluster_id']} ({d.get('kept_url') or '?'})"
                    + _jaccard_text(d))
        failed = [d["filter"] for d in self.decisions if not d["passed"]]
        if failed:
            return "removed by filter(s): " + ", ".join(failed)
        return "not in silver.documents_clean (stages after ingest have not run on it yet)"

    def lines(self) -> list[str]:
        out = [f"{self.doc_id}  {self.url or ''}".rstrip(), f"  {self.verdict}"]
        for q in self.copies:
            out.append(f"  ingest: another copy at {q['source_file']} offset {q['record_offset']} "
                       f"quarantined as duplicate_record ({q.get('detail') or 'kept copy not recorded'})")
        for d in self.duplicate_of:
            out.append(f"  dedup: {d['method']} cluster {d['cluster_id']} of {d['cluster_size']}, kept {d['cluster_id']}"
                       + _jaccard_text(d))
        for d in self.decisions:
            mark = "pass" if d["passed"] else "FAIL"
            detail = f" [{d['detail']}]" if d.get("detail") else ""
            out.append(f"  filter {d['filter']}: {mark} value={d['value']:.4g} threshold={d['threshold']:.4g}{detail}")
        return out


def _jaccard_text(row: dict) -> str:
    """``", estimated Jaccard 0.87"``: the MinHash estimate to the kept document, if recorded."""
    j = row.get("jaccard")
    return "" if j is None else f", estimated Jaccard {j:.2f}"


def explain(lake: Any, doc_id: str) -> Explanation:
    """Collect the provenance of ``doc_id`` in ``lake``: a ``Config``, ``LakeConfig``, ``Lake`` or
    lake root (see :func:`pipelines.lake.read.lake_root`; ValueError for a catalog-mode lake).
    Tables the lake does not have yet count as empty."""
    def rows(spec, columns, where) -> list[dict]:
        return lake_read.read_rows(spec, lake, columns, where)

    key = ds.field("doc_id") == doc_id
    found = rows(BRONZE_DOCUMENTS, ["doc_id", "url", "warc_record_id"], key)
    exp = Explanation(doc_id=doc_id, url=found[0]["url"] if found else None, ingested=bool(found))
    if not exp.ingested:
        return exp
    record_ids = sorted({r["warc_record_id"] for r in found if r["warc_record_id"]})
    if record_ids:
        exp.copies = sorted(rows(BRONZE_QUARANTINE, ["source_file", "record_offset", "warc_record_id", "detail"],
                                 (ds.field("reason") == "duplicate_record") & ds.field("warc_record_id").isin(record_ids)),
                            key=lambda q: (q["source_file"], q["record_offset"]))
    clusters = rows(SILVER_DUPLICATE_CLUSTERS, None, key & ~ds.field("kept"))
    kept = sorted({c["cluster_id"] for c in clusters})
    kept_urls = {r["doc_id"]: r["url"] for r in rows(BRONZE_DOCUMENTS, ["doc_id", "url"], ds.field("doc_id").isin(kept))} \
        if kept else {}
    exp.duplicate_of = [{**c, "kept_url": kept_urls.get(c["cluster_id"])}
                        for c in sorted(clusters, key=lambda c: (c["method"], c["cluster_id"]))]
    exp.decisions = sorted(rows(SILVER_FILTER_DECISIONS, None, key), key=lambda d: d["filter"])
    exp.in_clean = bool(rows(SILVER_DOCUMENTS_CLEAN, ["doc_id"], key))
    return exp
