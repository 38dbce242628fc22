"""Run stages in order, time them, record each in ``ops.runs`` and print the summary table."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipelines import ledger, tracking
from pipelines.config import Config
from pipelines.progress import notes_tables
from pipelines.stage import Stage, StageContext, StageResult
from pipelines.stages import PIPELINE, pipeline_stages

#: The pipeline's stage names, in order.
STAGES = tuple(s.name for s in PIPELINE)


def error_text(exc: BaseException) -> str:
    """What an exception says, without a JVM stack: for an error raised in Spark's JVM (py4j's
    ``Py4JJavaError``, whose text is the whole Java stack trace) the Java exception's class and
    message, e.g. ``io.delta.exceptions.ConcurrentAppendException: [DELTA_CONCURRENT_APPEND] …``."""
    java = getattr(exc, "java_exception", None)
    text = str(exc)
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:   # the gateway is gone (a killed JVM): the Python text is all there is
            pass
    return text.split("\n\tat ")[0].strip()


class StageFailed(RuntimeError):
    """A stage raised ``cause``; the message (``detail``: the cause's, secrets scrubbed) is what
    ``ops.runs.error`` records."""

    def __init__(self, stage: str, cause: BaseException, detail: str | None = None):
        super().__init__(f"stage {stage} failed: {type(cause).__name__}: {cause if detail is None else detail}")
        self.stage, self.cause = stage, cause


def ingest_inputs(cfg: Config) -> list[str]:
    """The configured inputs, or the built-in sample crawl written under the lake root."""
    if cfg.ingest.input:
        return list(cfg.ingest.input)
    from pipelines.sample import write_sample_warc

    path = Path(cfg.lake.root) / "_sample" / "crawlake-sample.warc.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    return [str(write_sample_warc(path))]


def run_pipeline(cfg: Config, stages: Sequence[str] = STAGES, console: Console | None = None, *,
                 full: Collection[str] = ()) -> list[ledger.StageRun]:
    """Run the pipeline's ``stages`` (names, run in pipeline order) and return one
    :class:`~pipelines.ledger.StageRun` each. ``full``: stage names (or ``"all"``) an incremental
    stage rebuilds in full (``crawlake run --full``).

    Raises :class:`StageFailed` after recording the failed stage in ``ops.runs``; later stages
    do not run. Raises ValueError for an unknown stage name (in ``stages`` or ``full``) and FileNotFoundError for missing
    ingest input, both before Spark starts.
    """
    chosen = pipeline_stages(stages)
    unknown = sorted(set(full) - {*STAGES, "all"})
    if unknown:
        raise ValueError(f"--full: unknown stage(s) {', '.join(unknown)}; stages are {', '.join(STAGES)}")
    if any(s.name == "ingest" for s in chosen):
        from pipelines.stages.ingest import resolve_inputs

        inputs = resolve_inputs(ingest_inputs(cfg), cfg.ingest.paths_prefix)
        cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": inputs})})
    return run_stages(cfg, chosen, console, full=full)


def run_stages(cfg: Config, stages: Sequence[Stage], console: Console | None = None, *,
               full: Collection[str] = ()) -> list[ledger.StageRun]:
    """Run ``stages`` in the order given on one context, each recorded in ``ops.runs`` with the
    Delta versions of its inputs (before it ran) and outputs (after) and the engine that
    committed each output; print the summary. Raises :class:`StageFailed` after recording a
    failed stage; later stages do not run. Each table's log is loaded once per run
    (:func:`pipelines.lake.loaded_logs`)."""
    from pipelines.lake import loaded_logs

    with loaded_logs():
        return _run_stages(cfg, stages, console, full)


def _run_stages(cfg: Config, stages: Sequence[Stage], console: Console | None,
                full: Collection[str]) -> list[ledger.StageRun]:
    from pipelines.lake.objectstore import require_credentials

    require_credentials([cfg.lake.root, *cfg.ingest.input, *cfg.clicks.input, cfg.clicks.landing or ""])
    console = console or Console()
    trackers = tracking.for_config(cfg, console)   # before Spark starts: MLflow missing is an error now
    ctx = _context(cfg)
    ctx.full = frozenset(full)
    runs: list[ledger.StageRun] = []
    trackers.run_started(ctx, stages)
    error: BaseException | None = None
    try:
        for stage in stages:
            started, t0 = datetime.now(timezone.utc), time.perf_counter()
            ctx.spark.sparkContext.setJobGroup(ctx.run_id, f"crawlake {stage.name}")
            ctx.lake.written.clear()
            ctx.stage = stage.name
            inputs = {spec.qualified_name: ctx.lake.version(spec) for spec in stage.inputs}
            ctx.lake.lineage = ledger.commit_lineage(ctx.run_id, stage.name, cfg, inputs)   # on every commit
            trackers.stage_started(ctx, stage)
            try:
                result: StageResult = stage.run(ctx)
            except Exception as exc:
                detail = cfg.scrub(error_text(exc))
                run = ledger.StageRun(stage.name, started, time.perf_counter() - t0, "failed", error=detail[:2000])
                ledger.record(ctx, run)
                runs.append(run)
                trackers.stage_finished(ctx, stage, run)
                print_summary(ctx.run_id, runs, console)
                raise StageFailed(stage.name, exc, detail) from exc
            result.input_versions = {name: v for name, v in inputs.items() if v is not None}
            result.output_versions = {spec.qualified_name: v for spec in stage.outputs
                                      if (v := ctx.lake.version(spec)) is not None}
            result.writers = dict(sorted(ctx.lake.written.items()))
            run = ledger.StageRun(stage.name, started, time.perf_counter() - t0, "succeeded", result)
            ledger.record(ctx, run)
            runs.append(run)
            trackers.stage_finished(ctx, stage, run)
        print_summary(ctx.run_id, runs, console)
    except BaseException as exc:
        error = exc
        raise
    finally:   # an interrupted run too: the progress thread stops, the MLflow run is closed
        trackers.run_finished(ctx, runs, error)
    return runs


def _context(cfg: Config) -> StageContext:
    """A run's context; the lake's existing tables first get the columns this version's catalog
    added (:meth:`~pipelines.lake.Lake.add_missing_columns`)."""
    from pipelines.lake import Lake
    from pipelines.session import get_spark
    from schemas.catalog import ALL_TABLES

    spark = get_spark(cfg.spark, cfg.lake)
    lake = Lake(spark, cfg.lake)
    run_id = ledger.new_run_id()
    lake.lineage = ledger.commit_lineage(run_id, "upgrade", cfg, {})   # the ALTER TABLE commits' commit info
    for spec in ALL_TABLES:
        lake.add_missing_columns(spec)
    return StageContext(spark=spark, cfg=cfg, lake=lake, run_id=run_id)


def print_summary(run_id: str, runs: list[ledger.StageRun], console: Console) -> None:
    """The run's table (stage, status, rows in/out, quarantined, seconds, rows/s), then each
    stage's notes as small tables (:func:`pipelines.progress.notes_tables`), or its error."""
    table = Table(title=f"crawlake run {run_id}")
    for col in ("stage", "status", "rows in", "rows out", "quarantined", "seconds", "rows/s"):
        table.add_column(col, justify="left" if col in ("stage", "status") else "right")
    for r in runs:
        res = r.result
        counts = (f"{res.rows_in:,}", f"{res.rows_out:,}", f"{res.rows_quarantined:,}") if res else ("-", "-", "-")
        rate = f"{res.rows_in / r.duration_s:,.0f}" if res and r.duration_s > 0 else "-"
        table.add_row(r.stage, r.status, *counts, f"{r.duration_s:.1f}", rate)
    console.print(table)
    for r in runs:  # details below the table, so the table stays readable in narrow logs
        if r.result is None:
            console.print(f"  {r.stage}: error={r.error}", soft_wrap=True)
            continue
        for part in notes_tables(r.stage, r.result.notes, console.width):
            console.print(part)
        console.print(f"  {r.stage} writers: {_writers(r.result.writers)}", soft_wrap=True, highlight=False)


def _writers(writers: dict[str, str]) -> str:
    """``deltalake: a, b; spark: c`` — which engine committed which table."""
    by_engine: dict[str, list[str]] = {}
    for table, engine in writers.items():
        by_engine.setdefault(engine, []).append(table)
    return ", ".join(f"{engine} ({' '.join(tables)})" for engine, tables in sorted(by_engine.items())) or "-"
