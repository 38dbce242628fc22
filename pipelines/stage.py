"""What a stage is, receives and returns."""

from __future__ import annotations

import importlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schemas.catalog import TableSpec

if TYPE_CHECKING:   # the stage list is read by the CLI, which starts no Spark for most commands
    from pyspark.sql import SparkSession

    from pipelines.config import Config
    from pipelines.lake import Lake


@dataclass(frozen=True)
class Stage:
    """One step of a flow. ``name`` is what ``ops.runs``, ``crawlake run --stages``, ``jobs/<name>.py``
    and the bundle's task keys call it; ``module`` holds its ``run(ctx) -> StageResult``
    (imported when the stage runs); ``inputs`` and ``outputs`` are the tables it reads and writes:
    the runner records their Delta versions before and after it runs."""
    name: str
    module: str
    inputs: tuple[TableSpec, ...]
    outputs: tuple[TableSpec, ...]
    description: str

    def run(self, ctx: "StageContext") -> "StageResult":
        return importlib.import_module(self.module).run(ctx)


@dataclass
class StageContext:
    spark: SparkSession
    cfg: Config
    lake: Lake
    run_id: str
    #: the running stage's name (what ``ops.quality`` and ``ops.runs`` record)
    stage: str = ""
    #: stages to rebuild in full whatever their last run left (``crawlake run --full``); ``"all"``: every one
    full: frozenset[str] = frozenset()

    def forced_full(self, stage: str) -> bool:
        """Whether ``crawlake run --full`` asked for ``stage`` (by name, or all stages)."""
        return stage in self.full or "all" in self.full

    def staging(self, outputs, options=None):
        """:meth:`Lake.staging <pipelines.lake.Lake.staging>` for this stage's ``outputs``
        (``{kind: spec}``), write-audit-publish: the tasks validate each staged file with its
        table's suite, a table is published only when its results (and the stage's own
        ``checks``) pass, and the results go to ``ops.quality`` when the block ends well."""
        return self.lake.staging(outputs, options, gate=_QualityGate(self))


class _QualityGate:
    """A :class:`pipelines.lake.lake.Gate` that records in ``ops.quality`` (:mod:`pipelines.quality`)."""

    def __init__(self, ctx: StageContext):
        self.ctx = ctx

    def check(self, spec, results):
        from pipelines import quality

        return quality.gate(self.ctx, self.ctx.stage, spec, spec.suite_name, results, record=False) or []

    def record(self, rows) -> None:
        from pipelines import quality

        quality.record_results(self.ctx, rows)


@dataclass
class StageResult:
    rows_in: int
    rows_out: int
    rows_quarantined: int = 0
    input_versions: dict[str, int] = field(default_factory=dict)
    output_versions: dict[str, int] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)   # printed in the run summary
    #: ``{table: "deltalake" | "spark"}``: the engine that committed each table the stage wrote
    writers: dict[str, str] = field(default_factory=dict)


class QualityGateError(RuntimeError):
    """An output failed its data-quality suite; nothing was published."""


def failpoint(name: str) -> None:
    """Hang here until killed when the environment variable ``CRAWLAKE_FAILPOINT`` equals ``name``;
    a no-op otherwise. Crash tests use it to kill a process at a known step of a commit sequence
    instead of racing commits that take milliseconds."""
    if os.environ.get("CRAWLAKE_FAILPOINT") == name:
        print(f"failpoint {name}: waiting to be killed", file=sys.stderr, flush=True)
        while True:
            time.sleep(60)
