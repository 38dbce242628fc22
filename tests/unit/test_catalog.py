"""The catalog is declared once, in Arrow types; the Spark schemas derived from it are exactly the
ones the tables were created with, and the kernels use the catalog's schemas (no JVM)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from schemas import catalog
from schemas.catalog import ALL_TABLES, CLICK_TABLES, TABLES, TAKEDOWN_TABLES, WARC_FLOW_TABLES, TableSpec
from schemas.expectations import between, not_null, unique

REPO = Path(__file__).resolve().parents[2]


def _spark_literals() -> dict:
    """The catalog's Spark definitions as they were written before the catalog moved to Arrow
    (copied verbatim), the reference the derived ``spec.schema`` must equal."""
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

    def _s(*fields):
        return StructType([StructField(n, t, nullable) for n, t, nullable in fields])

    _STR, _LONG, _INT, _DBL, _BOOL, _TS = StringType(), LongType(), IntegerType(), DoubleType(), BooleanType(), TimestampType()
    documents = _s(
        ("doc_id", _STR, False), ("url", _STR, False), ("url_normalized", _STR, True), ("host", _STR, True),
        ("registered_domain", _STR, True), ("surt_host", _STR, True), ("crawl_date", _TS, True),
        ("crawl_id", _STR, True), ("warc_record_id", _STR, False), ("warc_type", _STR, False),
        ("http_status", _INT, True), ("content_type", _STR, True), ("content_type_source", _STR, True),
        ("content_language", _STR, True), ("last_modified", _STR, True), ("payload_digest", _STR, True),
        ("charset", _STR, True), ("extraction", _STR, True), ("text", _STR, False), ("text_length", _INT, False),
        ("payload_bytes", _LONG, False), ("source_file", _STR, False), ("warc_filename", _STR, False),
        ("record_offset", _LONG, False),
    )
    return {
        "bronze.documents": documents,
        "bronze.quarantine": _s(
            ("source_file", _STR, False), ("warc_filename", _STR, True), ("record_offset", _LONG, False),
            ("warc_record_id", _STR, True), ("url", _STR, True), ("reason", _STR, False), ("detail", _STR, True)),
        "silver.documents_dedup": documents,
        "silver.duplicate_clusters": _s(
            ("doc_id", _STR, False), ("cluster_id", _STR, False), ("cluster_size", _INT, False),
            ("kept", _BOOL, False), ("method", _STR, False), ("jaccard", _DBL, True)),
        "silver.dedup_index": _s(
            ("doc_id", _STR, False), ("text_hash", _STR, False), ("signature", BinaryType(), True),
            ("band_hashes", ArrayType(_LONG, True), False), ("params", _STR, False)),
        "silver.documents_clean": StructType(documents.fields + [
            StructField("language", _STR, True), StructField("language_score", _DBL, True)]),
        "silver.filter_decisions": _s(
            ("doc_id", _STR, False), ("filter", _STR, False), ("value", _DBL, True), ("threshold", _DBL, True),
            ("passed", _BOOL, False), ("detail", _STR, True)),
        "gold.token_sequences": _s(
            ("seq_id", _STR, False), ("pack_group", _INT, False), ("seq_index", _INT, False),
            ("input_ids", ArrayType(_INT, False), False), ("num_tokens", _INT, False),
            ("doc_boundaries", ArrayType(_INT, False), False), ("doc_ids", ArrayType(_STR, False), False),
            ("doc_num_tokens", ArrayType(_INT, False), False), ("tokenizer", _STR, False)),
        "gold.document_tokens": _s(
            ("doc_id", _STR, False), ("num_tokens", _INT, False), ("seq_id", _STR, False),
            ("offset", _INT, False), ("tokenizer", _STR, False)),
        "gold.embeddings": _s(
            ("doc_id", _STR, False), ("chunk_id", _INT, False), ("char_start", _INT, False),
            ("char_end", _INT, False), ("vector", ArrayType(FloatType(), False), False), ("dim", _INT, False),
            ("model", _STR, False), ("model_revision", _STR, False)),
        "gold.index_manifest": _s(
            ("model", _STR, False), ("model_revision", _STR, False), ("shard", _INT, False),
            ("segment", _INT, True),   # added with index segments
            ("path", _STR, False), ("index_type", _STR, False), ("rows", _LONG, False), ("dim", _INT, False),
            ("fingerprint", _STR, False), ("row_hash_sum", _LONG, True),   # added with index segments
            ("ef_search", _INT, False), ("nprobe", _INT, False), ("refine_k_factor", _INT, False),
            ("tuned_recall", _DBL, False), ("embeddings_version", _LONG, False), ("built_at", _TS, False),
            ("build_s", _DBL, False)),
        "ops.runs": _s(
            ("run_id", _STR, False), ("stage", _STR, False), ("started_at", _TS, False), ("duration_s", _DBL, False),
            ("status", _STR, False), ("rows_in", _LONG, True), ("rows_out", _LONG, True),
            ("rows_quarantined", _LONG, True), ("input_versions", MapType(_STR, _LONG), True),
            ("output_versions", MapType(_STR, _LONG), True), ("config_hash", _STR, False),
            ("code_version", _STR, False), ("error", _STR, True),
            ("writers", MapType(_STR, _STR), True),   # added with the lake layer's engine record
            ("notes", _STR, True)),   # added with incremental stages (the stage's notes as JSON)
        "ops.quality": _s(
            ("run_id", _STR, False), ("stage", _STR, False), ("table_name", _STR, False), ("suite", _STR, False),
            ("expectation", _STR, False), ("column", _STR, True), ("success", _BOOL, False),
            ("observed", _STR, True), ("checked_at", _TS, False)),
        "ops.ingest_log": _s(
            ("source_file", _STR, False), ("size_bytes", _LONG, False), ("mtime", _DBL, False),
            ("sha256", _STR, True), ("run_id", _STR, False), ("documents", _LONG, False),
            ("quarantined", _LONG, False), ("skipped", _LONG, False), ("committed_at", _TS, False),
            ("records", _LONG, True), ("duplicates", _LONG, True), ("settings_hash", _STR, True)),
        "ops.takedowns": _s(
            ("takedown_id", _STR, False), ("requested_at", _TS, False), ("run_id", _STR, False),
            ("reason", _STR, False), ("urls", ArrayType(_STR, True), False),
            ("url_prefixes", ArrayType(_STR, True), False), ("domains", ArrayType(_STR, True), False),
            ("doc_ids", ArrayType(_STR, True), False), ("documents", _LONG, False),
            ("removed", MapType(_STR, _LONG), False), ("duplicates_kept_out", ArrayType(_STR, True), False),
            ("purge", _BOOL, False)),
        "bronze.clicks": _s(
            ("row_key", _STR, False), ("source_file", _STR, False), ("line_number", _LONG, False),
            ("day", _INT, True), ("ingest_time", _TS, False), ("label", _INT, False),
            *[(f"I{i}", _LONG, True) for i in range(1, 14)], *[(f"C{i}", _STR, True) for i in range(1, 27)]),
        "bronze.clicks_quarantine": _s(
            ("row_key", _STR, False), ("source_file", _STR, False), ("line_number", _LONG, False),
            ("day", _INT, True), ("raw_line", _STR, False), ("reason", _STR, False), ("detail", _STR, True),
            ("ingest_time", _TS, False)),
        "silver.click_vocab": _s(
            ("column", _STR, False), ("value", _STR, False), ("id", _INT, False), ("count", _LONG, False)),
        "silver.click_features": _s(
            ("row_key", _STR, False), ("day", _INT, True), ("label", _INT, False),
            ("dense", ArrayType(FloatType(), False), False), ("sparse", ArrayType(_INT, False), False)),
        "ops.clicks_ingest_log": _s(
            ("source_file", _STR, False), ("size_bytes", _LONG, False), ("mtime", _DBL, False),
            ("run_id", _STR, False), ("lines", _LONG, False), ("rows", _LONG, False),
            ("quarantined", _LONG, False), ("header_lines", _LONG, False), ("committed_at", _TS, False)),
    }


def test_the_catalog_lists_the_20_tables_once():
    assert len(ALL_TABLES) == 20 == len(TABLES) == len(set(TABLES))
    assert ALL_TABLES == WARC_FLOW_TABLES + TAKEDOWN_TABLES + CLICK_TABLES
    assert set(TABLES) == set(_spark_literals())
    assert TABLES["bronze.documents"] is catalog.BRONZE_DOCUMENTS


@pytest.mark.parametrize("spec", ALL_TABLES, ids=lambda s: s.qualified_name)
def test_spark_schema_derived_from_arrow_equals_the_literal_definition(spec: TableSpec):
    literal = _spark_literals()[spec.qualified_name]
    assert spec.schema == literal
    assert spec.schema.json() == literal.json()   # names, order, types, nullability, containsNull
    assert spec.columns == literal.fieldNames()
    assert spec.schema is spec.schema             # derived once


@pytest.mark.parametrize("spec", ALL_TABLES, ids=lambda s: s.qualified_name)
def test_arrow_schemas_are_what_spark_converts_to(spec: TableSpec):
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructField, StructType

    literal = _spark_literals()[spec.qualified_name]
    assert spec.arrow.equals(to_arrow_schema(literal))
    # pipelines.lake.arrow_schema as it was: every column nullable, list items and map values as declared
    before = to_arrow_schema(StructType([StructField(f.name, f.dataType, True) for f in literal]))
    assert spec.nullable_arrow.equals(before)
    # what a Spark path write stores in the Delta log: array elements and map values nullable too;
    # the same but for the three tables whose list items are NOT NULL
    stored = json.loads(literal.json())
    for f in stored["fields"]:
        f["nullable"] = True
        if isinstance(f["type"], dict):
            f["type"]["containsNull" if f["type"]["type"] == "array" else "valueContainsNull"] = True
    in_log = to_arrow_schema(StructType.fromJson(stored))
    if spec.qualified_name in ("gold.token_sequences", "gold.embeddings", "silver.click_features"):
        assert not spec.nullable_arrow.equals(in_log)
        assert [f.type.value_type if pa.types.is_list(f.type) else f.type for f in spec.nullable_arrow] == \
               [f.type.value_type if pa.types.is_list(f.type) else f.type for f in in_log]
    else:
        assert spec.nullable_arrow.equals(in_log)


def test_arrow_types_as_declared():
    docs = catalog.BRONZE_DOCUMENTS.arrow
    assert docs.field("crawl_date").type == pa.timestamp("us", tz="UTC")
    assert docs.field("http_status").type == pa.int32() and docs.field("http_status").nullable
    assert docs.field("payload_bytes").type == pa.int64() and not docs.field("payload_bytes").nullable
    vector = catalog.GOLD_EMBEDDINGS.arrow.field("vector").type
    assert vector.value_type == pa.float32() and not vector.value_field.nullable
    assert catalog.SILVER_DEDUP_INDEX.arrow.field("signature").type == pa.binary()
    versions = catalog.OPS_RUNS.arrow.field("input_versions").type
    assert versions == pa.map_(pa.string(), pa.int64()) and versions.item_field.nullable
    nullable = catalog.GOLD_TOKEN_SEQUENCES.nullable_arrow
    assert all(f.nullable for f in nullable)
    assert not nullable.field("input_ids").type.value_field.nullable   # items as declared
    assert catalog.OPS_RUNS.nullable_arrow.field("input_versions").type.item_field.nullable


def test_import_without_pyspark():
    """schemas.catalog, the quality module and the kernels that use the catalog load where no
    pyspark is installed (a GPU box, a loader process)."""
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "import schemas.catalog, schemas, pipelines.quality, pipelines.kernels.tokens, pipelines.kernels.clicks\n"
            "assert schemas.catalog.GOLD_EMBEDDINGS.nullable_arrow.names[0] == 'doc_id'\n"
            "try:\n"
            "    schemas.catalog.GOLD_EMBEDDINGS.schema\n"
            "except ImportError:\n"
            "    print('spark schema needs pyspark')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "spark schema needs pyspark"


ENGINES = {
    "auto": {"bronze.documents", "bronze.quarantine", "silver.documents_dedup", "silver.duplicate_clusters",
             "silver.dedup_index", "silver.documents_clean", "silver.filter_decisions",
             "gold.token_sequences", "gold.document_tokens", "gold.embeddings", "ops.runs", "ops.quality",
             "ops.ingest_log", "ops.takedowns", "bronze.clicks", "bronze.clicks_quarantine", "ops.clicks_ingest_log",
             "gold.index_manifest"},
    "spark": {"silver.click_vocab", "silver.click_features"},
}


def test_each_table_names_its_committing_engine():
    assert {name: spec.engine for name, spec in TABLES.items()} == \
           {name: engine for engine, names in ENGINES.items() for name in names}


def test_names_keys_and_layout_unchanged():
    clicks = catalog.BRONZE_CLICKS
    assert clicks.qualified_name == "bronze.clicks" and clicks.suite_name == "bronze_clicks"
    assert clicks.keys == ("row_key",) and clicks.partition_by == ("day",)
    assert clicks.properties == (("delta.dataSkippingNumIndexedCols", "6"),)
    assert clicks.path_under("/lake/") == "/lake/bronze/clicks"
    assert catalog.SILVER_DOCUMENTS_CLEAN.columns[-2:] == ["language", "language_score"]
    for spec in ALL_TABLES:
        assert set(spec.keys) <= set(spec.columns) and set(spec.partition_by) <= set(spec.columns)
        assert spec.description


def _spec(**changes) -> TableSpec:
    fields = dict(layer="x", name="t", arrow=pa.schema([pa.field("k", pa.string(), nullable=False),
                                                         pa.field("n", pa.int64())]),
                  keys=("k",), engine="auto", expectations=(*not_null("k"), unique("k")))
    return TableSpec(**{**fields, **changes})


def test_spec_checks_itself():
    assert _spec().columns == ["k", "n"]
    with pytest.raises(ValueError, match="engine"):
        _spec(engine="duckdb")
    with pytest.raises(ValueError, match="key columns"):
        _spec(keys=("nope",))
    with pytest.raises(ValueError, match="quality suite"):
        _spec(expectations=())
    with pytest.raises(ValueError, match=r"expect_column_values_to_be_between names \['m'\]"):
        _spec(expectations=(between("m", 0),))
    derived = _spec(derived=pa.schema([("m", pa.int32())]), expectations=(between("m", 0),))
    assert derived.derived.names == ["m"]
    odd = _spec(arrow=pa.schema([pa.field("k", pa.string(), nullable=False), pa.field("n", pa.int8())]))
    with pytest.raises(TypeError, match="int8"):
        odd.schema   # noqa: B018 (a type the catalog does not use is not guessed)


def test_kernel_schemas_are_the_catalogs():
    from pipelines.kernels import clicks, tokens
    from pipelines.kernels.filters import engine

    assert tokens.SEQUENCE_SCHEMA is catalog.GOLD_TOKEN_SEQUENCES.nullable_arrow
    assert tokens.DOCUMENT_TOKENS_SCHEMA is catalog.GOLD_DOCUMENT_TOKENS.nullable_arrow
    assert clicks.FEATURE_SCHEMA is catalog.SILVER_CLICK_FEATURES.nullable_arrow
    assert engine.DECISION_SCHEMA.equals(catalog.SILVER_FILTER_DECISIONS.nullable_arrow)
    rows = clicks.ROW_SCHEMA
    assert rows.names[0] == "kind"
    for name in rows.names[1:]:
        spec = catalog.BRONZE_CLICKS if name in catalog.BRONZE_CLICKS.columns else catalog.BRONZE_CLICKS_QUARANTINE
        assert rows.field(name).equals(spec.nullable_arrow.field(name))
    assert set(rows.names) - {"kind"} == (set(catalog.BRONZE_CLICKS.columns)
                                          | set(catalog.BRONZE_CLICKS_QUARANTINE.columns)) - {"ingest_time"}
