"""embed: ``silver.documents_clean`` → ``gold.embeddings``, one set of vectors per model revision.

The kernel (:mod:`pipelines.kernels.embed`) runs in Spark's Python workers through
``mapInArrow``, one model per worker process; ``embed.engine: dask`` runs the same kernel on a
Dask cluster instead (:mod:`pipelines.engines.dask_embed`). On GPU executors set
``spark.executor.resource.gpu.amount`` and ``spark.task.resource.gpu.amount`` (see
``conf/databricks.yaml``).

Refresh (the default): only documents that have no vectors for this (model, revision) are embedded,
and vectors of documents that left ``silver.documents_clean`` are deleted, so a re-run with nothing
new embeds nothing. They are looked for in the rows the clean table gained since this revision's
last successful run (a version diff of its log, as filter and tokenize read theirs), so a new
crawl costs its own documents, not the history's texts; all of the table is looked at when
either table lost rows since (documents removed upstream, a takedown, a full run that died).
The tasks stage their vectors as files and the lake appends them in one commit
(Dask: one commit per ``commit_rows`` vectors as results arrive), so a killed or retried run
resumes where the last commit left it and never duplicates a vector; another model's or
revision's vectors stay beside them. Every document of this revision is embedded again, its old
vectors deleted first, on ``embed.refresh: false``, ``crawlake run --full embed``, or when the
chunking or precision differ from what the revision's last run recorded (:func:`vector_config_hash`),
so one revision's vectors never mix two chunkings; the notes say why (``full_because``).
"""

from __future__ import annotations

import hashlib
import json
from functools import partial

import pyarrow as pa
from pyspark.sql import functions as F

from pipelines import incremental
from pipelines.kernels.embed import EmbedParams, embed_batch
from pipelines.lake import Lake, sql_string
from pipelines.lake.files import TableFiles, Target
from pipelines.session import DOC_ID_BYTES, broadcast_if_fits, local_checkpoint, task_count
from pipelines.stage import StageContext, StageResult
from schemas.catalog import GOLD_EMBEDDINGS, SILVER_DOCUMENTS_CLEAN

OUTPUTS = {"vectors": GOLD_EMBEDDINGS}


def revision_predicate(params: EmbedParams, alias: str = "") -> str:
    """SQL predicate selecting this model revision's rows of ``gold.embeddings`` (columns
    prefixed ``alias.`` when given)."""
    p = f"{alias}." if alias else ""
    return f"{p}model = {sql_string(params.model_label)} AND {p}model_revision = {sql_string(params.model_revision)}"


def upgrade_schema(lake) -> None:
    """Tables written before vectors carried ``model_revision`` get it, as "unrecorded"."""
    if lake.exists(GOLD_EMBEDDINGS) and "model_revision" not in lake.read(GOLD_EMBEDDINGS).columns:
        old = local_checkpoint(lake.read(GOLD_EMBEDDINGS).withColumn("model_revision", F.lit("unrecorded")))
        lake.overwrite(GOLD_EMBEDDINGS, old, replace_schema=True)


def vector_config_hash(params: EmbedParams) -> str:
    """16 hex digits over what shapes a revision's vectors beyond the model: the chunking
    (``chunk_overlap_tokens``, ``max_chunk_tokens``) and ``precision``. Device, batch sizes,
    ``compile`` and the engine leave a vector's values as they are (to float rounding)."""
    shaping = [params.model_label, params.model_revision, params.config.chunk_overlap_tokens,
               params.config.max_chunk_tokens, params.config.precision]
    return hashlib.sha256(json.dumps(shaping).encode()).hexdigest()[:16]


def _last_run(runs: list[dict], params: EmbedParams) -> dict | None:
    """This model revision's last successful run in ``runs``
    (:func:`pipelines.incremental.succeeded_runs`) that recorded its :func:`vector_config_hash`
    (a run before the hash was recorded counts as none), or None."""
    mine = [r for r in runs if r["stage"] == "embed" and r["notes"].get("vector_config_hash")
            and (r["notes"].get("model"), r["notes"].get("revision")) == (params.model_label, params.model_revision)]
    return mine[-1] if mine else None


def _full_because(ctx: StageContext, runs: list[dict], last: dict | None, vectors_hash: str) -> str | None:
    """Why this run embeds every document again, or None to embed only the new ones:
    ``embed.refresh: false``, ``--full`` naming embed, or another :func:`vector_config_hash` than
    ``last`` (:func:`_last_run` of ``runs``) recorded, or a full ingest rebuild since ``last``."""
    if not ctx.cfg.embed.refresh:
        return "embed.refresh: false"
    if ctx.forced_full("embed"):
        return "--full"
    if last and last["notes"]["vector_config_hash"] != vectors_hash:
        return "embed config changed"
    if last and incremental.rebuilt_since(runs, "ingest", last["started_at"]):
        return "ingest rebuilt in full"   # texts may have changed under the same doc_ids
    return None


