"""Data-quality gates with Great Expectations (write-audit-publish).

A stage builds the DataFrame it is about to publish, calls :func:`audit`, and publishes only if
it returns; every expectation's result is appended to ``ops.quality`` either way. A failed suite
raises :class:`~pipelines.stage.QualityGateError` naming the failed expectations.

The suites are not written here: each table's is declared on its spec
(:attr:`schemas.catalog.TableSpec.expectations`) and built into a Great Expectations suite by
:func:`build_suite`. Spark DataFrames are validated with GX's Spark engine (:func:`audit`); pandas
frames, Parquet files and Arrow data with its pandas engine (:func:`validate_frame`,
:func:`validate_parquet`, :func:`validate_arrow`), which needs no JVM.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timezone
from functools import lru_cache
from typing import TYPE_CHECKING

from schemas.catalog import OPS_QUALITY, TableSpec
from schemas.expectations import Expectation

if TYPE_CHECKING:  # pyspark is imported by the caller that has a DataFrame, not here
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from pipelines.stage import StageContext

#: Expectation type (``Expectation.type``) -> Great Expectations class name in ``great_expectations.expectations``.
_GX_CLASSES = {
    "expect_column_values_to_not_be_null": "ExpectColumnValuesToNotBeNull",
    "expect_column_values_to_be_unique": "ExpectColumnValuesToBeUnique",
    "expect_compound_columns_to_be_unique": "ExpectCompoundColumnsToBeUnique",
    "expect_column_values_to_be_between": "ExpectColumnValuesToBeBetween",
    "expect_column_values_to_be_in_set": "ExpectColumnValuesToBeInSet",
    "expect_column_values_to_match_regex": "ExpectColumnValuesToMatchRegex",
    "expect_column_pair_values_a_to_be_greater_than_b": "ExpectColumnPairValuesAToBeGreaterThanB",
}


def build_suite(name: str, expectations: Iterable[Expectation], context=None):
    """A ``great_expectations.ExpectationSuite`` called ``name`` with one GX expectation per
    declared :class:`~schemas.expectations.Expectation`, in order, added to ``context`` (a GX data
    context; None: a new ephemeral one, which costs about a second). KeyError for a type without
    a GX class here."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    context = context or _context()   # a suite needs a live context
    suite = gx.ExpectationSuite(name=name)
    for e in expectations:
        suite.add_expectation(getattr(gxe, _GX_CLASSES[e.type])(**e.gx_kwargs()))
    return context.suites.add(suite)


def suite_columns(spec: TableSpec) -> list[str]:
    """The columns ``spec``'s suite reads, in table order, then its derived columns: what a
    caller must select to validate (e.g. the ``columns`` of :func:`validate_parquet`)."""
    named = {c for e in spec.expectations for c in e.columns}
    return [c for c in spec.columns + list(spec.derived.names) if c in named]


def _context():
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


@lru_cache(maxsize=None)
def _batch_definition(suite_name: str, expectations: tuple[Expectation, ...], spark):
    """An ephemeral GX context with the suite and a whole-DataFrame batch definition.

    Made once per Spark session and suite: building a context costs seconds, and a stage audits
    once per commit batch.
    """
    context = _context()
    suite = build_suite(suite_name, expectations, context)
    asset = context.data_sources.add_spark(name="crawlake").add_dataframe_asset(name=suite_name)
    return suite, asset.add_batch_definition_whole_dataframe("all")


def _validate(df: DataFrame, spec: TableSpec, driver_max_rows: int) -> list[Result]:
    """``spec``'s suite on ``df``: on the driver when ``df`` has at most ``driver_max_rows`` rows
    (its suite columns collected as Arrow, :func:`validate_arrow` over all rows at once), else
    with GX's Spark engine. Both run the same suite and give the same results; the Spark engine
    costs a Spark job per metric, which on a small batch (an incremental run's few new rows) is
    seconds of fixed cost. One action tells which: the suite columns of at most
    ``driver_max_rows + 1`` rows collected, validated when they are all of ``df``; a larger ``df``
    pays that action before the Spark engine's jobs.

    Spark engine: ``BOOLEAN_ONLY`` results (a third of the Spark jobs of ``SUMMARY``); only a
    failed suite is validated again with ``SUMMARY``, for the counts and examples it reports."""
    # one action, not a count and then a collect (each computes df); bounded: no more than
    # driver_max_rows + 1 rows of a large frame reach the driver
    if driver_max_rows > 0:
        head = df.select(*suite_columns(spec)).limit(driver_max_rows + 1).toArrow()
        if head.num_rows <= driver_max_rows:
            return validate_arrow(head, spec, chunk_rows=driver_max_rows)
    suite, definition = _batch_definition(spec.suite_name, spec.expectations, df.sparkSession)
    batch = definition.get_batch(batch_parameters={"dataframe": df})
    result = batch.validate(suite, result_format="BOOLEAN_ONLY")
    if not result.success:
        result = batch.validate(suite, result_format="SUMMARY")
    return _results(result)


