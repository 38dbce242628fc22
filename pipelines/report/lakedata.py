"""What the report shows, read from a path-mode lake without Spark or a JVM.

Every read goes through :mod:`pipelines.lake.read`. Tables are never collected whole: each is
read for the few columns a figure needs, large ones (``bronze.documents``' text,
``silver.filter_decisions``) batch by batch into running aggregates, and examples are a seeded
sample. What is held per document is a 32-character id and a few integers (words, the first
failed filter), about 50 bytes a document. Row counts, sizes and versions come from the Delta
log alone. A table the lake does not have yet leaves its part of :class:`LakeData` empty (None).

Definitions the figures use:

* *words*: whitespace-separated tokens of a document's text as ingested;
* *filter steps*: the ``filter`` names of ``silver.filter_decisions`` in the order the filter
  stage ran them (recovered from the rows: a document's decision rows are written in step order);
  a document is removed at the first step it failed;
* *sequence fill*: ``num_tokens / len(input_ids)`` of a ``gold.token_sequences`` row (the rest is
  padding).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pyarrow.parquet as pq

from pipelines.lake import read as lake_read
from schemas.catalog import (
    ALL_TABLES,
    BRONZE_CLICKS,
    BRONZE_CLICKS_QUARANTINE,
    BRONZE_DOCUMENTS,
    GOLD_DOCUMENT_TOKENS,
    GOLD_TOKEN_SEQUENCES,
    OPS_QUALITY,
    OPS_RUNS,
    SILVER_CLICK_VOCAB,
    SILVER_DOCUMENTS_CLEAN,
    SILVER_DOCUMENTS_DEDUP,
    SILVER_DUPLICATE_CLUSTERS,
    SILVER_FILTER_DECISIONS,
    TableSpec,
)

#: Rows per batch when a table is streamed; fewer for text (a batch's words are split in memory).
BATCH_ROWS = 65_536
TEXT_BATCH_ROWS = 8_192
#: Languages the per-language funnel shows.
TOP_LANGUAGES = 5
#: Rules whose measured values are drawn against their threshold.
VALUE_RULES = 3
#: Removed documents in the "why was this removed" box; characters of text shown for each.
SAMPLE_REMOVED = 20
SNIPPET_CHARS = 240
#: Runs the run history shows (the latest).
MAX_RUNS = 60
#: Bins of a histogram.
BINS = 40


@dataclass
class TableInfo:
    """One table of the catalog as the Delta log has it (``exists`` False: not in this lake)."""
    name: str
    exists: bool
    version: int | None = None
    rows: int | None = None
    files: int | None = None
    bytes: int | None = None
    modified: datetime | None = None


@dataclass
class LakeData:
    """The report's numbers; each part None where its tables are missing. Frames are small
    (aggregates, at most a few hundred rows)."""
    root: str
    tables: list[TableInfo] = field(default_factory=list)
    #: step, documents, words (ingested, deduplicated, filter input, each filter step, clean)
    funnel: pd.DataFrame | None = None
    not_yet_filtered: int = 0
    #: language, step, order, documents, share (of the language's filter input)
    funnel_languages: pd.DataFrame | None = None
    #: filter, order, rows, failed, removed (first failure), threshold_min, threshold_max, median_value
    rules: pd.DataFrame | None = None
    #: filter -> {"bins": DataFrame(start, end, passed, documents), "threshold": float}
    rule_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: method, documents removed
    dedup_removed: pd.DataFrame | None = None
    #: method, size, clusters
    cluster_sizes: pd.DataFrame | None = None
    #: start, end, method, documents (estimated Jaccard of removed documents to their kept one)
    jaccard: pd.DataFrame | None = None
    #: cluster_id, method, size, kept_url
    largest_clusters: pd.DataFrame | None = None
    #: start, end, table, documents (characters per document, log bins)
    doc_lengths: pd.DataFrame | None = None
    #: start, end, documents (tokens per document, log bins)
    doc_tokens: pd.DataFrame | None = None
    #: start, end, sequences (fill fraction)
    seq_fill: pd.DataFrame | None = None
    seq_stats: dict[str, float] = field(default_factory=dict)
    #: rows, quarantined, days, positives
    clicks: dict[str, int] | None = None
    #: reason, lines
    clicks_quarantine: pd.DataFrame | None = None
    #: day, impressions, clicks, ctr
    clicks_days: pd.DataFrame | None = None
    #: column, values
    click_vocab: pd.DataFrame | None = None
    #: run_id, run_started, stage, status, seconds, rows_in, rows_out, rows_per_s
    runs: pd.DataFrame | None = None
    #: table, stage, run_id, checked_at, passed, failed (latest validation of each table)
    quality: pd.DataFrame | None = None
    #: table, expectation, column, observed (failed expectations of those validations)
    quality_failures: pd.DataFrame | None = None
    #: doc_id, url, removed_by, reason, snippet
    removed_sample: list[dict[str, Any]] = field(default_factory=list)

    @property
    def any_table(self) -> bool:
        return any(t.exists for t in self.tables)


# -- reading ----------------------------------------------------------------------------------------

class LakeReader:
    """The tables of a path-mode lake at ``root``, each opened once (its version at first use)."""

    def __init__(self, root: str):
        self.root = lake_read.lake_root(root)
        self._open: dict[str, Any] = {}

    def table(self, spec: TableSpec):
        """The ``deltalake.DeltaTable`` of ``spec``, or None when the lake has no such table."""
        if spec.qualified_name not in self._open:
            uri = lake_read.table_uri(spec, self.root)
            self._open[spec.qualified_name] = lake_read.open_table(uri) if lake_read.exists(uri) else None
        return self._open[spec.qualified_name]

    def info(self, spec: TableSpec) -> TableInfo:
        dt = self.table(spec)
        if dt is None:
            return TableInfo(spec.qualified_name, False)
        actions = pa.table(dt.get_add_actions(flatten=True))
        records = actions.column("num_records") if "num_records" in actions.column_names else None
        rows = None if records is None or records.null_count else int(pc.sum(records).as_py() or 0)
        if rows is None:   # a log without statistics: count a key column
            rows = self.read(spec, [spec.keys[0]]).num_rows
        history = dt.history(1)
        stamp = history[0].get("timestamp") if history else None
        return TableInfo(spec.qualified_name, True, dt.version(), rows, actions.num_rows,
                         int(pc.sum(actions.column("size_bytes")).as_py() or 0),
                         datetime.fromtimestamp(stamp / 1000, timezone.utc) if stamp else None)

    def read(self, spec: TableSpec, columns: Sequence[str], filter: Any = None) -> pa.Table:
        """Columns of ``spec``'s table matching ``filter``; the table must exist."""
        return lake_read.read(self.table(spec), columns, filter)

    def batches(self, spec: TableSpec, columns: Sequence[str], filter: Any = None, *,
                rows: int = BATCH_ROWS) -> Iterator[pa.Table]:
        """The table's rows in batches of at most ``rows``, ``columns`` only."""
        dt = self.table(spec)
        if lake_read.native_filesystem(dt.table_uri) is None:
            # no native filesystem: read() copies each file into Arrow memory on this thread
            for batch in lake_read.read(dt, columns, filter).to_batches(rows):
                yield pa.Table.from_batches([batch])
            return
        data = lake_read.dataset(dt)
        expr = filter if filter is None or isinstance(filter, pds.Expression) else pq.filters_to_expression(filter)
        for batch in data.to_batches(columns=list(columns), filter=expr, batch_size=rows):
            if batch.num_rows:
                yield pa.Table.from_batches([batch])

    def first_row(self, spec: TableSpec, columns: Sequence[str]) -> dict | None:
        """One row of the table (its first data file's first row group), or None if it is empty."""
        dt = self.table(spec)
        files = lake_read.data_files(dt)
        if not files.paths:
            return None
        if files.native:
            group = pq.ParquetFile(files.filesystem.open_input_file(files.paths[0])).read_row_group(0, columns=list(columns))
        else:
            group = lake_read.read_parquet(files.uris[0], columns)
        return group.slice(0, 1).to_pylist()[0] if group.num_rows else None


