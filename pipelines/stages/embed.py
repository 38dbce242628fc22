"""embed: ``silver.documents_clean`` → ``gold.embeddings``, one set of vectors per model revision.

The kernel (:mod:`pipelines.kernels.embed`) runs in Spark's Python workers through
``mapInArrow``, one model per worker process; ``embed.engine: dask`` runs the same kernel on a
Dask cluster instead (:mod:`pipelines.engines.dask_embed`). On GPU executors set
``spark.executor.resource.gpu.amount`` and ``spark.task.resource.gpu.amount`` (see
``conf/databricks.yaml``).

Refresh (the default): only documents that have no vectors for this (model, revision) are embedded,
and vectors of documents that left ``silver.documents_clean`` are deleted, so a re-run with nothing
new embeds nothing. Rows are inserted with an insert-only MERGE on (doc_id, chunk_id, model,
model_revision): a retried run never duplicates a vector, and another model's or revision's
vectors stay beside them. ``embed.refresh: false`` re-embeds every document of this revision.
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import functions as F

from pipelines.kernels.embed import EmbedParams, embed_batch
from pipelines.stage import StageContext, StageResult
from pipelines.lake import sql_string
from schemas.catalog import GOLD_EMBEDDINGS, SILVER_DOCUMENTS_CLEAN


def revision_predicate(params: EmbedParams, alias: str = "") -> str:
    """SQL predicate selecting this model revision's rows of ``gold.embeddings`` (columns
    prefixed ``alias.`` when given)."""
    p = f"{alias}." if alias else ""
    return f"{p}model = {sql_string(params.model_label)} AND {p}model_revision = {sql_string(params.model_revision)}"


def upgrade_schema(lake) -> None:
    """Tables written before vectors carried ``model_revision`` get it, as "unrecorded"."""
    if lake.exists(GOLD_EMBEDDINGS) and "model_revision" not in lake.read(GOLD_EMBEDDINGS).columns:
        old = lake.read(GOLD_EMBEDDINGS).withColumn("model_revision", F.lit("unrecorded")).localCheckpoint()
        lake.overwrite(GOLD_EMBEDDINGS, old, replace_schema=True)


def _embed_partition(batches, params: EmbedParams):
    for batch in batches:
        yield embed_batch(batch, params)


def run(ctx: StageContext) -> StageResult:
    lake, cfg = ctx.lake, ctx.cfg.embed
    params = EmbedParams.resolve(cfg)  # the embed section, and its model's revision resolved once, on the driver
    mine = revision_predicate(params)
    upgrade_schema(lake)
    if cfg.engine == "dask":
        from pipelines.engines.dask_embed import embed_with_dask

        counts = embed_with_dask(lake, params, cfg)
    else:
        counts = _embed_with_spark(ctx, params, mine)
    out = lake.read(GOLD_EMBEDDINGS).filter(mine)
    return StageResult(
        rows_in=counts["documents"], rows_out=out.count(),
        input_versions={SILVER_DOCUMENTS_CLEAN.qualified_name: lake.version(SILVER_DOCUMENTS_CLEAN)},
        output_versions={GOLD_EMBEDDINGS.qualified_name: lake.version(GOLD_EMBEDDINGS)},
        notes={"model": params.model_label, "revision": params.model_revision, "engine": cfg.engine,
               **{k: v for k, v in counts.items() if k != "documents"}},
    )


def _embed_with_spark(ctx: StageContext, params: EmbedParams, mine: str) -> dict[str, int]:
    lake, cfg = ctx.lake, ctx.cfg.embed
    docs = lake.read(SILVER_DOCUMENTS_CLEAN).select("doc_id", "text")
    embed = partial(_embed_partition, params=params)
    if not cfg.refresh:
        lake.replace_where(GOLD_EMBEDDINGS, docs.mapInArrow(embed, GOLD_EMBEDDINGS.schema), mine)
        n = docs.count()
        return {"documents": n, "documents_embedded": n, "documents_unchanged": 0, "documents_removed": 0}

    have = lake.read(GOLD_EMBEDDINGS).filter(mine).select("doc_id").distinct()
    todo = docs.join(have, "doc_id", "left_anti")
    gone = have.join(docs.select("doc_id"), "doc_id", "left_anti").cache()
    n_docs, n_todo, n_gone = docs.count(), todo.count(), gone.count()
    if n_gone:
        lake.delete_matching(GOLD_EMBEDDINGS, gone, ("doc_id",), revision_predicate(params, "t"))
    gone.unpersist()
    if n_todo:
        # Spread the new documents over every core (or GPU): a refresh often finds them in a few files.
        todo = todo.repartition(max(1, min(n_todo, ctx.spark.sparkContext.defaultParallelism)))
        lake.insert_new(GOLD_EMBEDDINGS, todo.mapInArrow(embed, GOLD_EMBEDDINGS.schema))
    return {"documents": n_docs, "documents_embedded": n_todo, "documents_unchanged": n_docs - n_todo,
            "documents_removed": n_gone}
