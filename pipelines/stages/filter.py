"""filter: ``silver.documents_dedup`` → ``silver.documents_clean`` + ``silver.filter_decisions``.

Every filter that runs on a document leaves a decision row (value, threshold, passed); a document
is clean when all of its decisions passed. Rules live in :mod:`pipelines.kernels.filters`.
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import functions as F

from pipelines.config import FilterConfig
from pipelines.kernels.filters import FilterParams, GopherParams, decide_batch
from pipelines.stage import StageContext, StageResult
from schemas.catalog import SILVER_DOCUMENTS_CLEAN, SILVER_DOCUMENTS_DEDUP, SILVER_FILTER_DECISIONS


def filter_params(cfg: FilterConfig) -> FilterParams:
    gopher = None
    if cfg.gopher.enabled:
        g = cfg.gopher.model_dump()
        g.pop("enabled")
        g["unsegmented_languages"] = tuple(g["unsegmented_languages"])
        gopher = GopherParams(**g)
    return FilterParams(languages=tuple(cfg.languages), min_language_score=cfg.min_language_score, gopher=gopher)


def _decide_partition(batches, params: FilterParams):
    for batch in batches:
        yield decide_batch(batch, params)


def run(ctx: StageContext) -> StageResult:
    lake = ctx.lake
    docs = lake.read(SILVER_DOCUMENTS_DEDUP)
    params = filter_params(ctx.cfg.filter)
    lake.overwrite(SILVER_FILTER_DECISIONS, docs.select("doc_id", "text", "http_status").mapInArrow(
        partial(_decide_partition, params=params), SILVER_FILTER_DECISIONS.schema))
    decisions = lake.read(SILVER_FILTER_DECISIONS)

    failed = decisions.filter(~F.col("passed")).select("doc_id").distinct()
    language = decisions.filter(F.col("filter") == "language").select(
        "doc_id", F.col("detail").alias("language"), F.col("value").alias("language_score"))
    lake.overwrite(SILVER_DOCUMENTS_CLEAN, docs.join(failed, "doc_id", "left_anti").join(language, "doc_id", "left"))

    funnel = {r["filter"]: r["removed"] for r in decisions.groupBy("filter")
              .agg(F.sum(F.when(F.col("passed"), 0).otherwise(1)).alias("removed")).collect() if r["removed"]}
    return StageResult(
        rows_in=docs.count(), rows_out=lake.read(SILVER_DOCUMENTS_CLEAN).count(),
        input_versions={SILVER_DOCUMENTS_DEDUP.qualified_name: lake.version(SILVER_DOCUMENTS_DEDUP)},
        output_versions={t.qualified_name: lake.version(t) for t in (SILVER_DOCUMENTS_CLEAN, SILVER_FILTER_DECISIONS)},
        notes={"failed_by_filter": dict(sorted(funnel.items()))},
    )
