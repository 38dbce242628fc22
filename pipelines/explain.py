"""``crawlake explain <doc_id>``: why a document is (or is not) in the clean corpus.

Reads the provenance tables: ``bronze.documents`` (was it ingested), ``silver.duplicate_clusters``
(which cluster, which document was kept, the MinHash-estimated Jaccard similarity to it) and
``silver.filter_decisions`` (each filter's value, threshold and verdict), and
``silver.documents_clean`` (the outcome).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import functions as F

from pipelines.lake import Lake
from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_CLEAN, SILVER_DUPLICATE_CLUSTERS, SILVER_FILTER_DECISIONS


@dataclass
class Explanation:
    doc_id: str
    url: str | None = None
    ingested: bool = False
    in_clean: bool = False
    duplicate_of: list[dict] = field(default_factory=list)   # one per method that removed it
    decisions: list[dict] = field(default_factory=list)

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


def explain(lake: Lake, doc_id: str) -> Explanation:
    """Collect the provenance of ``doc_id`` (a handful of rows; tables read with a key filter)."""
    docs = lake.read(BRONZE_DOCUMENTS)
    row = docs.filter(F.col("doc_id") == doc_id).select("url").first()
    exp = Explanation(doc_id=doc_id, url=row.url if row else None, ingested=row is not None)
    if not exp.ingested:
        return exp
    clusters = lake.read(SILVER_DUPLICATE_CLUSTERS).filter((F.col("doc_id") == doc_id) & ~F.col("kept"))
    kept_urls = docs.select(F.col("doc_id").alias("cluster_id"), F.col("url").alias("kept_url"))
    exp.duplicate_of = [r.asDict() for r in clusters.join(kept_urls, "cluster_id", "left").collect()]
    exp.decisions = [r.asDict() for r in lake.read(SILVER_FILTER_DECISIONS).filter(F.col("doc_id") == doc_id)
                     .orderBy("filter").collect()]
    exp.in_clean = lake.read(SILVER_DOCUMENTS_CLEAN).filter(F.col("doc_id") == doc_id).limit(1).count() == 1
    return exp
