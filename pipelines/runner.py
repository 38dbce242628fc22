"""Run stages in order, time them, record each in ``ops.runs`` and print the summary table."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipelines import ledger
from pipelines.config import Config
from pipelines.session import get_spark
from pipelines.stage import StageContext, StageResult
from pipelines.stages import dedup, embed, filter as filter_stage, index, ingest, tokenize
from pipelines.lake import Lake
from schemas.catalog import ALL_TABLES

STAGES = ("ingest", "dedup", "filter", "tokenize", "embed", "index")
_RUNNERS = {"dedup": dedup.run, "filter": filter_stage.run, "tokenize": tokenize.run, "embed": embed.run,
            "index": index.run}


class StageFailed(RuntimeError):
    def __init__(self, stage: str, cause: BaseException):
        super().__init__(f"stage {stage} failed: {type(cause).__name__}: {cause}")
        self.stage, self.cause = stage, cause


def ingest_inputs(cfg: Config) -> list[str]:
    """The configured inputs, or the built-in sample crawl written under the lake root."""
    if cfg.ingest.input:
        return list(cfg.ingest.input)
    from pipelines.sample import write_sample_warc

    path = Path(cfg.lake.root) / "_sample" / "crawlake-sample.warc.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    return [str(write_sample_warc(path))]


def run_pipeline(cfg: Config, stages: tuple[str, ...] = STAGES, console: Console | None = None) -> list[ledger.StageRun]:
    """Run ``stages`` (in pipeline order) and return one :class:`~pipelines.ledger.StageRun` each.

    Raises :class:`StageFailed` after recording the failed stage in ``ops.runs``; later stages
    do not run. Raises ValueError for an unknown stage name and FileNotFoundError for missing
    ingest input, both before Spark starts.
    """
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; stages are {', '.join(STAGES)}")
    inputs = ingest.resolve_inputs(ingest_inputs(cfg), cfg.ingest.paths_prefix) if "ingest" in stages else []
    console = console or Console()
    ctx = _context(cfg)
    spark = ctx.spark
    runs: list[ledger.StageRun] = []
    for stage in (s for s in STAGES if s in stages):
        started, t0 = datetime.now(timezone.utc), time.perf_counter()
        spark.sparkContext.setJobGroup(ctx.run_id, f"crawlake {stage}")
        try:
            result: StageResult = ingest.run(ctx, inputs) if stage == "ingest" else _RUNNERS[stage](ctx)
        except Exception as exc:
            run = ledger.StageRun(stage, started, time.perf_counter() - t0, "failed", error=str(exc)[:2000])
            ledger.record(ctx, run)
            runs.append(run)
            print_summary(ctx.run_id, runs, console)
            raise StageFailed(stage, exc) from exc
        run = ledger.StageRun(stage, started, time.perf_counter() - t0, "succeeded", result)
        ledger.record(ctx, run)
        runs.append(run)
    print_summary(ctx.run_id, runs, console)
    return runs


def _context(cfg: Config) -> StageContext:
    """A run's context; the lake's existing tables first get the columns this version's catalog
    added (:meth:`~pipelines.lake.Lake.add_missing_columns`)."""
    spark = get_spark(cfg.spark)
    lake = Lake(spark, cfg.lake)
    for spec in ALL_TABLES:
        lake.add_missing_columns(spec)
    return StageContext(spark=spark, cfg=cfg, lake=lake, run_id=ledger.new_run_id())


def run_recorded(cfg: Config, stage: str, body, console: Console | None = None) -> ledger.StageRun:
    """Run ``body(ctx)`` (returning a StageResult) as one stage outside the pipeline order: record
    it in ``ops.runs`` and print the summary. Re-raises the stage's exception after recording the
    failed run."""
    console = console or Console()
    ctx = _context(cfg)
    started, t0 = datetime.now(timezone.utc), time.perf_counter()
    try:
        result = body(ctx)
    except Exception as exc:
        run = ledger.StageRun(stage, started, time.perf_counter() - t0, "failed", error=str(exc)[:2000])
        ledger.record(ctx, run)
        print_summary(ctx.run_id, [run], console)
        raise
    run = ledger.StageRun(stage, started, time.perf_counter() - t0, "succeeded", result)
    ledger.record(ctx, run)
    print_summary(ctx.run_id, [run], console)
    return run


def print_summary(run_id: str, runs: list[ledger.StageRun], console: Console) -> None:
    table = Table(title=f"crawlake run {run_id}")
    for col in ("stage", "status", "rows in", "rows out", "quarantined", "seconds"):
        table.add_column(col, justify="left" if col in ("stage", "status") else "right")
    for r in runs:
        res = r.result
        counts = (res.rows_in, res.rows_out, res.rows_quarantined) if res else ("-", "-", "-")
        table.add_row(r.stage, r.status, *(str(x) for x in counts), f"{r.duration_s:.1f}")
    console.print(table)
    for r in runs:  # details below the table, so the table stays readable in narrow logs
        details = r.result.notes if r.result else {"error": r.error}
        console.print(f"  {r.stage}: " + "; ".join(f"{k}={v}" for k, v in details.items()), soft_wrap=True)
