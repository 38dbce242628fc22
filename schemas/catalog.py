"""The table catalog: every Delta table crawlake writes, in one place.

Each :class:`TableSpec` gives the table's layer and name (``layer.name``), its schema **in Arrow
types** (:attr:`TableSpec.arrow`, written once here), its key columns (unique per row), partition
columns, Delta properties, which engine commits its writes, and its data-quality suite
(:attr:`TableSpec.expectations`, see :mod:`schemas.expectations`). Everything else is derived:

* :attr:`TableSpec.schema` — the Spark ``StructType`` (same names, order, types and nullability);
  pyspark is imported only when it is asked for, so kernels, loaders and search can use the
  catalog on a machine without a JVM (``import schemas.catalog`` imports pyarrow only);
* :attr:`TableSpec.nullable_arrow` — the same with every column nullable (list items and map
  values as declared): what task-staged Parquet files, rows appended from the driver and the
  kernels' batches are written with.

Writers in :mod:`pipelines.lake` conform data to these schemas before writing, so a stage cannot
publish an unexpected column.

Type mapping (Arrow → Spark): ``string`` → StringType, ``int32`` → IntegerType, ``int64`` →
LongType, ``float32`` → FloatType, ``float64`` → DoubleType, ``bool`` → BooleanType, ``binary`` →
BinaryType, ``timestamp("us", tz="UTC")`` → TimestampType, ``list<element>`` → ArrayType
(``containsNull`` = the item field's nullability), ``map<string, V>`` → MapType
(``valueContainsNull`` = the value field's nullability).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import pyarrow as pa

from schemas.expectations import (
    Expectation,
    at_least,
    between,
    in_set,
    matches,
    not_null,
    unique,
)

if TYPE_CHECKING:  # pyspark only where the Spark schema is asked for
    from pyspark.sql.types import DataType, StructType

#: Values of :attr:`TableSpec.engine`.
ENGINES = ("auto", "spark")


@dataclass(frozen=True)
class TableSpec:
    """One Delta table.

    ``arrow``: the declared schema (field order is the table's column order; nullability is the
    contract the writers keep). ``keys``: columns unique per row. ``partition_by``: Delta
    partition columns. ``description``: one line for docs and ``crawlake`` listings.
    ``properties``: Delta table properties set when the table is created, as (key, value) pairs.

    ``engine``: which engine commits the table's writes —

    * ``"auto"``: rows arrive as files staged by tasks (a kernel's, or a DataFrame's through
      :meth:`pipelines.lake.Staging.stage`) or rows from the driver, and the lake commits them
      with ``deltalake`` where the lake allows (a path-mode lake on local disk, or on S3 with
      conditional PUTs), else with Spark's Delta writer;
    * ``"spark"``: the table is written by Spark's Delta writer from DataFrames (the click
      vocabulary and features).

    ``expectations``: the table's Great Expectations suite as data (:mod:`schemas.expectations`);
    :mod:`pipelines.quality` builds and runs it (suite name :attr:`suite_name`). Every table has
    one. ``derived``: columns the suite checks that the table does not store — the writing stage
    derives them from the stored columns just for the audit (``silver.click_features``:
    :func:`pipelines.clicks.features.audit_view`); empty for most tables.

    Raises ValueError at construction when ``engine`` is unknown, a key, partition or expectation
    column is not a column (or derived column), or the suite is empty.
    """
    layer: str
    name: str
    arrow: pa.Schema
    keys: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    description: str = ""
    #: Delta table properties set when the table is created, as (key, value) pairs
    properties: tuple[tuple[str, str], ...] = ()
    engine: str = field(kw_only=True)
    expectations: tuple[Expectation, ...] = field(kw_only=True)
    derived: pa.Schema = field(default_factory=lambda: pa.schema([]), kw_only=True)

    def __post_init__(self):
        where = f"{self.layer}.{self.name}"
        if self.engine not in ENGINES:
            raise ValueError(f"{where}: engine must be one of {ENGINES}, not {self.engine!r}")
        names = set(self.arrow.names)
        for what, cols in (("key", self.keys), ("partition", self.partition_by)):
            if missing := [c for c in cols if c not in names]:
                raise ValueError(f"{where}: {what} columns {missing} are not columns")
        if not self.expectations:
            raise ValueError(f"{where}: every table needs a quality suite (expectations)")
        known = names | set(self.derived.names)
        for e in self.expectations:
            if missing := [c for c in e.columns if c not in known]:
                raise ValueError(f"{where}: {e.type} names {missing}, not columns of the table")

    @property
    def qualified_name(self) -> str:
        return f"{self.layer}.{self.name}"

    @property
    def suite_name(self) -> str:
        """The quality suite's name, ``<layer>_<name>`` (``ops.quality.suite``)."""
        return f"{self.layer}_{self.name}"

    def path_under(self, root: str) -> str:
        """Where the table lives in a path-mode lake: ``<root>/<layer>/<name>``."""
        return f"{root.rstrip('/')}/{self.layer}/{self.name}"

    @property
    def columns(self) -> list[str]:
        return list(self.arrow.names)

    @cached_property
    def schema(self) -> StructType:
        """The Spark ``StructType`` derived from :attr:`arrow` (imports pyspark)."""
        return spark_schema(self.arrow)

    @cached_property
    def nullable_arrow(self) -> pa.Schema:
        """:attr:`arrow` with every column nullable: what files staged by tasks, rows appended from
        the driver and kernels' output batches are written with (a batch may hold rows of several
        kinds, and Spark's path writes drop NOT NULL anyway). List items and map values keep their
        declared nullability, so Spark reads such files back with the declared ``containsNull``
        (Spark cannot cast ``array<int>`` with nullable items to one without)."""
        return as_nullable(self.arrow)


