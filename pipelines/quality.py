"""Data-quality gates with Great Expectations (write-audit-publish).

A stage builds the DataFrame it is about to publish, calls :func:`audit`, and publishes only if
it returns; every expectation's result is appended to ``ops.quality`` either way. A failed suite
raises :class:`~pipelines.stage.QualityGateError` naming the failed expectations.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from functools import lru_cache

from pyspark.sql import DataFrame

from pipelines.stage import QualityGateError, StageContext
from schemas.catalog import BRONZE_DOCUMENTS, OPS_QUALITY, TableSpec
from schemas.catalog import BRONZE_CLICKS, SILVER_CLICK_FEATURES, SILVER_CLICK_VOCAB

VALID_HTTP_STATUS = (100, 599)


def bronze_documents_suite():
    """Expectations on ``bronze.documents``: keys present and unique, sane status and lengths."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name="bronze_documents")
    for column in ("doc_id", "url", "warc_record_id", "source_file", "text"):
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=column))
    suite.add_expectation(gxe.ExpectColumnValuesToBeUnique(column="doc_id"))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(
        column="http_status", min_value=VALID_HTTP_STATUS[0], max_value=VALID_HTTP_STATUS[1]))  # nulls (WET) pass
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="text_length", min_value=0))
    return suite


SUITES = {BRONZE_DOCUMENTS.qualified_name: bronze_documents_suite}


def bronze_clicks_suite():
    """Expectations on new ``bronze.clicks`` rows: keys present and unique, label in {0, 1}, positions >= 1."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name="bronze_clicks")
    for column in ("row_key", "label"):  # the other columns' NOT NULL is Delta's (table schema)
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=column))
    suite.add_expectation(gxe.ExpectColumnValuesToBeUnique(column="row_key"))
    suite.add_expectation(gxe.ExpectColumnValuesToBeInSet(column="label", value_set=[0, 1]))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="line_number", min_value=1))
    return suite


def click_vocab_suite():
    """Expectations on ``silver.click_vocab``: one id per (column, value), ids unique per column, >= 2."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name="silver_click_vocab")
    for column in ("column", "value", "id", "count"):
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=column))
    suite.add_expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=["column", "value"]))
    suite.add_expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=["column", "id"]))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="id", min_value=2))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="count", min_value=0))
    return suite


