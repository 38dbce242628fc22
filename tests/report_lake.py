"""A small lake written without Spark (deltalake) whose report numbers are known by construction
(test-side code for the JVM-free tests of ``crawlake report``, ``lineage`` and the CLI).

40 documents ``d00``..``d39``; ``d{i}`` has ``i + 5`` words. Dedup: ``d30``..``d34`` are exact
copies of ``d29`` (a cluster of 6), ``d35``, ``d36`` near copies of ``d28`` (Jaccard 0.9, 0.85),
so 33 documents are deduplicated. The filter ran ``http_status_2xx``, ``language``,
``gopher_min_doc_words`` (threshold 10 words), ``c4_lines_removed`` (informational) and
``fineweb_line_punct_ratio`` (threshold 0.12) on them, in that order: ``d00``, ``d01`` fail
HTTP (and words), ``d02`` fails language (and words), ``d03``, ``d04`` fail words, ``d05``,
``d06`` fail punctuation: 26 clean. Even documents are English, odd ones French.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from schemas import catalog as c

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
DOCS = [f"d{i:02d}" for i in range(40)]
EXACT = {f"d{i}": "d29" for i in range(30, 35)}
NEAR = {"d35": ("d28", 0.9), "d36": ("d28", 0.85)}
DEDUP = [d for d in DOCS if d not in EXACT and d not in NEAR]
STEPS = ["http_status_2xx", "language", "gopher_min_doc_words", "c4_lines_removed", "fineweb_line_punct_ratio"]
FUNNEL = {"filter input": 33, "http_status_2xx": 31, "language": 30, "gopher_min_doc_words": 28,
          "c4_lines_removed": 28, "fineweb_line_punct_ratio": 26}


def words(doc: str) -> int:
    return int(doc[1:]) + 5


def text(doc: str) -> str:
    return " ".join(f"w{doc}x{k}" for k in range(words(doc)))


def url(doc: str) -> str:
    return f"https://example.org/{doc}"


def _write(root: Path, spec: c.TableSpec, rows: list[dict], mode: str = "append") -> None:
    table = pa.Table.from_pylist(rows, schema=spec.nullable_arrow)
    write_deltalake(spec.path_under(str(root)), table, mode=mode)


def _document(doc: str) -> dict:
    return {"doc_id": doc, "url": url(doc), "host": "example.org", "crawl_date": T0, "warc_record_id": f"<urn:{doc}>",
            "warc_type": "response", "http_status": 404 if doc in ("d00", "d01") else 200, "content_type": "text/html",
            "text": text(doc), "text_length": len(text(doc)), "payload_bytes": 100, "source_file": "/data/x.warc.gz",
            "warc_filename": "x.warc.gz", "record_offset": int(doc[1:]) * 10}


def _decisions(doc: str) -> list[dict]:
    lang = "en" if int(doc[1:]) % 2 == 0 else "fr"
    status = 404 if doc in ("d00", "d01") else 200
    score = 0.3 if doc == "d02" else 0.95
    punct = 0.05 if doc in ("d05", "d06") else 0.5
    rows = [("http_status_2xx", float(status), 200.0, status == 200, str(status)),
            ("language", score, 0.65, score >= 0.65, lang),
            ("gopher_min_doc_words", float(words(doc)), 10.0, words(doc) >= 10, lang),
            ("c4_lines_removed", 0.0, float("inf"), True, lang),
            ("fineweb_line_punct_ratio", punct, 0.12, punct >= 0.12, lang)]
    return [{"doc_id": doc, "filter": f, "value": v, "threshold": t, "passed": p, "detail": d} for f, v, t, p, d in rows]


def clean_docs() -> list[str]:
    failed = {"d00", "d01", "d02", "d03", "d04", "d05", "d06"}
    return [d for d in DEDUP if d not in failed]


def build(root: Path, *, partial: bool = False) -> Path:
    """Write the lake under ``root``; ``partial``: bronze.documents and ops.runs only (an ingest run)."""
    _write(root, c.BRONZE_DOCUMENTS, [_document(d) for d in DOCS])
    runs = [{"run_id": "r1", "stage": "ingest", "started_at": T0, "duration_s": 4.0, "status": "succeeded",
             "rows_in": 60, "rows_out": 40, "rows_quarantined": 3, "input_versions": [],
             "output_versions": [("bronze.documents", 0)], "config_hash": "h", "code_version": "test",
             "writers": [("bronze.documents", "deltalake")]}]
    if partial:
        _write(root, c.OPS_RUNS, runs)
        return root
    _write(root, c.BRONZE_QUARANTINE, [{"source_file": "/data/x.warc.gz", "record_offset": 1000 + i,
                                        "reason": "non_html_payload", "detail": "image/gif"} for i in range(3)])
    _write(root, c.SILVER_DOCUMENTS_DEDUP, [_document(d) for d in DEDUP])
    clusters = [{"doc_id": "d29", "cluster_id": "d29", "cluster_size": 6, "kept": True, "method": "exact", "jaccard": 1.0}]
    clusters += [{"doc_id": d, "cluster_id": k, "cluster_size": 6, "kept": False, "method": "exact", "jaccard": 1.0}
                 for d, k in EXACT.items()]
    clusters += [{"doc_id": "d28", "cluster_id": "d28", "cluster_size": 3, "kept": True, "method": "near", "jaccard": 1.0}]
    clusters += [{"doc_id": d, "cluster_id": k, "cluster_size": 3, "kept": False, "method": "near", "jaccard": j}
                 for d, (k, j) in NEAR.items()]
    _write(root, c.SILVER_DUPLICATE_CLUSTERS, clusters)
    _write(root, c.SILVER_FILTER_DECISIONS, [row for d in DEDUP for row in _decisions(d)])
    _write(root, c.SILVER_DOCUMENTS_CLEAN, [{**_document(d), "language": "en", "language_score": 0.95}
                                            for d in clean_docs()])
    tokens = [{"doc_id": d, "num_tokens": 2 * words(d), "seq_id": "00000-00000000", "offset": 0, "tokenizer": "t"}
              for d in clean_docs()]
    _write(root, c.GOLD_DOCUMENT_TOKENS, tokens)
    _write(root, c.GOLD_TOKEN_SEQUENCES, [
        {"seq_id": f"00000-{i:08d}", "pack_group": 0, "seq_index": i, "input_ids": [1] * 17, "num_tokens": n,
         "doc_boundaries": [0], "doc_ids": ["d10"], "doc_num_tokens": [n], "tokenizer": "t"}
        for i, n in enumerate((17, 17, 9))])
    for n, (stage, inputs, outputs) in enumerate((
            ("dedup", [("bronze.documents", 0)], [("silver.documents_dedup", 0), ("silver.duplicate_clusters", 0)]),
            ("filter", [("silver.documents_dedup", 0)], [("silver.documents_clean", 0), ("silver.filter_decisions", 0)]),
            ("tokenize", [("silver.documents_clean", 0)], [("gold.token_sequences", 0), ("gold.document_tokens", 0)]))):
        runs.append({**runs[0], "stage": stage, "started_at": T0 + timedelta(seconds=10 * (n + 1)), "duration_s": 2.0 + n,
                     "rows_in": 40, "rows_out": 33, "rows_quarantined": 0, "input_versions": inputs,
                     "output_versions": outputs, "writers": []})
    runs += [{**r, "run_id": "r2", "started_at": r["started_at"] + timedelta(hours=1), "duration_s": r["duration_s"] / 2}
             for r in runs]
    _write(root, c.OPS_RUNS, runs)
    _write(root, c.OPS_QUALITY, [
        {"run_id": "r2", "stage": "filter", "table_name": "silver.documents_clean", "suite": "silver_documents_clean",
         "expectation": e, "column": "doc_id", "success": ok, "observed": None, "checked_at": T0}
        for e, ok in (("not_null", True), ("unique", True), ("between", False))])
    day_rows = []
    for day, (n, k) in enumerate(((100, 10), (50, 20))):
        day_rows += [{"row_key": f"k{day}-{i}", "source_file": f"day_{day}", "line_number": i + 1, "day": day,
                      "ingest_time": T0, "label": int(i < k)} for i in range(n)]
    _write(root, c.BRONZE_CLICKS, day_rows)
    _write(root, c.BRONZE_CLICKS_QUARANTINE, [
        {"row_key": f"q{i}", "source_file": "day_0", "line_number": 500 + i, "day": 0, "raw_line": "x",
         "reason": "bad_label" if i < 2 else "wrong_field_count", "detail": None, "ingest_time": T0} for i in range(5)])
    _write(root, c.SILVER_CLICK_VOCAB, [{"column": f"C{col}", "value": f"{v:08x}", "id": v + 2, "count": 3}
                                        for col in (1, 2, 10) for v in range(col)])
    return root