def as_nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every top-level field nullable; list items and map values keep their
    declared nullability (as Spark's ``to_arrow_schema`` of a nullable ``StructType`` does)."""
    return pa.schema([f.with_nullable(True) for f in schema])


def _spark_type(t: pa.DataType) -> DataType:
    from pyspark.sql import types as T

    simple = {pa.string(): T.StringType(), pa.int32(): T.IntegerType(), pa.int64(): T.LongType(),
              pa.float32(): T.FloatType(), pa.float64(): T.DoubleType(), pa.bool_(): T.BooleanType(),
              pa.binary(): T.BinaryType(), _TS: T.TimestampType()}
    if t in simple:
        return simple[t]
    if pa.types.is_list(t):
        return T.ArrayType(_spark_type(t.value_type), t.value_field.nullable)
    if pa.types.is_map(t):
        return T.MapType(_spark_type(t.key_type), _spark_type(t.item_type), t.item_field.nullable)
    # only the types the catalog uses: a new one is added here on purpose, not guessed
    raise TypeError(f"no Spark type for Arrow type {t}")


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark ``StructType`` of an Arrow schema (the module docstring's mapping); TypeError for
    an Arrow type the catalog does not use."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, _spark_type(f.type), f.nullable) for f in schema])


_STR, _LONG, _INT, _FLOAT, _DBL, _BOOL, _BIN = (
    pa.string(), pa.int64(), pa.int32(), pa.float32(), pa.float64(), pa.bool_(), pa.binary())
_TS = pa.timestamp("us", tz="UTC")


def _list(item: pa.DataType, *, items_nullable: bool) -> pa.DataType:
    # "element": the item name Spark and Parquet's list encoding use
    return pa.list_(pa.field("element", item, nullable=items_nullable))


def _s(*fields: tuple) -> pa.Schema:
    return pa.schema([pa.field(n, t, nullable=nullable) for n, t, nullable in fields])


_SHA256_HEX = r"^[0-9a-f]{64}$"
_CODE = r"^[a-z][a-z0-9_]*$"   # a short machine-readable code, e.g. non_html_payload
_HTTP_STATUS = (100, 599)

# bronze.documents' suite (the ingest gate), also the one of the tables that keep its columns
_DOCUMENT_SUITE = (
    *not_null("doc_id", "url", "warc_record_id", "source_file", "text"),
    unique("doc_id"),
    between("http_status", *_HTTP_STATUS),   # nulls (WET conversion records) pass
    between("text_length", 0),
)

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
    engine="auto",
    expectations=_DOCUMENT_SUITE,
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
    engine="auto",
    expectations=(
        *not_null("source_file", "record_offset", "reason"),
        unique("source_file", "record_offset", "reason"),
        between("record_offset", 0),
        matches("reason", _CODE),
    ),
)

SILVER_DOCUMENTS_DEDUP = TableSpec(
    "silver", "documents_dedup", BRONZE_DOCUMENTS.arrow, keys=("doc_id",),
    description="bronze.documents less exact and near duplicates (one kept per cluster).",
    engine="auto",
    expectations=_DOCUMENT_SUITE,
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
    engine="auto",
    expectations=(
        *not_null("doc_id", "cluster_id", "cluster_size", "kept", "method"),
        unique("doc_id", "method"),
        between("cluster_size", 2),       # only clusters with a duplicate are listed
        in_set("method", ("exact", "near")),
        between("jaccard", 0.0, 1.0),
    ),
)

SILVER_DEDUP_INDEX = TableSpec(
    "silver", "dedup_index",
    _s(
        ("doc_id", _STR, False),          # a kept document (one in silver.documents_dedup)
        ("text_hash", _STR, False),       # exact-dedup key: sha256 hex of the normalized text
        ("signature", _BIN, True),        # MinHash, uint32[num_perm] little-endian; null: no shingles
        ("band_hashes", _list(_LONG, items_nullable=True), False),  # LSH band hashes, int64[bands]; empty: no shingles
        ("params", _STR, False),          # the dedup settings these were computed with
    ),
    keys=("doc_id",),
    description="What incremental dedup matches new documents against: the kept documents' hashes.",
    engine="auto",
    expectations=(
        *not_null("doc_id", "text_hash", "band_hashes", "params"),
        unique("doc_id"),
        matches("text_hash", _SHA256_HEX),
    ),
)

SILVER_DOCUMENTS_CLEAN = TableSpec(
    "silver", "documents_clean",
    pa.schema(list(SILVER_DOCUMENTS_DEDUP.arrow) + [
        pa.field("language", _STR, nullable=True),
        pa.field("language_score", _DBL, nullable=True),   # language ID probability
    ]),
    keys=("doc_id",),
    description="Deduplicated documents that passed every filter, with their language.",
    engine="auto",
    expectations=(*_DOCUMENT_SUITE, between("language_score", 0.0, 1.0)),
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
    engine="auto",
    expectations=(
        *not_null("doc_id", "filter", "passed"),
        unique("doc_id", "filter"),
        matches("filter", _CODE),
    ),
)

GOLD_TOKEN_SEQUENCES = TableSpec(
    "gold", "token_sequences",
    _s(
        ("seq_id", _STR, False),          # <pack_group:05d>-<index:08d>
        ("pack_group", _INT, False),
        ("seq_index", _INT, False),
        ("input_ids", _list(_INT, items_nullable=False), False),     # seq_len + 1 token ids, padded
        ("num_tokens", _INT, False),      # non-padding tokens; positions >= num_tokens are padding
        ("doc_boundaries", _list(_INT, items_nullable=False), False),  # offsets where a document starts
        ("doc_ids", _list(_STR, items_nullable=False), False),        # documents starting in this sequence
        ("doc_num_tokens", _list(_INT, items_nullable=False), False),  # each such document's tokens (whole, no separator)
        ("tokenizer", _STR, False),
    ),
    keys=("seq_id",),
    description="Fixed-length packed token sequences with document boundaries.",
    engine="auto",
    expectations=(
        *not_null("seq_id", "pack_group", "seq_index", "input_ids", "num_tokens", "doc_boundaries",
                  "doc_ids", "doc_num_tokens", "tokenizer"),
        unique("seq_id"),
        matches("seq_id", r"^[0-9]{5,}-[0-9]{8,}$"),
        between("pack_group", 0),
        between("seq_index", 0),
        between("num_tokens", 0),
    ),
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
    engine="auto",
    expectations=(
        *not_null("doc_id", "num_tokens", "seq_id", "offset", "tokenizer"),
        unique("doc_id"),
        between("num_tokens", 0),
        between("offset", 0),
    ),
)

GOLD_EMBEDDINGS = TableSpec(
    "gold", "embeddings",
    _s(
        ("doc_id", _STR, False),
        ("chunk_id", _INT, False),
        ("char_start", _INT, False),
        ("char_end", _INT, False),
        ("vector", _list(_FLOAT, items_nullable=False), False),  # L2-normalized, float32[dim]
        ("dim", _INT, False),
        ("model", _STR, False),
        ("model_revision", _STR, False),  # hub commit or digest of the model's files
    ),
    keys=("doc_id", "chunk_id", "model", "model_revision"),
    description="Sentence embeddings of document chunks; one set per model revision.",
    engine="auto",
    expectations=(
        *not_null("doc_id", "chunk_id", "char_start", "char_end", "vector", "dim", "model", "model_revision"),
        unique("doc_id", "chunk_id", "model", "model_revision"),
        between("chunk_id", 0),
        between("char_start", 0),
        at_least("char_end", "char_start"),
        between("dim", 1),
    ),
)

GOLD_INDEX_MANIFEST = TableSpec(
    "gold", "index_manifest",
    _s(
        ("model", _STR, False),
        ("model_revision", _STR, False),
        ("shard", _INT, False),
        # 0, 1, ...: the shard's segments, each its own index (a new crawl's vectors add one); added
        # with segments, a row from before holds the whole shard (read as segment 0)
        ("segment", _INT, True),
        # the FAISS index file, relative to the lake root when under it; <path>.ids.parquet maps its rows
        ("path", _STR, False),
        ("index_type", _STR, False),      # the type built (a small shard falls back to flat)
        ("rows", _LONG, False),
        ("dim", _INT, False),
        ("fingerprint", _STR, False),     # of the segment's rows and the index settings
        # the segment's row hashes summed mod 2**64: a full run tells an unchanged shard by the sums
        # of its segments (added with segments; null before, and then that shard is rebuilt)
        ("row_hash_sum", _LONG, True),
        ("ef_search", _INT, False),       # search-time settings tuned to index.target_recall
        ("nprobe", _INT, False),
        ("refine_k_factor", _INT, False),  # 0: no exact re-ranking
        ("tuned_recall", _DBL, False),    # recall@10 vs exact search they reached on the shard
        ("embeddings_version", _LONG, False),
        ("built_at", _TS, False),
        ("build_s", _DBL, False),
    ),
    keys=("model", "model_revision", "shard", "segment"),
    description="One row per segment of a FAISS index shard of gold.embeddings.",
    engine="auto",
    expectations=(
        *not_null("model", "model_revision", "shard", "segment", "path", "index_type", "rows", "dim",
                  "fingerprint", "ef_search", "nprobe", "refine_k_factor", "tuned_recall", "embeddings_version",
                  "built_at", "build_s"),
        unique("model", "model_revision", "shard", "segment"),
        between("shard", 0),
        between("segment", 0),
        between("rows", 0),
        between("dim", 1),
        between("ef_search", 0),
        between("nprobe", 0),
        between("refine_k_factor", 0),
        between("tuned_recall", 0.0, 1.0),
        between("embeddings_version", 0),
        between("build_s", 0.0),
    ),
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
        ("input_versions", pa.map_(_STR, _LONG), True),   # table -> Delta version read
        ("output_versions", pa.map_(_STR, _LONG), True),  # table -> Delta version written
        ("config_hash", _STR, False),
        ("code_version", _STR, False),
        ("error", _STR, True),
        ("writers", pa.map_(_STR, _STR), True),   # table -> engine that committed it (deltalake | spark)
        ("notes", _STR, True),            # the stage's notes as JSON (incremental stages: mode, config hash)
    ),
    keys=("run_id", "stage"),
    description="The run ledger: one row per stage run.",
    engine="auto",
    expectations=(
        *not_null("run_id", "stage", "started_at", "duration_s", "status", "config_hash", "code_version"),
        unique("run_id", "stage"),
        in_set("status", ("succeeded", "failed")),
        between("duration_s", 0.0),
        between("rows_in", 0),
        between("rows_out", 0),
        between("rows_quarantined", 0),
    ),
)