# -- small helpers ----------------------------------------------------------------------------------

def histogram(values: np.ndarray, *, log: bool = False, bins: int = BINS, lo: float | None = None,
              hi: float | None = None) -> pd.DataFrame:
    """``start, end, count`` of ``values`` in ``bins`` equal bins (geometric with ``log``; values
    below 1 then go to the first bin) over ``[lo, hi]`` (default the values' range; values outside
    go to the edge bins)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return pd.DataFrame({"start": [], "end": [], "count": []})
    lo = float(values.min()) if lo is None else lo
    hi = float(values.max()) if hi is None else hi
    if log:
        lo = max(lo, 1.0)
        hi = max(hi, lo * 1.0001)
        edges = np.geomspace(lo, hi, bins + 1)
    else:
        if hi <= lo:
            hi = lo + (abs(lo) * 0.01 or 1.0)
        edges = np.linspace(lo, hi, bins + 1)
    counts, _ = np.histogram(np.clip(values, edges[0], edges[-1]), edges)
    return pd.DataFrame({"start": edges[:-1], "end": edges[1:], "count": counts.astype(np.int64)})


#: Cluster sizes above 10 are counted in these ranges (lower bounds).
SIZE_BUCKETS = (11, 21, 51, 101, 1001)


def size_bucket(n: int) -> str:
    """``"2"`` … ``"10"``, then ``"11–20"``, ``"21–50"``, ``"51–100"``, ``"101–1000"``, ``">1000"``."""
    if n <= 10:
        return str(n)
    for lo, hi in zip(SIZE_BUCKETS, SIZE_BUCKETS[1:]):
        if n < hi:
            return f"{lo}–{hi - 1}"
    return f">{SIZE_BUCKETS[-1] - 1}"


def _concat(pieces: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def step_order(first_seen: list[str], pairs: set[tuple[str, str]]) -> list[str]:
    """The filter steps in run order: a topological order of the ``(before, after)`` pairs seen
    in documents' consecutive decision rows, ties (and cycles) broken by first appearance."""
    rank = {name: i for i, name in enumerate(first_seen)}
    preds: dict[str, set[str]] = {n: set() for n in first_seen}
    for a, b in pairs:
        if a != b and a in preds and b in preds:
            preds[b].add(a)
    out: list[str] = []
    left = set(first_seen)
    while left:
        ready = [n for n in left if not (preds[n] & left)] or [min(left, key=rank.get)]
        nxt = min(ready, key=rank.get)
        out.append(nxt)
        left.remove(nxt)
    return out