def click_features_suite():
    """Expectations on ``silver.click_features``, validated with the columns
    :func:`pipelines.clicks.features.audit_view` derives: no nulls, label in {0, 1}, 13 dense
    values >= 0, 26 sparse ids each in [0, its column's vocabulary size) (``sparse_headroom`` =
    min over columns of size - 1 - id)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name="silver_click_features")
    for column in ("row_key", "label", "dense", "sparse"):
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=column))
    suite.add_expectation(gxe.ExpectColumnValuesToBeUnique(column="row_key"))
    suite.add_expectation(gxe.ExpectColumnValuesToBeInSet(column="label", value_set=[0, 1]))
    for column, size in (("dense_size", 13), ("sparse_size", 26)):
        suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column=column, min_value=size, max_value=size))
    for column in ("dense_min", "sparse_min", "sparse_headroom"):
        suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column=column, min_value=0))
    return suite


SUITES[BRONZE_CLICKS.qualified_name] = bronze_clicks_suite
SUITES[SILVER_CLICK_VOCAB.qualified_name] = click_vocab_suite
SUITES[SILVER_CLICK_FEATURES.qualified_name] = click_features_suite


@lru_cache(maxsize=None)
def _batch_definition(suite_name: str, make_suite, spark):
    """An ephemeral GX context with ``make_suite``'s suite and a whole-DataFrame batch definition.

    Made once per Spark session and suite: building a context costs seconds, and a stage audits
    once per commit batch.
    """
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")  # suites need a live context
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    suite = context.suites.add(make_suite())
    source = context.data_sources.add_spark(name="crawlake")
    asset = source.add_dataframe_asset(name=suite_name)
    return suite, asset.add_batch_definition_whole_dataframe("all")


def _validate(df: DataFrame, make_suite):
    """Validate with ``BOOLEAN_ONLY`` results (a third of the Spark jobs of ``SUMMARY``); only a
    failed suite is validated again with ``SUMMARY``, for the counts and examples it reports."""
    suite, definition = _batch_definition(make_suite.__name__, make_suite, df.sparkSession)
    batch = definition.get_batch(batch_parameters={"dataframe": df})
    result = batch.validate(suite, result_format="BOOLEAN_ONLY")
    if not result.success:
        result = batch.validate(suite, result_format="SUMMARY")
    return suite, result


#: One expectation's outcome: (expectation type, column or None, success, observed value as text or None).
Result = tuple[str, "str | None", bool, "str | None"]


def _results(result) -> list[Result]:
    out = []
    for r in result.results:
        cfg = r.expectation_config
        observed = r.result.get("observed_value", r.result.get("unexpected_count"))
        out.append((cfg.type, cfg.kwargs.get("column"), bool(r.success), None if observed is None else str(observed)))
    return out


def audit(ctx: StageContext, stage: str, spec: TableSpec, df: DataFrame,
          extra_checks: list[Result] = (), *, record: bool = True) -> list[tuple] | None:
    """Validate ``df`` (what is about to be published) against ``spec``'s suite.

    ``extra_checks`` are ``(expectation, column, success, observed)`` results computed by the
    stage itself (e.g. key uniqueness against rows already published); they are recorded and
    gate publishing like the suite's own. Raises QualityGateError naming every failure (after
    recording the results in ``ops.quality``).

    ``record=False``: a passing audit's ``ops.quality`` rows are returned instead of appended, for
    the caller to append beside its own writes (:func:`record_results`); None when recorded here.
    """
    suite, result = _validate(df, SUITES[spec.qualified_name])
    return gate(ctx, stage, spec, suite.name, _results(result) + list(extra_checks), record=record)


def gate(ctx: StageContext, stage: str, spec: TableSpec, suite_name: str, results: list[Result], *,
         record: bool = True) -> list[tuple] | None:
    """Record ``results`` of ``spec``'s suite in ``ops.quality`` and raise QualityGateError naming
    every failed expectation; ``record=False`` as for :func:`audit`."""
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
def _pandas_batch_definition(suite_name: str, make_suite):
    """As :func:`_batch_definition`, for pandas DataFrames (made once per process: a Spark task's
    Python worker keeps it for the tasks after)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    suite = context.suites.add(make_suite())
    asset = context.data_sources.add_pandas(name="crawlake").add_dataframe_asset(name=suite_name)
    return suite, asset.add_batch_definition_whole_dataframe("all")


def validate_frame(frame, spec: TableSpec) -> list[Result]:
    """``spec``'s suite on a pandas DataFrame, without Spark (e.g. inside a task, on the rows it
    wrote). ``BOOLEAN_ONLY`` results; a failed suite is validated again with ``SUMMARY`` for the
    unexpected counts. Combine the results of several frames with :func:`merge_results`."""
    suite, definition = _pandas_batch_definition(spec.qualified_name, SUITES[spec.qualified_name])
    batch = definition.get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(suite, result_format="BOOLEAN_ONLY")
    if not result.success:
        result = batch.validate(suite, result_format="SUMMARY")
    return _results(result)


def validate_parquet(source, spec: TableSpec, columns: list[str], chunk_rows: int = 1 << 20) -> list[Result]:
    """``spec``'s suite over a Parquet file (path or open binary file), ``chunk_rows`` rows at a
    time (pandas memory), results merged (:func:`merge_results`). A uniqueness expectation is
    thereby checked within each chunk; the caller states why keys cannot repeat across chunks."""
    import pyarrow.parquet as pq

    return merge_results(validate_frame(b.to_pandas(), spec)
                         for b in pq.ParquetFile(source).iter_batches(batch_size=chunk_rows, columns=columns))


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
