"""embed: ``silver.documents_clean`` → ``gold.embeddings``.

The kernel (:mod:`pipelines.kernels.embed`) runs in Spark's Python workers through
``mapInArrow``, one model per worker process. On GPU executors set
``spark.executor.resource.gpu.amount`` and ``spark.task.resource.gpu.amount`` (see
``conf/databricks.yaml``). A model's rows are replaced as a whole (``replaceWhere model = ...``),
so embeddings of other models stay beside them.
"""

from __future__ import annotations

from functools import partial

from pipelines.config import EmbedConfig
from pipelines.kernels.embed import EmbedParams, embed_batch
from pipelines.stage import StageContext, StageResult
from schemas.catalog import GOLD_EMBEDDINGS, SILVER_DOCUMENTS_CLEAN


def embed_params(cfg: EmbedConfig) -> EmbedParams:
    return EmbedParams(model=cfg.model, device=cfg.device, batch_size=cfg.batch_size, overlap=cfg.chunk_overlap_tokens)


def _embed_partition(batches, params: EmbedParams):
    for batch in batches:
        yield embed_batch(batch, params)


def run(ctx: StageContext) -> StageResult:
    lake = ctx.lake
    params = embed_params(ctx.cfg.embed)
    docs = lake.read(SILVER_DOCUMENTS_CLEAN)
    vectors = docs.select("doc_id", "text").mapInArrow(partial(_embed_partition, params=params), GOLD_EMBEDDINGS.schema)
    label = params.model_label.replace("'", "''")
    lake.replace_where(GOLD_EMBEDDINGS, vectors, f"model = '{label}'")
    out = lake.read(GOLD_EMBEDDINGS).filter(f"model = '{label}'")
    return StageResult(
        rows_in=docs.count(), rows_out=out.count(),
        input_versions={SILVER_DOCUMENTS_CLEAN.qualified_name: lake.version(SILVER_DOCUMENTS_CLEAN)},
        output_versions={GOLD_EMBEDDINGS.qualified_name: lake.version(GOLD_EMBEDDINGS)},
        notes={"model": params.model_label},
    )