# -- the collection ---------------------------------------------------------------------------------

def collect(root: str, *, seed: int = 0) -> LakeData:
    """Everything the report shows about the lake at ``root`` (a path or URL of a path-mode lake;
    ValueError for a catalog-mode lake, see :func:`pipelines.lake.read.lake_root`). ``seed``
    picks the sampled removed documents."""
    reader = LakeReader(root)
    data = LakeData(root=reader.root, tables=[reader.info(spec) for spec in ALL_TABLES])
    present = {t.name for t in data.tables if t.exists}
    rng = np.random.default_rng(seed)

    dedup = _dedup(reader, data) if SILVER_DUPLICATE_CLUSTERS.qualified_name in present else None
    decisions = _decisions(reader, data) if SILVER_FILTER_DECISIONS.qualified_name in present else None
    sample = _choose_removed(dedup, decisions, rng)
    wanted = {s["doc_id"] for s in sample} | {s["kept_id"] for s in sample if s.get("kept_id")}
    if data.largest_clusters is not None:
        wanted |= set(data.largest_clusters["cluster_id"])
    docs = _documents(reader, data, wanted) if BRONZE_DOCUMENTS.qualified_name in present else None

    _funnel(reader, data, docs, dedup, decisions, present)
    _finish_sample(data, sample, docs)
    if data.largest_clusters is not None and docs is not None:
        data.largest_clusters["kept_url"] = [docs["found"].get(c, {}).get("url") for c in data.largest_clusters["cluster_id"]]
    if SILVER_DOCUMENTS_CLEAN.qualified_name in present:
        clean = pc.drop_null(reader.read(SILVER_DOCUMENTS_CLEAN, ["text_length"]).column("text_length")).to_numpy()
        lengths = [data.doc_lengths] if data.doc_lengths is not None else []
        hi = max([float(clean.max()) if clean.size else 1.0] + [float(d["end"].max()) for d in lengths if len(d)])
        lo = min([float(clean.min()) if clean.size else hi] + [float(d["start"].min()) for d in lengths if len(d)])
        bins = histogram(clean, log=True, lo=lo, hi=hi).assign(table="silver.documents_clean")
        if docs is not None:   # the same bins for both
            bronze = histogram(docs["lengths"], log=True, lo=lo, hi=hi).assign(table="bronze.documents")
            bins = pd.concat([bronze, bins], ignore_index=True)
        data.doc_lengths = bins.rename(columns={"count": "documents"})
    if GOLD_DOCUMENT_TOKENS.qualified_name in present:
        tokens = reader.read(GOLD_DOCUMENT_TOKENS, ["num_tokens"]).column("num_tokens").to_numpy(zero_copy_only=False)
        data.doc_tokens = histogram(tokens, log=True).rename(columns={"count": "documents"})
        data.seq_stats["documents"] = int(tokens.size)
        data.seq_stats["mean_doc_tokens"] = float(tokens.mean()) if tokens.size else 0.0
    if GOLD_TOKEN_SEQUENCES.qualified_name in present:
        _sequences(reader, data)
    if BRONZE_CLICKS.qualified_name in present or BRONZE_CLICKS_QUARANTINE.qualified_name in present:
        _clicks(reader, data, present)
    if OPS_RUNS.qualified_name in present:
        _runs(reader, data)
    if OPS_QUALITY.qualified_name in present:
        _quality(reader, data)
    return data