#: One expectation's outcome: (expectation type, column(s) comma-joined or None, success, observed
#: value as text or None).
Result = tuple[str, "str | None", bool, "str | None"]


def _label(kwargs) -> str | None:
    """The ``ops.quality.column`` of a GX expectation: its column, or its columns comma-joined
    (as :attr:`schemas.expectations.Expectation.label`), so that two compound expectations of one
    suite stay apart."""
    if kwargs.get("column") is not None:
        return kwargs["column"]
    if kwargs.get("column_list"):
        return ",".join(kwargs["column_list"])
    if kwargs.get("column_A") is not None:
        return f"{kwargs['column_A']},{kwargs['column_B']}"
    return None


def _results(result) -> list[Result]:
    out = []
    for r in result.results:
        cfg = r.expectation_config
        observed = r.result.get("observed_value", r.result.get("unexpected_count"))
        out.append((cfg.type, _label(cfg.kwargs), bool(r.success), None if observed is None else str(observed)))
    return out


def audit(ctx: StageContext, stage: str, spec: TableSpec, df: DataFrame,
          extra_checks: list[Result] = (), *, record: bool = True) -> list[tuple] | None:
    """Validate ``df`` (what is about to be published, a Spark DataFrame holding at least
    :func:`suite_columns`) against ``spec``'s suite: on the driver up to
    ``quality.driver_max_rows`` rows, else with GX's Spark engine (:func:`_validate`).

    ``extra_checks`` are ``(expectation, column, success, observed)`` results computed by the
    stage itself (e.g. key uniqueness against rows already published); they are recorded and
    gate publishing like the suite's own. Raises QualityGateError naming every failure (after
    recording the results in ``ops.quality``).

    ``record=False``: a passing audit's ``ops.quality`` rows are returned instead of appended, for
    the caller to append beside its own writes (:func:`record_results`); None when recorded here.
    """
    results = _validate(df, spec, ctx.cfg.quality.driver_max_rows)
    return gate(ctx, stage, spec, spec.suite_name, results + list(extra_checks), record=record)


def gate(ctx: StageContext, stage: str, spec: TableSpec, suite_name: str, results: list[Result], *,
         record: bool = True) -> list[tuple] | None:
    """Record ``results`` of ``spec``'s suite in ``ops.quality`` and raise QualityGateError naming
    every failed expectation; ``record=False`` as for :func:`audit`."""
    from pipelines.stage import QualityGateError

    now = datetime.now(timezone.utc)
    rows = [(ctx.run_id, stage, spec.qualified_name, suite_name, expectation, column, success, observed, now)
            for expectation, column, success, observed in results]
    failed = [f"{expectation}({column}): {observed} unexpected"
              for expectation, column, success, observed in results if not success]
    if failed:
        record_results(ctx, rows)
        raise QualityGateError(f"{spec.qualified_name} failed its quality gate, nothing published: " + "; ".join(failed))
    if not record:
        return rows
    record_results(ctx, rows)
    return None


@lru_cache(maxsize=None)
def _pandas_batch_definition(suite_name: str, expectations: tuple[Expectation, ...]):
    """As :func:`_batch_definition`, for pandas DataFrames (made once per process: a Spark task's
    Python worker keeps it for the tasks after)."""
    context = _context()
    suite = build_suite(suite_name, expectations, context)
    asset = context.data_sources.add_pandas(name="crawlake").add_dataframe_asset(name=suite_name)
    return suite, asset.add_batch_definition_whole_dataframe("all")


def validate_frame(frame, spec: TableSpec) -> list[Result]:
    """``spec``'s suite on a pandas DataFrame, without Spark (e.g. inside a task, on the rows it
    wrote). ``BOOLEAN_ONLY`` results; a failed suite is validated again with ``SUMMARY`` for the
    unexpected counts. An expectation whose column the frame lacks fails (observed None).
    Combine the results of several frames with :func:`merge_results`."""
    suite, definition = _pandas_batch_definition(spec.suite_name, spec.expectations)
    batch = definition.get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(suite, result_format="BOOLEAN_ONLY")
    if not result.success:
        result = batch.validate(suite, result_format="SUMMARY")
    return _results(result)