OPS_QUALITY = TableSpec(
    "ops", "quality",
    _s(
        ("run_id", _STR, False),
        ("stage", _STR, False),
        ("table_name", _STR, False),
        ("suite", _STR, False),
        ("expectation", _STR, False),
        ("column", _STR, True),           # the expectation's column(s), comma-joined
        ("success", _BOOL, False),
        ("observed", _STR, True),
        ("checked_at", _TS, False),
    ),
    keys=("run_id", "table_name", "expectation", "column"),
    description="Great Expectations results, one row per expectation per validation.",
    engine="auto",
    expectations=(
        *not_null("run_id", "stage", "table_name", "suite", "expectation", "success", "checked_at"),
        # a stage can gate one table once per commit batch in a run (ingest): one validation is
        # one checked_at, so the declared keys are unique only with it
        unique("run_id", "table_name", "expectation", "column", "checked_at"),
    ),
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
        # of the ingest settings that shaped the file's rows (stages.ingest.settings_hash); null:
        # logged before it was recorded
        ("settings_hash", _STR, True),
    ),
    keys=("source_file",),
    description="Which source files ingest has committed, so re-runs skip them.",
    engine="auto",
    expectations=(
        *not_null("source_file", "size_bytes", "mtime", "run_id", "documents", "quarantined", "skipped",
                  "committed_at"),
        unique("source_file"),
        between("size_bytes", 0),
        matches("sha256", _SHA256_HEX),
        *(between(c, 0) for c in ("documents", "quarantined", "skipped", "records", "duplicates")),
        at_least("quarantined", "duplicates"),
    ),
)