def _dedup(reader: LakeReader, data: LakeData) -> pa.Table:
    """Cluster figures; returns the removed documents (doc_id, cluster_id, method, jaccard)."""
    rows = reader.read(SILVER_DUPLICATE_CLUSTERS, ["doc_id", "cluster_id", "cluster_size", "kept", "method", "jaccard"])
    removed = rows.filter(pc.invert(rows.column("kept"))).select(["doc_id", "cluster_id", "method", "jaccard"])
    by_method = removed.group_by("method").aggregate([("doc_id", "count")]).to_pandas()
    data.dedup_removed = (pd.DataFrame({"method": ["exact", "near"]})
                          .merge(by_method.rename(columns={"doc_id_count": "documents"}), how="left", on="method")
                          .fillna({"documents": 0}).astype({"documents": "int64"}))
    kept = rows.filter(rows.column("kept"))
    sizes = kept.group_by(["method", "cluster_size"]).aggregate([("cluster_id", "count")]).to_pandas()
    sizes["size"] = [size_bucket(n) for n in sizes["cluster_size"]]
    sizes["lowest"] = sizes["cluster_size"]
    data.cluster_sizes = (sizes.groupby(["method", "size"], as_index=False)
                          .agg(clusters=("cluster_id_count", "sum"), lowest=("lowest", "min"))
                          .sort_values(["lowest", "method"]).drop(columns="lowest").reset_index(drop=True))
    jac = removed.column("jaccard").to_numpy(zero_copy_only=False)
    methods = removed.column("method").to_numpy(zero_copy_only=False)
    frames = []
    finite = jac[~pd.isna(jac)].astype(float) if jac.size else np.array([])
    lo = min(float(finite.min()), 0.9) if finite.size else 0.5
    for method in ("near", "exact"):
        values = jac[(methods == method) & ~pd.isna(jac)].astype(float) if jac.size else np.array([])
        if values.size:
            frames.append(histogram(values, lo=lo, hi=1.0, bins=25).assign(method=method))
    data.jaccard = (pd.concat(frames, ignore_index=True).rename(columns={"count": "documents"})
                    if frames else None)
    top = kept.sort_by([("cluster_size", "descending"), ("cluster_id", "ascending")]).slice(0, 10)
    data.largest_clusters = pd.DataFrame({"cluster_id": top.column("cluster_id").to_pylist(),
                                          "method": top.column("method").to_pylist(),
                                          "size": top.column("cluster_size").to_pylist(),
                                          "kept_url": [None] * top.num_rows})
    return removed