def _since(lake: Lake, last: dict | None) -> int | None:
    """The ``silver.documents_clean`` version that ``last`` (:func:`_last_run`, with this run's
    vector config) embedded every document of, when neither table lost rows since: the documents
    still to embed are then among the rows added after it (a version diff, as filter and tokenize
    read their input). None when every document must be looked at: no such run, or documents left
    the clean table (their vectors go), or vectors left ``gold.embeddings`` (a takedown, or a full
    run that died after deleting this revision's vectors)."""
    if last is None:
        return None
    docs_version = (last["input_versions"] or {}).get(SILVER_DOCUMENTS_CLEAN.qualified_name)
    vectors_version = (last["output_versions"] or {}).get(GOLD_EMBEDDINGS.qualified_name)
    if docs_version is None or vectors_version is None:
        return None
    lost = (lake.removed_rows_since(SILVER_DOCUMENTS_CLEAN, docs_version)
            or lake.removed_rows_since(GOLD_EMBEDDINGS, vectors_version))
    return None if lost else docs_version


def _embed_to_files(batches, *, params: EmbedParams, targets: dict[str, Target]):
    """A task: embed its documents' chunks and stage the vectors as one Parquet file. Yields one
    row: JSON of its staged files."""
    with TableFiles(targets) as files:
        for batch in batches:
            files.write("vectors", embed_batch(batch, params))
    yield pa.RecordBatch.from_pydict({"detail": [json.dumps(files.report())]})


def run(ctx: StageContext) -> StageResult:
    """Embed the documents of ``silver.documents_clean`` that lack this revision's vectors (every
    one on a full run; see the module docstring). Returns rows_in = clean documents, rows_out =
    this revision's vectors, and notes: mode, full_because, vector_config_hash, model, revision,
    engine, documents_looked_at (clean rows read for their text: those added since the last run,
    or all), documents_embedded, documents_unchanged, documents_removed (whose vectors went)."""
    lake, cfg = ctx.lake, ctx.cfg.embed
    params = EmbedParams.resolve(cfg)  # the embed section, and its model's revision resolved once, on the driver
    revision = {"model": params.model_label, "model_revision": params.model_revision}
    upgrade_schema(lake)
    docs, n_docs = lake.read_counted(SILVER_DOCUMENTS_CLEAN)   # the log's count, no Spark job where it can
    docs = docs.select("doc_id", "text")
    vectors_hash = vector_config_hash(params)
    runs = incremental.succeeded_runs(ctx)
    last = _last_run(runs, params)
    full_because = _full_because(ctx, runs, last, vectors_hash)
    have = lake.read(GOLD_EMBEDDINGS).filter(revision_predicate(params)).select("doc_id").distinct()
    candidates, n_looked, gone = docs, n_docs, []
    since = None if full_because else _since(lake, last)
    if full_because:   # every document again: this revision's vectors go first, so no two configs mix
        have = lake.spark.createDataFrame([], "doc_id string")
        lake.delete_rows(GOLD_EMBEDDINGS, "model_revision", [params.model_revision], where={"model": params.model_label})
    elif since is None:   # every document is looked at: vectors of documents gone go, the new ones come
        gone = [r.doc_id for r in have.join(docs.select("doc_id"), "doc_id", "left_anti").collect()]
        lake.delete_rows(GOLD_EMBEDDINGS, "doc_id", gone, where=revision)
    else:   # only rows added since can lack vectors; the kept ones are read for their doc_ids alone
        candidates, n_looked = lake.read_counted(SILVER_DOCUMENTS_CLEAN, added_since=since)
        candidates = candidates.select("doc_id", "text")
    if since is not None:
        have = have.join(broadcast_if_fits(ctx.spark, n_looked * DOC_ID_BYTES)(candidates.select("doc_id")),
                         "doc_id", "left_semi")
    todo = candidates.join(have, "doc_id", "left_anti")
    n_todo = todo.count()
    with ctx.staging(OUTPUTS) as staging:
        if n_todo and cfg.engine == "dask":
            from pipelines.engines.dask_embed import embed_with_dask

            embed_with_dask(candidates.inputFiles(), [r.doc_id for r in have.collect()],
                            params, staging, cfg)
        elif n_todo:
            # Spread the new documents over every core (or GPU): a refresh often finds them in a few
            # files. Each task loads the model (seconds of CPU) first, so a few documents go to one.
            # By doc_id, not round-robin: which documents share a task (and so a batch, which sets a
            # vector's float rounding) then depends on the documents, not on the shuffle's order.
            tasks = task_count(n_todo, cfg.min_task_documents, ctx.spark.sparkContext.defaultParallelism)
            todo = todo.repartition(tasks, "doc_id")
            task = partial(_embed_to_files, params=params, targets=staging.targets)
            staging.add(json.loads(r.detail) for r in todo.mapInArrow(task, "detail string").collect())
            staging.publish("vectors", operation="embed")
    out = lake.read(GOLD_EMBEDDINGS).filter(revision_predicate(params))
    return StageResult(
        rows_in=n_docs, rows_out=out.count(),
        notes={**incremental.mode_notes(full_because), "vector_config_hash": vectors_hash,
               "model": params.model_label, "revision": params.model_revision, "engine": cfg.engine,
               "documents_looked_at": n_looked, "documents_embedded": n_todo, "documents_unchanged": n_docs - n_todo,
               "documents_removed": len(gone)},
    )