OPS_TAKEDOWNS = TableSpec(
    "ops", "takedowns",
    _s(
        ("takedown_id", _STR, False),     # <requested_at as YYYYmmddTHHMMSSZ>-<8 hex>
        ("requested_at", _TS, False),
        ("run_id", _STR, False),          # the run whose forget stage removed the documents (ops.runs)
        ("reason", _STR, False),          # as the requester gave it, e.g. "opt-out request 42"
        # the selectors (pipelines.kernels.takedown): each kind's values, empty when not used;
        # ingest keeps every record they name out of the lake
        ("urls", _list(_STR, items_nullable=True), False),
        ("url_prefixes", _list(_STR, items_nullable=True), False),
        ("domains", _list(_STR, items_nullable=True), False),   # lower case; subdomains included
        ("doc_ids", _list(_STR, items_nullable=True), False),
        ("documents", _LONG, False),      # bronze.documents rows the selectors matched, all removed
        ("removed", pa.map_(_STR, _LONG), False),   # table -> rows removed (gold.token_sequences: sequences repacked)
        # documents dedup had removed as duplicates of a removed kept document: they stay removed
        ("duplicates_kept_out", _list(_STR, items_nullable=True), False),
        ("purge", _BOOL, False),          # --purge: the affected files rewritten and vacuumed
    ),
    keys=("takedown_id",),
    description="Takedown requests (crawlake forget): what they name, why, and what each removed.",
    engine="auto",
    expectations=(
        *not_null("takedown_id", "requested_at", "run_id", "reason", "urls", "url_prefixes", "domains", "doc_ids",
                  "documents", "removed", "duplicates_kept_out", "purge"),
        unique("takedown_id"),
        between("documents", 0),
    ),
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
    engine="auto",
    # checked per task on its Parquet file, so few columns: the others' NOT NULL is the writer's
    expectations=(
        *not_null("row_key", "label"),
        unique("row_key"),
        in_set("label", (0, 1)),
        between("line_number", 1),
    ),
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
    engine="auto",
    expectations=(
        *not_null("row_key", "source_file", "line_number", "raw_line", "reason", "ingest_time"),
        unique("row_key"),
        between("line_number", 1),
        between("day", 0),
        in_set("reason", ("wrong_field_count", "bad_label", "bad_integer", "bad_hash", "bad_header")),
    ),
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
    engine="spark",
    expectations=(
        *not_null("column", "value", "id", "count"),
        unique("column", "value"),
        unique("column", "id"),           # ids unique per column
        between("id", 2),
        between("count", 0),
    ),
)