def _decisions(reader: LakeReader, data: LakeData) -> dict[str, Any]:
    """One pass over ``silver.filter_decisions``: the step order, per-filter counts, the failed
    rows and each document's language. Then the value distributions of the top failing rules."""
    first_seen: list[str] = []
    pairs: set[tuple[str, str]] = set()
    counts: dict[str, np.ndarray] = {}     # filter -> [rows, failed]
    thresholds: dict[str, list[float]] = {}  # filter -> [min, max] of finite thresholds
    failed_parts: list[pa.Table] = []
    language_parts: list[pa.Table] = []
    columns = ["doc_id", "filter", "value", "threshold", "passed", "detail"]
    for t in reader.batches(SILVER_FILTER_DECISIONS, columns):
        filters = t.column("filter").combine_chunks().dictionary_encode()
        names = filters.dictionary.to_pylist()
        idx = filters.indices.to_numpy()
        docs = t.column("doc_id").combine_chunks().dictionary_encode().indices.to_numpy()
        _, firsts = np.unique(idx, return_index=True)
        for i in np.sort(firsts):   # names in order of first appearance
            if names[idx[i]] not in counts:
                first_seen.append(names[idx[i]])
                counts[names[idx[i]]] = np.zeros(2, dtype=np.int64)
        same = docs[:-1] == docs[1:]
        if same.any():
            for a, b in np.unique(np.stack([idx[:-1][same], idx[1:][same]], axis=1), axis=0):
                pairs.add((names[a], names[b]))
        failed = pc.invert(t.column("passed"))
        grouped = (t.append_column("failed", pc.cast(failed, pa.int64()))
                   .group_by("filter").aggregate([("failed", "count"), ("failed", "sum")]))
        for f, n, k in zip(*(grouped.column(c).to_pylist() for c in ("filter", "failed_count", "failed_sum"))):
            counts[f] += (n, k or 0)
        finite = t.filter(pc.is_finite(t.column("threshold")))
        if finite.num_rows:
            for f, lo, hi in zip(*(finite.group_by("filter").aggregate([("threshold", "min"), ("threshold", "max")])
                                   .column(c).to_pylist() for c in ("filter", "threshold_min", "threshold_max"))):
                have = thresholds.setdefault(f, [lo, hi])
                have[0], have[1] = min(have[0], lo), max(have[1], hi)
        failed_parts.append(t.filter(failed).select(["doc_id", "filter", "value", "threshold", "detail"]))
        language_parts.append(t.filter(pc.equal(t.column("filter"), "language")).select(["doc_id", "detail"]))
    order = step_order(first_seen, pairs)
    rank = {name: i for i, name in enumerate(order)}
    schema = SILVER_FILTER_DECISIONS.arrow
    failed = _concat(failed_parts, pa.schema([schema.field(c) for c in ("doc_id", "filter", "value", "threshold", "detail")]))
    failed = failed.append_column("rank", pc.index_in(failed.column("filter"), value_set=pa.array(order, pa.string())))
    first = failed.group_by("doc_id").aggregate([("rank", "min")]).rename_columns(["doc_id", "rank"])
    languages = _concat(language_parts, pa.schema([schema.field("doc_id"), schema.field("detail")])) \
        .rename_columns(["doc_id", "language"])
    removed_at = np.bincount(first.column("rank").to_numpy(), minlength=len(order)) if first.num_rows else \
        np.zeros(len(order), dtype=np.int64)
    medians = {}
    rules = pd.DataFrame({
        "filter": order, "order": range(len(order)),
        "rows": [int(counts[f][0]) for f in order], "failed": [int(counts[f][1]) for f in order],
        "removed": [int(removed_at[rank[f]]) for f in order],
        "threshold_min": [thresholds.get(f, [math.nan])[0] for f in order],
        "threshold_max": [thresholds.get(f, [math.nan, math.nan])[1] for f in order]})
    candidates = rules[(rules["failed"] > 0) & rules["threshold_min"].notna()].sort_values(
        ["failed", "order"], ascending=[False, True])
    chosen = list(candidates["filter"][:VALUE_RULES])
    if chosen:
        values: dict[str, list[pa.Table]] = {f: [] for f in chosen}
        for t in reader.batches(SILVER_FILTER_DECISIONS, ["filter", "value", "passed"],
                                pds.field("filter").isin(chosen)):
            for f in chosen:
                values[f].append(t.filter(pc.equal(t.column("filter"), f)).select(["value", "passed"]))
        for f in chosen:
            part = pa.concat_tables(values[f])
            v = pc.fill_null(part.column("value"), math.nan).to_numpy(zero_copy_only=False).astype(float)
            ok = part.column("passed").to_numpy(zero_copy_only=False).astype(bool)
            threshold = float(thresholds[f][0])
            finite = v[np.isfinite(v)]
            if not finite.size:
                continue
            lo, hi = np.quantile(finite, [0.005, 0.995])
            lo, hi = min(lo, threshold), max(hi, threshold)
            edges = histogram(finite, lo=lo, hi=hi)[["start", "end"]]
            frames = []
            for label, mask in (("passed", ok), ("failed", ~ok)):
                h = histogram(v[mask], lo=lo, hi=hi)
                frames.append(edges.assign(outcome=label, documents=h["count"] if len(h) else 0))
            data.rule_values[f] = {"bins": pd.concat(frames, ignore_index=True), "threshold": threshold,
                                   "threshold_max": float(thresholds[f][1])}
            medians[f] = float(np.median(finite))
    rules["median_value"] = [medians.get(f, math.nan) for f in order]
    data.rules = rules
    return {"order": order, "failed": failed, "first": first, "languages": languages}


