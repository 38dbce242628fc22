"""The run ledger (``ops.runs``): one row per stage run."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pipelines.stage import StageContext, StageResult
from schemas.catalog import OPS_RUNS


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]


def commit_lineage(run_id: str, stage: str, cfg, inputs: dict[str, int | None]):
    """The :class:`~pipelines.lake.commits.Lineage` every commit of a stage run carries: the run
    id and stage of its ``ops.runs`` row, the same config hash (``cfg.hash()``, secrets left out)
    and its input tables' versions before it ran (``{table: version}``; None, a table that does
    not exist yet, is left out, as in ``ops.runs.input_versions``)."""
    from pipelines.lake.commits import Lineage

    return Lineage(run_id, stage, cfg.hash(), {name: v for name, v in inputs.items() if v is not None})


@lru_cache(maxsize=1)
def code_version() -> str:
    """``crawlake <version>`` plus the git commit when run from a checkout."""
    try:
        pkg = version("crawlake")
    except PackageNotFoundError:
        pkg = "unknown"
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"crawlake {pkg}" + (f" ({sha})" if sha else "")


@dataclass
class StageRun:
    stage: str
    started_at: datetime
    duration_s: float
    status: str
    result: StageResult | None = None
    error: str | None = None


def record(ctx: StageContext, run: StageRun) -> None:
    r = run.result
    row = (ctx.run_id, run.stage, run.started_at, float(run.duration_s), run.status,
           r.rows_in if r else None, r.rows_out if r else None, r.rows_quarantined if r else None,
           r.input_versions if r else None, r.output_versions if r else None,
           ctx.cfg.hash(), code_version(), run.error, r.writers if r else None,
           json.dumps(r.notes, sort_keys=True, default=str) if r else None)
    ctx.lake.append_rows(OPS_RUNS, [row])
