"""Live progress of a run's stages, and the run summary's notes as small tables.

:class:`SparkProgress` is a :class:`~pipelines.tracking.Tracker`: while a stage runs, a daemon
thread polls Spark's status store for the jobs the stage submitted (the runner's job group, less
the jobs it had before the stage started) and shows

* tasks done / total (completed plus skipped tasks of those jobs, over the tasks they have so far:
  the total grows as a stage submits more jobs), and
* rows/s: records the finished tasks read (Delta/Parquet input rows plus shuffle rows) per second
  of the stage so far,

as a ``rich`` progress bar on a terminal, or as one plain line every
``tracking.progress_interval_s`` seconds where output is not a terminal or ``CI`` is set
(``tracking.progress``: auto | bar | lines | off). A stage that runs no Spark job (the Dask
embed engine) shows its elapsed time only.

The task counts come from the status store behind ``SparkContext.statusTracker()`` (job data);
record counts are not in PySpark's ``StatusTracker``, so they are read from the same store's
stage data through py4j. Where that store is not reachable (another Spark build), the public
``StatusTracker`` gives the task counts and rows are shown as unknown.

:func:`notes_tables` turns a stage's notes (``StageResult.notes``) into tables: its scalar notes
as one row, and each mapping or list of mappings (the filter funnel, languages, failures per
rule, quarantine reasons) as a table of its own.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from pipelines.tracking import Tracker

if TYPE_CHECKING:
    from pipelines.ledger import StageRun
    from pipelines.stage import Stage, StageContext

#: How often the status store is read while a bar is shown (seconds).
POLL_S = 0.5


@dataclass
class Snapshot:
    """A stage's Spark work so far: ``tasks_done`` of ``tasks_total`` tasks in ``jobs`` jobs,
    ``rows`` records read by finished tasks (None: unknown), ``elapsed_s`` seconds since it started."""
    jobs: int = 0
    tasks_done: int = 0
    tasks_total: int = 0
    rows: int | None = 0
    elapsed_s: float = 0.0

    @property
    def rows_per_s(self) -> float | None:
        if self.rows is None or self.elapsed_s <= 0:
            return None
        return self.rows / self.elapsed_s

    def line(self, stage: str) -> str:
        """``filter: 12/40 tasks (3 jobs), 35,210 rows, 4,120 rows/s, 8.5 s``"""
        parts = [f"{self.tasks_done}/{self.tasks_total} tasks ({self.jobs} jobs)"]
        if self.rows is not None:
            parts.append(f"{self.rows:,} rows")
            parts.append(f"{self.rows_per_s or 0:,.0f} rows/s")
        parts.append(f"{self.elapsed_s:.1f} s")
        return f"  {stage}: " + ", ".join(parts)


def _done(status: str) -> bool:
    return status in ("SUCCEEDED", "FAILED")


class SparkStatus:
    """Reads the work of a job group's jobs from the SparkContext's status store; finished jobs'
    numbers are kept, so a poll asks only about the jobs still running."""

    def __init__(self, spark_context, group: str):
        self.sc = spark_context
        self.group = group
        self.tracker = spark_context.statusTracker()
        try:
            self.store = spark_context._jsc.sc().statusStore()
        except Exception:   # noqa: BLE001 - not this Spark build's internals: public API only
            self.store = None
        self._final: dict[int, tuple[int, int, int | None]] = {}

    def job_ids(self) -> set[int]:
        return set(self.tracker.getJobIdsForGroup(self.group))

    def work(self, job_ids: set[int]) -> tuple[int, int, int | None]:
        """``(tasks done, tasks total, rows read)`` of ``job_ids`` (rows None if unknown)."""
        done = total = 0
        rows: int | None = 0
        for job in sorted(job_ids):
            if job in self._final:
                d, t, r = self._final[job]
            else:
                d, t, r, finished = self._job(job)
                if finished:
                    self._final[job] = (d, t, r)
            done, total = done + d, total + t
            rows = None if rows is None or r is None else rows + r
        return done, total, rows

    def _job(self, job: int) -> tuple[int, int, int | None, bool]:
        if self.store is not None:
            try:
                data = self.store.job(job)
                info = self.tracker.getJobInfo(job)   # its stage ids as a Java array (the store's is a Scala Seq)
                rows = 0
                for sid in (info.stageIds if info is not None else ()):
                    try:
                        stage = self.store.lastStageAttempt(int(sid))
                    except Exception:   # noqa: BLE001 - a skipped stage has no attempt
                        continue
                    rows += int(stage.inputRecords()) + int(stage.shuffleReadRecords())
                return (int(data.numCompletedTasks()) + int(data.numSkippedTasks()), int(data.numTasks()),
                        rows, _done(str(data.status())))
            except Exception:   # noqa: BLE001 - fall back to the public tracker below
                self.store = None
        info = self.tracker.getJobInfo(job)
        if info is None:
            return 0, 0, None, True
        done = total = 0
        for sid in info.stageIds:
            stage = self.tracker.getStageInfo(sid)
            if stage is not None:
                done, total = done + stage.numCompletedTasks, total + stage.numTasks
        return done, total, None, _done(info.status)


def progress_mode(setting: str, stream=None, environ: Mapping[str, str] | None = None) -> str:
    """``bar``, ``lines`` or ``off`` for ``tracking.progress``: auto is a bar where ``stream``
    (default stdout) is a terminal and ``CI`` is not set to a true value, else lines."""
    if setting != "auto":
        return setting
    env = os.environ if environ is None else environ
    ci = env.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    tty = (stream or sys.stdout).isatty()
    return "bar" if tty and not ci else "lines"


class SparkProgress(Tracker):
    """Shows each stage's Spark progress while it runs (see the module docstring).

    ``mode``: bar | lines | off; ``interval_s``: seconds between plain lines; ``console``: where
    the bar and lines go.
    """

    def __init__(self, console: Console, mode: str, interval_s: float = 10.0):
        self.console, self.mode, self.interval_s = console, mode, interval_s
        self._status: SparkStatus | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.last: Snapshot | None = None

    def run_started(self, ctx: StageContext, stages) -> None:
        if self.mode != "off":
            self._status = SparkStatus(ctx.spark.sparkContext, ctx.run_id)

    def stage_started(self, ctx: StageContext, stage: Stage) -> None:
        if self._status is None:
            return
        before = self._status.job_ids()
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, args=(stage.name, before, time.monotonic()),
                                        name=f"crawlake-progress-{stage.name}", daemon=True)
        self._thread.start()

    def stage_finished(self, ctx: StageContext, stage: Stage, run: StageRun) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None

    def run_finished(self, ctx, runs, error) -> None:
        self.stage_finished(ctx, None, None)

    def snapshot(self, before: set[int], started: float) -> Snapshot:
        """The work of the jobs submitted since ``before`` was taken, ``started`` (monotonic) on."""
        jobs = self._status.job_ids() - before
        done, total, rows = self._status.work(jobs)
        return Snapshot(len(jobs), done, total, rows, time.monotonic() - started)

    def _watch(self, stage: str, before: set[int], started: float) -> None:
        try:
            if self.mode == "bar":
                self._bar(stage, before, started)
            else:
                self._lines(stage, before, started)
        except Exception:   # noqa: BLE001 - progress must never fail a stage (e.g. the context stopped)
            pass

    def _lines(self, stage: str, before: set[int], started: float) -> None:
        while not self._stop.wait(self.interval_s):
            self.last = self.snapshot(before, started)
            self.console.print(self.last.line(stage), highlight=False, soft_wrap=True)
        self.last = self.snapshot(before, started)
        self.console.print(self.last.line(stage) + " (done)", highlight=False, soft_wrap=True)

    def _bar(self, stage: str, before: set[int], started: float) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("[bold]{task.description}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} tasks"), TextColumn("{task.fields[rate]}"),
                   TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as bar:
            task = bar.add_task(stage, total=0, rate="")
            while True:
                stopping = self._stop.wait(POLL_S)
                snap = self.last = self.snapshot(before, started)
                rate = "" if snap.rows_per_s is None else f"{snap.rows:,} rows, {snap.rows_per_s:,.0f} rows/s"
                bar.update(task, completed=snap.tasks_done, total=max(snap.tasks_total, 1), rate=rate)
                if stopping:
                    break
        self.console.print(snap.line(stage) + " (done)", highlight=False, soft_wrap=True)


# -- the summary's notes ----------------------------------------------------------------------------

def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def _is_records(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _headers(key: str) -> tuple[str, str]:
    """Column headers for a mapping note: ``quarantined_by_reason`` → (reason, quarantined)."""
    if "_by_" in key:
        what, by = key.split("_by_", 1)
        return by.replace("_", " "), what.replace("_", " ")
    return "", key.replace("_", " ")


def notes_tables(stage: str, notes: Mapping[str, Any], width: int = 100) -> list[RenderableType]:
    """``notes`` as small tables, each after a title line: the scalar (and list-of-scalar) notes
    as one row (as two columns, note and value, where one row would be wider than ``width``
    characters), then one table per structured note titled ``stage: key`` — a mapping of
    mappings (``languages``: one row per key), a list of mappings (``funnel``: one row each), or a
    mapping of scalars (``quarantined_by_reason``: reason, quarantined). Empty structures are
    left out."""
    scalars = {k: v for k, v in notes.items() if not isinstance(v, Mapping) and not _is_records(v)}
    out: list[RenderableType] = []
    if scalars:
        table = Table()
        for key, value in scalars.items():
            table.add_column(key.replace("_", " "), justify="right" if isinstance(value, (int, float)) else "left")
        table.add_row(*(_cell(v) for v in scalars.values()))
        if Console(width=10_000).measure(table).maximum > width:
            table = Table()
            table.add_column("note")
            table.add_column("value")
            for key, value in scalars.items():
                table.add_row(key.replace("_", " "), _cell(value))
        out += [Text(stage, style="bold"), table]
    for key, value in notes.items():
        if key in scalars or not value:
            continue
        table = Table()
        if _is_records(value):
            columns = list(dict.fromkeys(c for row in value for c in row))
            rows = [[row.get(c) for c in columns] for row in value]
        elif all(isinstance(v, Mapping) for v in value.values()):
            inner = list(dict.fromkeys(c for v in value.values() for c in v))
            columns = [_headers(key)[0], *inner]
            rows = [[k, *(v.get(c) for c in inner)] for k, v in value.items()]
        else:
            columns = list(_headers(key))
            rows = [[k, v] for k, v in value.items()]
        for i, col in enumerate(columns):
            numeric = i > 0 and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                    for r in rows if r[i] is not None)
            table.add_column(str(col).replace("_", " "), justify="right" if numeric else "left")
        for r in rows:
            table.add_row(*(_cell(v) for v in r))
        out += [Text(f"{stage}: {key.replace('_', ' ')}", style="bold"), table]
    return out