def _choose_removed(dedup: pa.Table | None, decisions: dict | None, rng: np.random.Generator) -> list[dict]:
    """Up to :data:`SAMPLE_REMOVED` removed documents, shared between dedup's and the filter's
    removals in proportion (each gets at least one where it removed any), seeded."""
    pools: dict[str, pa.Table] = {}
    if dedup is not None and dedup.num_rows:
        pools["dedup"] = dedup
    if decisions is not None and decisions["first"].num_rows:
        pools["filter"] = decisions["first"]
    total = sum(t.num_rows for t in pools.values())
    if not total:
        return []
    want = {k: max(1, round(SAMPLE_REMOVED * t.num_rows / total)) for k, t in pools.items()}
    while sum(want.values()) > min(SAMPLE_REMOVED, total):
        k = max(want, key=want.get)
        want[k] -= 1
    out: list[dict] = []
    if "dedup" in pools:
        t = pools["dedup"]
        for i in sorted(rng.choice(t.num_rows, size=min(want["dedup"], t.num_rows), replace=False)):
            r = t.slice(int(i), 1).to_pylist()[0]
            near = r["method"] == "near" and r["jaccard"] is not None
            how = f"{r['method']} duplicate" + (f" (estimated Jaccard {r['jaccard']:.2f})" if near else "")
            out.append({"doc_id": r["doc_id"], "removed_by": "dedup", "kept_id": r["cluster_id"], "reason": how})
    if "filter" in pools:
        first = pools["filter"]
        picks = sorted(rng.choice(first.num_rows, size=min(want["filter"], first.num_rows), replace=False))
        chosen = first.take(pa.array(picks, pa.int64()))
        ids = chosen.column("doc_id")
        failed = decisions["failed"]
        rows = failed.filter(pc.is_in(failed.column("doc_id"), value_set=ids)).to_pylist()
        by_doc: dict[str, dict] = {}
        for r in sorted(rows, key=lambda r: r["rank"]):
            by_doc.setdefault(r["doc_id"], r)
        for doc_id in ids.to_pylist():
            r = by_doc[doc_id]
            detail = f" [{r['detail']}]" if r.get("detail") else ""
            out.append({"doc_id": doc_id, "removed_by": "filter", "filter": r["filter"],
                        "reason": f"failed {r['filter']}: value {_num(r['value'])}, threshold {_num(r['threshold'])}{detail}"})
    return out


def _num(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.4g}"


def _documents(reader: LakeReader, data: LakeData, wanted: set[str]) -> dict[str, Any]:
    """One pass over ``bronze.documents``: words and characters per document, and the URL and
    opening text of the ``wanted`` documents."""
    ids: list[pa.Array] = []
    words: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    found: dict[str, dict] = {}
    wanted_set = pa.array(sorted(wanted), pa.string())
    for t in reader.batches(BRONZE_DOCUMENTS, ["doc_id", "url", "text", "text_length"], rows=TEXT_BATCH_ROWS):
        text = t.column("text")
        ids.append(t.column("doc_id").combine_chunks())
        words.append(pc.list_value_length(pc.utf8_split_whitespace(text)).to_numpy(zero_copy_only=False)
                     .astype(np.int64))
        lengths.append(t.column("text_length").to_numpy(zero_copy_only=False).astype(np.int64))
        if len(wanted_set):
            hits = t.filter(pc.is_in(t.column("doc_id"), value_set=wanted_set))
            for r in hits.select(["doc_id", "url", "text"]).to_pylist():
                found[r["doc_id"]] = {"url": r["url"], "snippet": (r["text"] or "")[:SNIPPET_CHARS]}
    table = pa.table({"doc_id": pa.concat_arrays(ids) if ids else pa.array([], pa.string()),
                      "words": np.concatenate(words) if words else np.array([], np.int64)})
    length_values = np.concatenate(lengths) if lengths else np.array([], np.int64)
    data.doc_lengths = histogram(length_values, log=True).assign(table="bronze.documents") \
        .rename(columns={"count": "documents"})
    return {"words": table, "lengths": length_values, "found": found}


