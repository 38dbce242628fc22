"""Every table's quality suite, declared on its spec, runs with Great Expectations' pandas engine
on Arrow data: it passes on valid rows and names the expectation and column a bad row breaks."""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import quality
from schemas import catalog
from schemas.catalog import ALL_TABLES, TableSpec
from schemas.expectations import AtLeast, Between, Expectation, InSet, MatchesRegex, NotNull, Unique

NOW = datetime(2024, 5, 1, tzinfo=timezone.utc)
_REGEX_SAMPLES = {  # a value matching each pattern the catalog uses, for row i
    r"^[0-9a-f]{64}$": lambda i: f"{i:064x}",
    r"^[a-z][a-z0-9_]*$": lambda i: f"code_{i}",
    r"^[0-9]{5,}-[0-9]{8,}$": lambda i: f"00000-{i:08d}",
}


def _schema(spec: TableSpec) -> pa.Schema:
    """The stored columns (as written) plus the derived audit columns."""
    return pa.schema(list(spec.nullable_arrow) + list(spec.derived))


def _default(t: pa.DataType, column: str, i: int):
    if pa.types.is_string(t):
        return f"{column}-{i}"
    if pa.types.is_integer(t):
        return i
    if pa.types.is_floating(t):
        return 0.5
    if pa.types.is_boolean(t):
        return True
    if pa.types.is_timestamp(t):
        return NOW
    if pa.types.is_binary(t):
        return b"\x01\x02"
    if pa.types.is_list(t):
        return [_default(t.value_type, column, i)]
    if pa.types.is_map(t):
        return [("bronze.documents", _default(t.item_type, column, i))]
    raise AssertionError(f"no sample value for {t}")


def _valid_rows(spec: TableSpec, n: int = 2) -> list[dict]:
    """``n`` rows that keep every expectation of ``spec``'s suite, with distinct keys."""
    schema = _schema(spec)
    rows = []
    for i in range(n):
        row = {f.name: _default(f.type, f.name, i) for f in schema}
        for e in spec.expectations:
            if isinstance(e, InSet):
                row[e.column] = e.values[0]
            elif isinstance(e, Between):
                low = e.min_value if e.min_value is not None else e.max_value
                high = e.max_value if e.max_value is not None else math.inf
                row[e.column] = low + i if low + i <= high else low
            elif isinstance(e, MatchesRegex):
                row[e.column] = _REGEX_SAMPLES[e.regex](i)
        for e in spec.expectations:
            if isinstance(e, AtLeast):
                row[e.column_a] = row[e.column_b] + 10
        rows.append(row)
    return rows


def _table(spec: TableSpec, rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=_schema(spec))


def _break(spec: TableSpec, e: Expectation, pair: list[dict]) -> list[tuple[str, str]]:
    """Change two valid rows so that ``e`` fails on them; returns the (expectation, column) of each
    unexpected row this makes: ``e``'s, and an :class:`AtLeast`'s a bound also breaks (a count
    below zero is also below the count it must exceed)."""
    first = pair[0]
    if isinstance(e, NotNull):
        first[e.column] = None
    elif isinstance(e, Unique):
        pair[1].update({c: first[c] for c in e.key})
        return [(e.type, e.label)] * 2   # both copies are unexpected
    elif isinstance(e, Between):
        first[e.column] = e.min_value - 1 if e.min_value is not None else e.max_value + 1
        return [(e.type, e.label)] + [(a.type, a.label) for a in spec.expectations if isinstance(a, AtLeast)
                                      and first[a.column_a] < first[a.column_b]]
    elif isinstance(e, InSet):
        first[e.column] = "not-in-set" if isinstance(e.values[0], str) else max(e.values) + 100
    elif isinstance(e, MatchesRegex):
        first[e.column] = "Not Matching!"
    elif isinstance(e, AtLeast):
        first[e.column_b] = first[e.column_a] + 1
    else:
        raise AssertionError(f"no way to break {e}")
    return [(e.type, e.label)]


def _by_key(results) -> dict:
    return {(expectation, column): (success, observed) for expectation, column, success, observed in results}


@pytest.mark.parametrize("spec", ALL_TABLES, ids=lambda s: s.qualified_name)
def test_every_table_has_a_suite_on_its_own_columns(spec: TableSpec):
    assert spec.expectations
    allowed = set(spec.columns) | set(spec.derived.names)
    for e in spec.expectations:
        assert set(e.columns) <= allowed, (spec.qualified_name, e)
    for key in spec.keys:   # the keys are never null (ops.quality's column is: table-wide results)
        assert NotNull(key) in spec.expectations or spec.arrow.field(key).nullable, (spec.qualified_name, key)
    if spec.qualified_name != "ops.quality":   # its declared keys repeat across commit batches (see its suite)
        assert Unique(spec.keys) in spec.expectations
    if spec.derived.names:   # derived audit columns are documented: only silver.click_features has them
        assert spec is catalog.SILVER_CLICK_FEATURES
    suite = quality.build_suite(spec.suite_name, spec.expectations)
    assert suite.name == spec.suite_name and len(suite.expectations) == len(spec.expectations)


