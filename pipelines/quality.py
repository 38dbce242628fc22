"""Data-quality gates with Great Expectations (write-audit-publish).

A stage builds the DataFrame it is about to publish, calls :func:`audit`, and publishes only if
it returns; every expectation's result is appended to ``ops.quality`` either way. A failed suite
raises :class:`~pipelines.stage.QualityGateError` naming the failed expectations.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from pyspark.sql import DataFrame

from pipelines.stage import QualityGateError, StageContext
from schemas.catalog import BRONZE_DOCUMENTS, OPS_QUALITY, TableSpec

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


def _validate(df: DataFrame, make_suite):
    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")  # suites need a live context
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    suite = context.suites.add(make_suite())
    source = context.data_sources.add_spark(name="crawlake")
    asset = source.add_dataframe_asset(name="candidate")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": df})
    return suite, batch.validate(suite)


def audit(ctx: StageContext, stage: str, spec: TableSpec, df: DataFrame) -> None:
    """Validate ``df`` (the table as it would be after publishing) against ``spec``'s suite."""
    suite, result = _validate(df, SUITES[spec.qualified_name])
    now = datetime.now(timezone.utc)
    rows, failed = [], []
    for r in result.results:
        cfg = r.expectation_config
        column = cfg.kwargs.get("column")
        observed = r.result.get("observed_value", r.result.get("unexpected_count"))
        rows.append((ctx.run_id, stage, spec.qualified_name, suite.name, cfg.type, column, bool(r.success),
                     None if observed is None else str(observed), now))
        if not r.success:
            failed.append(f"{cfg.type}({column}): {r.result.get('unexpected_count', observed)} unexpected")
    ctx.lake.append(OPS_QUALITY, ctx.spark.createDataFrame(rows, OPS_QUALITY.schema))
    if failed:
        raise QualityGateError(f"{spec.qualified_name} failed its quality gate, nothing published: " + "; ".join(failed))
