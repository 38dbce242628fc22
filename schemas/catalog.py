"""The table catalog: every Delta table crawlake writes, in one place.

Each :class:`TableSpec` gives the table's layer and name (``layer.name``), its Spark schema, its
key columns (unique per row) and partition columns. Writers in :mod:`pipelines.tables` conform
DataFrames to these schemas before writing, so a stage cannot publish an unexpected column.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


@dataclass(frozen=True)
class TableSpec:
    layer: str
    name: str
    schema: StructType
    keys: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    description: str = ""
    #: Delta table properties set when the table is created, as (key, value) pairs
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def qualified_name(self) -> str:
        return f"{self.layer}.{self.name}"

    def path_under(self, root: str) -> str:
        """Where the table lives in a path-mode lake: ``<root>/<layer>/<name>``."""
        return f"{root.rstrip('/')}/{self.layer}/{self.name}"

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.schema.fields]


def _s(*fields: tuple) -> StructType:
    return StructType([StructField(n, t, nullable) for n, t, nullable in fields])


_STR, _LONG, _INT, _DBL, _BOOL, _TS = StringType(), LongType(), IntegerType(), DoubleType(), BooleanType(), TimestampType()

BRONZE_DOCUMENTS = TableSpec(
    "bronze", "documents",
    _s(
        ("doc_id", _STR, False),          # sha256 of the WARC-Record-ID, first 32 hex chars
        ("url", _STR, False),             # WARC-Target-URI as crawled
        ("url_normalized", _STR, True),   # w3lib canonical form
        ("host", _STR, True),
        ("registered_domain", _STR, True),  # tldextract, bundled Public Suffix List
        ("surt_host", _STR, True),        # SURT host key, e.g. org,archive
        ("crawl_date", _TS, True),        # WARC-Date, UTC
        ("crawl_id", _STR, True),         # warcinfo isPartOf or CC-MAIN-YYYY-WW from the file name
        ("warc_record_id", _STR, False),
        ("warc_type", _STR, False),       # response | conversion
        ("http_status", _INT, True),      # null for WET conversion records
        ("content_type", _STR, True),     # as declared (HTTP, or WARC for resource records), no parameters
        ("content_type_source", _STR, True),  # declared | sniffed (absent or generic type: HTML by its bytes)
        ("content_language", _STR, True),  # HTTP Content-Language
        ("last_modified", _STR, True),    # HTTP Last-Modified, as sent
        ("payload_digest", _STR, True),   # WARC-Payload-Digest
        ("charset", _STR, True),
        ("extraction", _STR, True),       # extractor and version, or "wet"
        ("text", _STR, False),
        ("text_length", _INT, False),     # characters
        ("payload_bytes", _LONG, False),
        ("source_file", _STR, False),
        ("warc_filename", _STR, False),
        ("record_offset", _LONG, False),  # byte offset of the record in the (compressed) file
    ),
    keys=("doc_id",),
    description="Every page with extracted text, one row per WARC response/conversion record.",
)

BRONZE_QUARANTINE = TableSpec(
    "bronze", "quarantine",
    _s(
        ("source_file", _STR, False),
        ("warc_filename", _STR, True),
        ("record_offset", _LONG, False),
        ("warc_record_id", _STR, True),
        ("url", _STR, True),
        ("reason", _STR, False),          # short machine-readable code, e.g. non_html_payload
        ("detail", _STR, True),
    ),
    keys=("source_file", "record_offset", "reason"),
    description="Input that could not become a document, with why and where.",
)

SILVER_DOCUMENTS_DEDUP = TableSpec(
    "silver", "documents_dedup", BRONZE_DOCUMENTS.schema, keys=("doc_id",),
    description="bronze.documents less exact and near duplicates (one kept per cluster).",
)

SILVER_DUPLICATE_CLUSTERS = TableSpec(
    "silver", "duplicate_clusters",
    _s(
        ("doc_id", _STR, False),
        ("cluster_id", _STR, False),      # doc_id of the kept member
        ("cluster_size", _INT, False),
        ("kept", _BOOL, False),
        ("method", _STR, False),          # exact | near
        ("jaccard", _DBL, True),          # MinHash estimate to the kept doc; 1.0 for exact and kept rows
    ),
    keys=("doc_id", "method"),
    description="Every document that had a duplicate: its cluster and whether it was kept.",
)

SILVER_DEDUP_INDEX = TableSpec(
    "silver", "dedup_index",
    _s(
        ("doc_id", _STR, False),          # a kept document (one in silver.documents_dedup)
        ("text_hash", _STR, False),       # exact-dedup key: sha256 hex of the normalized text
        ("signature", BinaryType(), True),  # MinHash, uint32[num_perm] little-endian; null: no shingles
        ("band_hashes", ArrayType(_LONG, True), False),   # LSH band hashes, int64[bands]; empty: no shingles
        ("params", _STR, False),          # the dedup settings these were computed with
    ),
    keys=("doc_id",),
    description="What incremental dedup matches new documents against: the kept documents' hashes.",
)

SILVER_DOCUMENTS_CLEAN = TableSpec(
    "silver", "documents_clean",
    StructType(SILVER_DOCUMENTS_DEDUP.schema.fields + [
        StructField("language", _STR, True),
        StructField("language_score", _DBL, True),
    ]),
    keys=("doc_id",),
    description="Deduplicated documents that passed every filter, with their language.",
)

SILVER_FILTER_DECISIONS = TableSpec(
    "silver", "filter_decisions",
    _s(
        ("doc_id", _STR, False),
        ("filter", _STR, False),          # e.g. language, gopher_min_doc_words, c4_lines_removed, pii_emails
        ("value", _DBL, True),            # measured value
        ("threshold", _DBL, True),        # inf: informational row (lines removed, PII replaced), always passes
        ("passed", _BOOL, False),
        ("detail", _STR, True),           # the detected language, or what matched (blocklist entry, ...)
    ),
    keys=("doc_id", "filter"),
    description="One row per document and filter that ran.",
)

GOLD_TOKEN_SEQUENCES = TableSpec(
    "gold", "token_sequences",
    _s(
        ("seq_id", _STR, False),          # <pack_group:05d>-<index:08d>
        ("pack_group", _INT, False),
        ("seq_index", _INT, False),
        ("input_ids", ArrayType(_INT, False), False),     # seq_len + 1 token ids, padded
        ("num_tokens", _INT, False),      # non-padding tokens; positions >= num_tokens are padding
        ("doc_boundaries", ArrayType(_INT, False), False),  # offsets where a document starts
        ("doc_ids", ArrayType(_STR, False), False),        # documents starting in this sequence
        ("doc_num_tokens", ArrayType(_INT, False), False),  # each such document's tokens (whole, no separator)
        ("tokenizer", _STR, False),
    ),
    keys=("seq_id",),
    description="Fixed-length packed token sequences with document boundaries.",
)

GOLD_DOCUMENT_TOKENS = TableSpec(
    "gold", "document_tokens",
    _s(
        ("doc_id", _STR, False),
        ("num_tokens", _INT, False),      # the document's tokens, without the separator packing adds
        ("seq_id", _STR, False),          # gold.token_sequences row where the document starts
        ("offset", _INT, False),          # its start offset in that row's input_ids
        ("tokenizer", _STR, False),
    ),
    keys=("doc_id",),
    description="Per-document token counts; sum(num_tokens) + one separator each = tokens packed.",
)

GOLD_EMBEDDINGS = TableSpec(
    "gold", "embeddings",
    _s(
        ("doc_id", _STR, False),
        ("chunk_id", _INT, False),
        ("char_start", _INT, False),
        ("char_end", _INT, False),
        ("vector", ArrayType(FloatType(), False), False),  # L2-normalized, float32[dim]
        ("dim", _INT, False),
        ("model", _STR, False),
        ("model_revision", _STR, False),  # hub commit or digest of the model's files
    ),
    keys=("doc_id", "chunk_id", "model", "model_revision"),
    description="Sentence embeddings of document chunks; one set per model revision.",
)

GOLD_INDEX_MANIFEST = TableSpec(
    "gold", "index_manifest",
    _s(
        ("model", _STR, False),
        ("model_revision", _STR, False),
        ("shard", _INT, False),
        # the FAISS index file, relative to the lake root when under it; <path>.ids.parquet maps its rows
        ("path", _STR, False),
        ("index_type", _STR, False),      # the type built (a small shard falls back to flat)
        ("rows", _LONG, False),
        ("dim", _INT, False),
        ("fingerprint", _STR, False),     # of the shard's (doc_id, chunk_id) set: unchanged = not rebuilt
        ("ef_search", _INT, False),       # search-time settings tuned to index.target_recall
        ("nprobe", _INT, False),
        ("refine_k_factor", _INT, False),
        ("tuned_recall", _DBL, False),    # recall@10 vs exact search they reached on the shard
        ("embeddings_version", _LONG, False),
        ("built_at", _TS, False),
        ("build_s", _DBL, False),
    ),
    keys=("model", "model_revision", "shard"),
    description="One row per FAISS index shard of gold.embeddings.",
)

OPS_RUNS = TableSpec(
    "ops", "runs",
    _s(
        ("run_id", _STR, False),
        ("stage", _STR, False),
        ("started_at", _TS, False),
        ("duration_s", _DBL, False),
        ("status", _STR, False),          # succeeded | failed
        ("rows_in", _LONG, True),
        ("rows_out", _LONG, True),
        ("rows_quarantined", _LONG, True),
        ("input_versions", MapType(_STR, _LONG), True),   # table -> Delta version read
        ("output_versions", MapType(_STR, _LONG), True),  # table -> Delta version written
        ("config_hash", _STR, False),
        ("code_version", _STR, False),
        ("error", _STR, True),
    ),
    keys=("run_id", "stage"),
    description="The run ledger: one row per stage run.",
)

OPS_QUALITY = TableSpec(
    "ops", "quality",
    _s(
        ("run_id", _STR, False),
        ("stage", _STR, False),
        ("table_name", _STR, False),
        ("suite", _STR, False),
        ("expectation", _STR, False),
        ("column", _STR, True),
        ("success", _BOOL, False),
        ("observed", _STR, True),
        ("checked_at", _TS, False),
    ),
    keys=("run_id", "table_name", "expectation", "column"),
    description="Great Expectations results, one row per expectation per validation.",
)

OPS_INGEST_LOG = TableSpec(
    "ops", "ingest_log",
    _s(
        ("source_file", _STR, False),
        ("size_bytes", _LONG, False),
        ("mtime", _DBL, False),
        ("sha256", _STR, True),           # of the file's bytes, computed while ingesting
        ("run_id", _STR, False),
        ("documents", _LONG, False),
        ("quarantined", _LONG, False),
        ("skipped", _LONG, False),        # records skipped by type (request, metadata, ...)
        ("committed_at", _TS, False),
        # records read; = documents + skipped + quarantined less the file's damage rows (corrupt_file, ...)
        ("records", _LONG, True),
        ("duplicates", _LONG, True),      # of the quarantined: duplicate_record (another copy is kept)
    ),
    keys=("source_file",),
    description="Which source files ingest has committed, so re-runs skip them.",
)

_CLICK_INTS = [(f"I{i}", _LONG, True) for i in range(1, 14)]      # counts; empty → null
_CLICK_CATS = [(f"C{i}", _STR, True) for i in range(1, 27)]       # 8 lower-case hex digits; empty → null

BRONZE_CLICKS = TableSpec(
    "bronze", "clicks",
    _s(
        # key and provenance first: Delta keeps min/max statistics of the first 32 columns only,
        # and replaceWhere on source_file skips files by them
        ("row_key", _STR, False),         # <sha256(source_file)[:16]>-<line_number:010d>
        ("source_file", _STR, False),     # absolute path or URL of the log file
        ("line_number", _LONG, False),    # 1-based line in the (decompressed) file
        ("day", _INT, True),              # Criteo day from the file name (day_<n>), else null
        ("ingest_time", _TS, False),
        ("label", _INT, False),           # 1 = click
        *_CLICK_INTS,
        *_CLICK_CATS,
    ),
    keys=("row_key",),
    partition_by=("day",),
    description="Criteo click-log impressions, one row per valid line, typed.",
    # min/max statistics of row_key .. label only: those of 39 random feature values skip nothing,
    # and collecting them was about half of the time of the Delta write
    properties=(("delta.dataSkippingNumIndexedCols", "6"),),
)

BRONZE_CLICKS_QUARANTINE = TableSpec(
    "bronze", "clicks_quarantine",
    _s(
        ("row_key", _STR, False),         # the key the row would have had
        ("source_file", _STR, False),
        ("line_number", _LONG, False),
        ("day", _INT, True),
        ("raw_line", _STR, False),        # the line as read (undecodable bytes backslash-escaped)
        ("reason", _STR, False),          # wrong_field_count | bad_label | bad_integer | bad_hash | bad_header
        ("detail", _STR, True),           # e.g. I3='3.5'
        ("ingest_time", _TS, False),
    ),
    keys=("row_key",),
    description="Click-log lines that could not become a row, with why and where.",
)

SILVER_CLICK_VOCAB = TableSpec(
    "silver", "click_vocab",
    _s(
        ("column", _STR, False),          # C1..C26
        ("value", _STR, False),           # the hash
        ("id", _INT, False),              # >= 2; 0 = empty value, 1 = out of vocabulary
        ("count", _LONG, False),          # occurrences in bronze.clicks at the last features run
    ),
    keys=("column", "value"),
    description="Per categorical column, the values seen at least clicks.vocab_min_frequency times and their ids.",
)

SILVER_CLICK_FEATURES = TableSpec(
    "silver", "click_features",
    _s(
        ("row_key", _STR, False),
        ("day", _INT, True),
        ("label", _INT, False),
        ("dense", ArrayType(FloatType(), False), False),   # float32[13]: log(1 + max(I, 0)), missing → 0
        ("sparse", ArrayType(_INT, False), False),         # int32[26]: silver.click_vocab ids
    ),
    keys=("row_key",),
    partition_by=("day",),
    description="DLRM inputs: transformed integer features, categorical ids, label.",
)

OPS_CLICKS_INGEST_LOG = TableSpec(
    "ops", "clicks_ingest_log",
    _s(
        ("source_file", _STR, False),
        ("size_bytes", _LONG, False),
        ("mtime", _DBL, False),
        ("run_id", _STR, False),          # batch run id, or stream:<query id>:<batch id>
        ("lines", _LONG, False),          # = rows + quarantined + header_lines
        ("rows", _LONG, False),
        ("quarantined", _LONG, False),
        ("header_lines", _LONG, False),
        ("committed_at", _TS, False),
    ),
    keys=("source_file",),
    description="Which click-log files batch or stream ingest has committed, with their line counts.",
)

#: The click-log flow's tables (`crawlake clicks ...`).
CLICK_TABLES: tuple[TableSpec, ...] = (
    BRONZE_CLICKS, BRONZE_CLICKS_QUARANTINE, SILVER_CLICK_VOCAB, SILVER_CLICK_FEATURES, OPS_CLICKS_INGEST_LOG,
)

#: What `crawlake run` (the WARC flow) writes.
WARC_FLOW_TABLES: tuple[TableSpec, ...] = (
    BRONZE_DOCUMENTS, BRONZE_QUARANTINE, SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS, SILVER_DEDUP_INDEX,
    SILVER_DOCUMENTS_CLEAN, SILVER_FILTER_DECISIONS, GOLD_TOKEN_SEQUENCES, GOLD_DOCUMENT_TOKENS, GOLD_EMBEDDINGS,
    GOLD_INDEX_MANIFEST, OPS_RUNS, OPS_QUALITY, OPS_INGEST_LOG,
)
#: Every table; other flows (click logs, ...) add theirs here.
ALL_TABLES: tuple[TableSpec, ...] = WARC_FLOW_TABLES + CLICK_TABLES
TABLES: dict[str, TableSpec] = {t.qualified_name: t for t in ALL_TABLES}