def _funnel(reader: LakeReader, data: LakeData, docs: dict | None, dedup: pa.Table | None,
            decisions: dict | None, present: set[str]) -> None:
    """Documents and words left after each step; per top language from the filter input on."""
    steps: list[dict] = []
    words = docs["words"] if docs is not None else None

    def words_of(ids: pa.Array | pa.ChunkedArray | None) -> int | None:
        if words is None or ids is None:
            return None
        picked = words.filter(pc.is_in(words.column("doc_id"), value_set=ids))
        return int(pc.sum(picked.column("words")).as_py() or 0)

    if words is not None:
        steps.append({"step": "ingested", "documents": words.num_rows, "words": int(pc.sum(words.column("words")).as_py() or 0)})
    if SILVER_DOCUMENTS_DEDUP.qualified_name in present:
        kept = next(t for t in data.tables if t.name == SILVER_DOCUMENTS_DEDUP.qualified_name).rows
        removed_words = words_of(pc.unique(dedup.column("doc_id"))) if dedup is not None else 0
        after = None if words is None or removed_words is None else steps[0]["words"] - removed_words
        steps.append({"step": "deduplicated", "documents": kept, "words": after})
    if decisions is not None:
        langs, first, order = decisions["languages"], decisions["first"], decisions["order"]
        judged = langs.num_rows
        if steps and steps[-1]["step"] == "deduplicated":
            data.not_yet_filtered = max(0, (steps[-1]["documents"] or 0) - judged)
        total_words = words_of(langs.column("doc_id"))
        steps.append({"step": "filter input", "documents": judged, "words": total_words})
        removed = np.bincount(first.column("rank").to_numpy(), minlength=len(order)) if first.num_rows \
            else np.zeros(len(order), np.int64)
        if words is not None and first.num_rows:
            joined = first.join(words, "doc_id", join_type="left outer")
            w = joined.group_by("rank").aggregate([("words", "sum")])
            removed_words = np.zeros(len(order), np.int64)
            for r, s in zip(w.column("rank").to_pylist(), w.column("words_sum").to_pylist()):
                removed_words[r] = s or 0
        else:
            removed_words = None
        left_docs, left_words = judged, total_words
        for i, step in enumerate(order):
            left_docs -= int(removed[i])
            if left_words is not None and removed_words is not None:
                left_words -= int(removed_words[i])
            steps.append({"step": step, "documents": left_docs, "words": left_words})
        _language_funnel(data, langs, first, order)
    if SILVER_DOCUMENTS_CLEAN.qualified_name in present:
        clean = next(t for t in data.tables if t.name == SILVER_DOCUMENTS_CLEAN.qualified_name)
        clean_words = None
        if words is not None:   # the cleaned text's words (C4 line removal, PII) are not in bronze
            total = 0
            for t in reader.batches(SILVER_DOCUMENTS_CLEAN, ["text"], rows=TEXT_BATCH_ROWS):
                total += int(pc.sum(pc.list_value_length(pc.utf8_split_whitespace(t.column("text")))).as_py() or 0)
            clean_words = total
        steps.append({"step": "clean (text cleaned)", "documents": clean.rows, "words": clean_words})
    if steps:
        frame = pd.DataFrame(steps)
        frame.insert(0, "order", range(len(frame)))
        data.funnel = frame


def _language_funnel(data: LakeData, langs: pa.Table, first: pa.Table, order: list[str]) -> None:
    if not langs.num_rows:
        return
    counts = langs.group_by("language").aggregate([("doc_id", "count")]).sort_by([("doc_id_count", "descending")])
    top = [lang for lang in counts.column("language").to_pylist()[:TOP_LANGUAGES]]
    totals = dict(zip(counts.column("language").to_pylist(), counts.column("doc_id_count").to_pylist()))
    joined = first.join(langs, "doc_id", join_type="inner")
    joined = joined.filter(pc.is_in(joined.column("language"), value_set=pa.array(top, pa.string())))
    removed = joined.group_by(["language", "rank"]).aggregate([("doc_id", "count")]).to_pylist()
    gone = {(r["language"], r["rank"]): r["doc_id_count"] for r in removed}
    rows = []
    for lang in top:
        left = totals[lang]
        rows.append({"language": lang or "unknown", "step": "filter input", "order": 0, "documents": left, "share": 1.0})
        for i, step in enumerate(order):
            left -= gone.get((lang, i), 0)
            rows.append({"language": lang or "unknown", "step": step, "order": i + 1, "documents": left,
                         "share": left / totals[lang] if totals[lang] else 0.0})
    data.funnel_languages = pd.DataFrame(rows)


def _finish_sample(data: LakeData, sample: list[dict], docs: dict | None) -> None:
    found = docs["found"] if docs is not None else {}
    for s in sample:
        doc = found.get(s["doc_id"], {})
        reason = s["reason"]
        if s.get("kept_id"):
            kept_url = found.get(s["kept_id"], {}).get("url")
            reason += f" of {kept_url or s['kept_id']}"
        data.removed_sample.append({"doc_id": s["doc_id"], "url": doc.get("url"), "removed_by": s["removed_by"],
                                    "reason": reason, "snippet": doc.get("snippet", "")})