SILVER_CLICK_FEATURES = TableSpec(
    "silver", "click_features",
    _s(
        ("row_key", _STR, False),
        ("day", _INT, True),
        ("label", _INT, False),
        ("dense", _list(_FLOAT, items_nullable=False), False),   # float32[13]: log(1 + max(I, 0)), missing → 0
        ("sparse", _list(_INT, items_nullable=False), False),    # int32[26]: silver.click_vocab ids
    ),
    keys=("row_key",),
    partition_by=("day",),
    description="DLRM inputs: transformed integer features, categorical ids, label.",
    engine="spark",
    # validated on pipelines.clicks.features.audit_view: the stored columns plus these
    derived=_s(
        ("dense_size", _INT, True),       # len(dense)
        ("sparse_size", _INT, True),      # len(sparse)
        ("dense_min", _FLOAT, True),      # min(dense)
        ("sparse_min", _INT, True),       # min(sparse)
        ("sparse_headroom", _INT, True),  # min over C columns of (its vocabulary size - 1 - id)
    ),
    expectations=(
        *not_null("row_key", "label", "dense", "sparse"),
        unique("row_key"),
        in_set("label", (0, 1)),
        between("dense_size", 13, 13),
        between("sparse_size", 26, 26),
        between("dense_min", 0),
        between("sparse_min", 0),
        between("sparse_headroom", 0),    # every id below its column's vocabulary size
    ),
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
    engine="auto",
    expectations=(
        *not_null("source_file", "size_bytes", "mtime", "run_id", "lines", "rows", "quarantined",
                  "header_lines", "committed_at"),
        unique("source_file"),
        *(between(c, 0) for c in ("size_bytes", "lines", "rows", "quarantined", "header_lines")),
        at_least("lines", "rows"),
    ),
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
#: What `crawlake forget` adds to the WARC flow's tables (which it deletes from); ingest reads it.
TAKEDOWN_TABLES: tuple[TableSpec, ...] = (OPS_TAKEDOWNS,)
#: Every table; other flows (click logs, ...) add theirs here.
ALL_TABLES: tuple[TableSpec, ...] = WARC_FLOW_TABLES + TAKEDOWN_TABLES + CLICK_TABLES
TABLES: dict[str, TableSpec] = {t.qualified_name: t for t in ALL_TABLES}