def validate_parquet(source, spec: TableSpec, columns: list[str] | None = None,
                     chunk_rows: int = 1 << 20) -> list[Result]:
    """``spec``'s suite over a Parquet file (path or open binary file), ``chunk_rows`` rows at a
    time (pandas memory), results merged (:func:`merge_results`). ``columns``: those to read
    (None: :func:`suite_columns`). A uniqueness expectation is thereby checked within each chunk;
    the caller states why keys cannot repeat across chunks."""
    import pyarrow.parquet as pq

    columns = suite_columns(spec) if columns is None else columns
    return merge_results(validate_frame(b.to_pandas(), spec)
                         for b in pq.ParquetFile(source).iter_batches(batch_size=chunk_rows, columns=columns))


def _chunks(batches: Iterable, chunk_rows: int):
    """Re-cut record batches into lists of slices of ``chunk_rows`` rows each (the last shorter)."""
    pending, rows = [], 0
    for batch in batches:
        offset = 0
        while offset < batch.num_rows:
            piece = batch.slice(offset, chunk_rows - rows)
            pending.append(piece)
            rows += piece.num_rows
            offset += piece.num_rows
            if rows == chunk_rows:
                yield pending
                pending, rows = [], 0
    if pending:
        yield pending


def validate_arrow(table_or_batches, spec: TableSpec, chunk_rows: int = 1 << 20) -> list[Result]:
    """``spec``'s suite over Arrow data with the pandas engine (no Spark, no JVM), ``chunk_rows``
    rows at a time, results merged (:func:`merge_results`), as :func:`validate_parquet` does.

    ``table_or_batches``: a ``pyarrow.Table``, a ``RecordBatch``, or an iterable of record batches
    (consumed once), holding at least :func:`suite_columns` (``silver.click_features``: its
    derived audit columns too); other columns are not converted. Uniqueness is checked within each
    chunk only: pass ``chunk_rows`` >= the row count for a check over all rows. No rows: the suite
    runs on an empty frame, so every expectation is in the results (passing).

    Returns one :data:`Result` per expectation. Raises ValueError naming the suite columns the
    data lacks; ValueError for ``chunk_rows`` < 1.
    """
    import pyarrow as pa

    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, not {chunk_rows}")
    if isinstance(table_or_batches, pa.Table):
        batches = table_or_batches.to_batches()
    elif isinstance(table_or_batches, pa.RecordBatch):
        batches = [table_or_batches]
    else:
        batches = table_or_batches
    columns = suite_columns(spec)
    parts, schema = [], None

    def selected(batches):
        nonlocal schema
        for batch in batches:
            if missing := [c for c in columns if c not in batch.schema.names]:
                raise ValueError(f"{spec.qualified_name}: the data lacks the suite's columns {missing}")
            batch = batch.select(columns)
            schema = batch.schema
            yield batch

    for pieces in _chunks(selected(batches), chunk_rows):
        parts.append(validate_frame(pa.Table.from_batches(pieces).to_pandas(), spec))
    if not parts:
        if schema is None:
            stored = spec.nullable_arrow
            schema = pa.schema([stored.field(c) if c in stored.names else spec.derived.field(c) for c in columns])
        parts.append(validate_frame(schema.empty_table().to_pandas(), spec))
    return merge_results(parts)


def _is_count(value) -> bool:
    return str(value).lstrip("-").isdigit()


def merge_results(parts) -> list[Result]:
    """The results of one suite over several frames as one: an expectation passes when it passed
    on every frame; numeric observed values (unexpected counts) add up, others keep the first."""
    merged: dict[tuple[str, str | None], list] = {}
    for part in parts:
        for expectation, column, success, observed in part:
            entry = merged.setdefault((expectation, column), [expectation, column, True, None])
            entry[2] = entry[2] and bool(success)
            if observed is None:
                continue
            if entry[3] is None:
                entry[3] = observed
            elif _is_count(entry[3]) and _is_count(observed):
                entry[3] = str(int(entry[3]) + int(observed))
    return [tuple(v) for v in merged.values()]


def record_results(ctx: StageContext, results: list[tuple]) -> None:
    """Append an audit's rows (from ``audit(..., record=False)``) to ``ops.quality``."""
    ctx.lake.append_rows(OPS_QUALITY, results)