@pytest.mark.parametrize("spec", ALL_TABLES, ids=lambda s: s.qualified_name)
def test_suite_passes_on_valid_rows_and_names_what_a_bad_row_breaks(spec: TableSpec):
    results = quality.validate_arrow(_table(spec, _valid_rows(spec)), spec)
    assert [(r[0], r[1]) for r in results if not r[2]] == []
    assert set(_by_key(results)) == {(e.type, e.label) for e in spec.expectations}
    # one pair of valid rows per expectation, each pair changed to break its expectation only: every
    # expectation fails, named with its column(s), counting exactly the rows made to break it
    rows = _valid_rows(spec, 2 * len(spec.expectations))
    broken = Counter(key for k, e in enumerate(spec.expectations) for key in _break(spec, e, rows[2 * k:2 * k + 2]))
    results = _by_key(quality.validate_arrow(_table(spec, rows), spec))
    assert results == {(e.type, e.label): (False, str(broken[(e.type, e.label)])) for e in spec.expectations}


EXISTING = {  # the four suites that gated stages before every table had one, kept as they were
    "bronze.documents": [
        ("expect_column_values_to_not_be_null", {"column": "doc_id"}),
        ("expect_column_values_to_not_be_null", {"column": "url"}),
        ("expect_column_values_to_not_be_null", {"column": "warc_record_id"}),
        ("expect_column_values_to_not_be_null", {"column": "source_file"}),
        ("expect_column_values_to_not_be_null", {"column": "text"}),
        ("expect_column_values_to_be_unique", {"column": "doc_id"}),
        ("expect_column_values_to_be_between", {"column": "http_status", "min_value": 100, "max_value": 599}),
        ("expect_column_values_to_be_between", {"column": "text_length", "min_value": 0}),
    ],
    "bronze.clicks": [
        ("expect_column_values_to_not_be_null", {"column": "row_key"}),
        ("expect_column_values_to_not_be_null", {"column": "label"}),
        ("expect_column_values_to_be_unique", {"column": "row_key"}),
        ("expect_column_values_to_be_in_set", {"column": "label", "value_set": [0, 1]}),
        ("expect_column_values_to_be_between", {"column": "line_number", "min_value": 1}),
    ],
    "silver.click_vocab": [
        *[("expect_column_values_to_not_be_null", {"column": c}) for c in ("column", "value", "id", "count")],
        ("expect_compound_columns_to_be_unique", {"column_list": ["column", "value"]}),
        ("expect_compound_columns_to_be_unique", {"column_list": ["column", "id"]}),
        ("expect_column_values_to_be_between", {"column": "id", "min_value": 2}),
        ("expect_column_values_to_be_between", {"column": "count", "min_value": 0}),
    ],
    "silver.click_features": [
        *[("expect_column_values_to_not_be_null", {"column": c}) for c in ("row_key", "label", "dense", "sparse")],
        ("expect_column_values_to_be_unique", {"column": "row_key"}),
        ("expect_column_values_to_be_in_set", {"column": "label", "value_set": [0, 1]}),
        ("expect_column_values_to_be_between", {"column": "dense_size", "min_value": 13, "max_value": 13}),
        ("expect_column_values_to_be_between", {"column": "sparse_size", "min_value": 26, "max_value": 26}),
        *[("expect_column_values_to_be_between", {"column": c, "min_value": 0})
          for c in ("dense_min", "sparse_min", "sparse_headroom")],
    ],
}


@pytest.mark.parametrize("name", sorted(EXISTING))
def test_the_four_gating_suites_are_kept_exactly(name: str):
    spec = catalog.TABLES[name]
    assert [(e.type, e.gx_kwargs()) for e in spec.expectations] == EXISTING[name]
    assert {c for e in spec.expectations for c in e.columns} == \
           {c for _, kwargs in EXISTING[name] for c in kwargs.get("column_list", [kwargs.get("column")])}