def _sequences(reader: LakeReader, data: LakeData) -> None:
    first = reader.first_row(GOLD_TOKEN_SEQUENCES, ["input_ids"])
    if first is None:
        return
    length = len(first["input_ids"])   # every row of a tokenize run has seq_len + 1 ids
    tokens = reader.read(GOLD_TOKEN_SEQUENCES, ["num_tokens"]).column("num_tokens").to_numpy(zero_copy_only=False)
    fill = tokens.astype(float) / max(length, 1)
    data.seq_fill = histogram(fill, lo=0.0, hi=1.0, bins=20).rename(columns={"count": "sequences"})
    data.seq_stats.update(sequences=int(tokens.size), sequence_length=length,
                          padding=float(1 - fill.mean()) if fill.size else 0.0,
                          tokens=int(tokens.sum()))


def _clicks(reader: LakeReader, data: LakeData, present: set[str]) -> None:
    info = {t.name: t for t in data.tables}
    data.clicks = {"rows": info[BRONZE_CLICKS.qualified_name].rows or 0 if BRONZE_CLICKS.qualified_name in present else 0,
                   "quarantined": info[BRONZE_CLICKS_QUARANTINE.qualified_name].rows or 0
                   if BRONZE_CLICKS_QUARANTINE.qualified_name in present else 0}
    if BRONZE_CLICKS_QUARANTINE.qualified_name in present:
        q = reader.read(BRONZE_CLICKS_QUARANTINE, ["reason"]).group_by("reason").aggregate([("reason", "count")])
        data.clicks_quarantine = q.to_pandas().rename(columns={"reason_count": "lines"}).sort_values("lines", ascending=False)
    if BRONZE_CLICKS.qualified_name in present:
        days: dict[Any, list[int]] = {}
        for t in reader.batches(BRONZE_CLICKS, ["day", "label"]):
            g = t.group_by("day").aggregate([("label", "count"), ("label", "sum")])
            for d, n, k in zip(*(g.column(c).to_pylist() for c in ("day", "label_count", "label_sum"))):
                slot = days.setdefault(d, [0, 0])
                slot[0] += n
                slot[1] += k or 0
        frame = pd.DataFrame([{"day": -1 if d is None else d, "impressions": n, "clicks": k}
                              for d, (n, k) in days.items()]).sort_values("day")
        frame["ctr"] = frame["clicks"] / frame["impressions"].where(frame["impressions"] > 0)
        data.clicks_days = frame.reset_index(drop=True)
        data.clicks["days"] = len(days)
        data.clicks["positives"] = int(frame["clicks"].sum())
    if SILVER_CLICK_VOCAB.qualified_name in present:
        v = reader.read(SILVER_CLICK_VOCAB, ["column"]).group_by("column").aggregate([("column", "count")])
        frame = v.to_pandas().rename(columns={"column_count": "values"})
        frame["n"] = frame["column"].str.slice(1).astype(int)
        data.click_vocab = frame.sort_values("n").drop(columns="n").reset_index(drop=True)


def _runs(reader: LakeReader, data: LakeData) -> None:
    runs = reader.read(OPS_RUNS, ["run_id", "stage", "started_at", "duration_s", "status", "rows_in", "rows_out"]).to_pandas()
    if runs.empty:
        return
    started = runs.groupby("run_id")["started_at"].min().rename("run_started")
    latest = started.sort_values().index[-MAX_RUNS:]
    runs = runs[runs["run_id"].isin(latest)].join(started, on="run_id")
    runs = runs.rename(columns={"duration_s": "seconds"})
    runs["rows_per_s"] = runs["rows_in"] / runs["seconds"].where(runs["seconds"] > 0)
    data.runs = runs.sort_values(["run_started", "started_at"]).reset_index(drop=True)


def _quality(reader: LakeReader, data: LakeData) -> None:
    q = reader.read(OPS_QUALITY, ["run_id", "stage", "table_name", "expectation", "column", "success", "observed",
                                  "checked_at"]).to_pandas()
    if q.empty:
        return
    last = q.groupby("table_name")["checked_at"].transform("max")
    latest = q[q["checked_at"] == last]
    summary = latest.groupby(["table_name", "stage", "run_id", "checked_at"]).agg(
        passed=("success", "sum"), expectations=("success", "size")).reset_index()
    summary["failed"] = summary["expectations"] - summary["passed"]
    data.quality = summary.rename(columns={"table_name": "table"}).drop(columns="expectations") \
        .sort_values("table").reset_index(drop=True)
    failures = latest[~latest["success"].astype(bool)]
    data.quality_failures = failures.rename(columns={"table_name": "table"})[
        ["table", "expectation", "column", "observed"]].reset_index(drop=True)