def test_click_features_suite_checks_audit_view_columns():
    spec = catalog.SILVER_CLICK_FEATURES
    assert spec.derived.names == ["dense_size", "sparse_size", "dense_min", "sparse_min", "sparse_headroom"]
    assert quality.suite_columns(spec) == ["row_key", "label", "dense", "sparse", *spec.derived.names]
    stored_only = pa.Table.from_pylist(_valid_rows(spec), schema=_schema(spec)).select(spec.columns)
    with pytest.raises(ValueError, match="dense_size"):
        quality.validate_arrow(stored_only, spec)


def test_validate_arrow_chunks_batches_and_empty_input():
    spec = catalog.BRONZE_CLICKS
    keys = ["a", "b", "c", "b"]
    table = pa.table({"row_key": keys, "label": pa.array([0, 1, 0, 1], pa.int32()), "line_number": [1, 2, 3, 4],
                      "extra": ["ignored"] * 4})
    whole = _by_key(quality.validate_arrow(table, spec))
    assert whole[("expect_column_values_to_be_unique", "row_key")] == (False, "2")
    # chunks of 2 rows: the repeat falls in two chunks, so uniqueness is checked within each only
    assert _by_key(quality.validate_arrow(table, spec, chunk_rows=2))[("expect_column_values_to_be_unique", "row_key")][0]
    # an iterable of batches is re-cut into chunks: 3 + 1 rows hold both "b"s in the first chunk
    batches = iter(table.to_batches(max_chunksize=1))
    assert _by_key(quality.validate_arrow(batches, spec, chunk_rows=4))[("expect_column_values_to_be_unique", "row_key")] \
        == (False, "2")
    bad_label = table.set_column(1, "label", pa.array([0, 1, 7, 1], pa.int32()))
    merged = _by_key(quality.validate_arrow(bad_label.to_batches(max_chunksize=1)[2], spec))
    assert merged[("expect_column_values_to_be_in_set", "label")] == (False, "1")
    empty = quality.validate_arrow([], spec)
    assert len(empty) == len(spec.expectations) and all(r[2] for r in empty)
    with pytest.raises(ValueError, match=r"\['line_number'\]"):
        quality.validate_arrow(table.drop_columns(["line_number"]), spec)
    with pytest.raises(ValueError, match="chunk_rows"):
        quality.validate_arrow(table, spec, chunk_rows=0)


def test_validate_parquet_reads_the_suites_columns(tmp_path):
    spec = catalog.SILVER_CLICK_VOCAB
    rows = [{"column": "C1", "value": "aa", "id": 2, "count": 5}, {"column": "C1", "value": "bb", "id": 2, "count": 3}]
    path = tmp_path / "vocab.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=spec.nullable_arrow), path)
    results = _by_key(quality.validate_parquet(str(path), spec, chunk_rows=1))
    assert results[("expect_compound_columns_to_be_unique", "column,id")][0]   # one row per chunk
    results = _by_key(quality.validate_parquet(str(path), spec))
    # the two compound keys are two results, each naming its columns
    assert results[("expect_compound_columns_to_be_unique", "column,id")] == (False, "2")
    assert results[("expect_compound_columns_to_be_unique", "column,value")] == (True, "0")


class _Lake:
    def __init__(self):
        self.appended = []

    def append_rows(self, spec, rows):
        self.appended.append((spec.qualified_name, rows))


class _Ctx:
    run_id = "r1"

    def __init__(self):
        self.lake = _Lake()


def test_gate_records_and_raises_naming_expectation_and_column():
    from pipelines.stage import QualityGateError

    spec = catalog.GOLD_EMBEDDINGS
    rows = _valid_rows(spec)
    rows[0]["char_end"] = rows[0]["char_start"] - 1
    results = quality.validate_arrow(_table(spec, rows), spec)
    ctx = _Ctx()
    with pytest.raises(QualityGateError,
                       match=r"gold.embeddings failed .*expect_column_pair_values_a_to_be_greater_than_b\(char_end,char_start\)"):
        quality.gate(ctx, "embed", spec, spec.suite_name, results)
    [(table, recorded)] = ctx.lake.appended
    assert table == "ops.quality" and len(recorded) == len(spec.expectations)
    assert {r[3] for r in recorded} == {"gold_embeddings"}
    ok = quality.validate_arrow(_table(spec, _valid_rows(spec)), spec)
    assert len(quality.gate(_Ctx(), "embed", spec, spec.suite_name, ok, record=False)) == len(spec.expectations)


def test_merge_results_adds_counts_and_fails_if_any_part_failed():
    a = [("expect_x", "c", True, "0"), ("expect_y", None, True, "ok")]
    b = [("expect_x", "c", False, "3"), ("expect_y", None, True, "later")]
    assert quality.merge_results([a, b]) == [("expect_x", "c", False, "3"), ("expect_y", None, True, "ok")]
