"""What follows a run besides ``ops.runs``: trackers the runner calls at run and stage start and end.

:class:`Tracker` is the interface (every hook a no-op); :func:`for_config` gives the trackers a
config asks for, as one :class:`Trackers`:

* live progress (:class:`pipelines.progress.SparkProgress`), unless ``tracking.progress: off``;
* MLflow (:class:`MlflowTracker`) with ``tracking.mlflow: true`` (the ``crawlake[mlflow]`` extra).

The runner calls, in order: ``run_started`` once the Spark context exists, ``stage_started`` and
``stage_finished`` around each stage (also when it failed), ``run_finished`` last (with the error
that ended the run, if one did). A tracker's trouble after ``run_started`` is a warning on the
console, never the run's failure; a tracker that cannot start (MLflow not installed, a bad
tracking URI) stops the run before any stage runs (:class:`TrackingError`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from pipelines.config import Config
    from pipelines.ledger import StageRun
    from pipelines.stage import Stage, StageContext


class TrackingError(RuntimeError):
    """A tracker the config asks for cannot start; the message says what to install or set."""


class Tracker:
    """Hooks the runner calls; subclasses override what they need."""

    def run_started(self, ctx: StageContext, stages: Sequence[Stage]) -> None:
        """The run's context exists; ``stages`` will run in this order."""

    def stage_started(self, ctx: StageContext, stage: Stage) -> None:
        """``stage`` starts now."""

    def stage_finished(self, ctx: StageContext, stage: Stage, run: StageRun) -> None:
        """``stage`` ended; ``run`` is what ``ops.runs`` recorded (status, seconds, result)."""

    def run_finished(self, ctx: StageContext, runs: Sequence[StageRun], error: BaseException | None) -> None:
        """The run ended, with ``error`` if a stage failed (or the run was interrupted)."""


class Trackers(Tracker):
    """Several trackers as one; each hook goes to each tracker in order. A tracker that raises
    after ``run_started`` is dropped with a warning on ``console``."""

    def __init__(self, trackers: Iterable[Tracker], console: Console):
        self.trackers = list(trackers)
        self.console = console

    def _each(self, hook: str, *args) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, hook)(*args)
            except Exception as exc:   # noqa: BLE001 - tracking never fails a run once it runs
                self.trackers.remove(tracker)
                self.console.print(f"warning: {type(tracker).__name__} stopped at {hook}: "
                                   f"{type(exc).__name__}: {exc}", style="yellow", soft_wrap=True)

    def run_started(self, ctx, stages) -> None:
        for tracker in self.trackers:   # a tracker that cannot start stops the run (see module docstring)
            tracker.run_started(ctx, stages)

    def stage_started(self, ctx, stage) -> None:
        self._each("stage_started", ctx, stage)

    def stage_finished(self, ctx, stage, run) -> None:
        self._each("stage_finished", ctx, stage, run)

    def run_finished(self, ctx, runs, error) -> None:
        self._each("run_finished", ctx, runs, error)


def for_config(cfg: Config, console: Console, progress_console: Console | None = None) -> Trackers:
    """The trackers ``cfg.tracking`` asks for: progress on ``progress_console`` (default stderr,
    so that stdout keeps what a command answers), MLflow (warnings on ``console``). Raises
    :class:`TrackingError` when ``tracking.mlflow`` is on and MLflow is not installed."""
    from rich.console import Console

    from pipelines.progress import SparkProgress, progress_mode

    trackers: list[Tracker] = []
    progress_console = progress_console or Console(stderr=True)
    mode = progress_mode(cfg.tracking.progress, progress_console.file)
    if mode != "off":
        trackers.append(SparkProgress(progress_console, mode, cfg.tracking.progress_interval_s))
    if cfg.tracking.mlflow:
        trackers.append(MlflowTracker(cfg, console))
    return Trackers(trackers, console)


# -- MLflow -----------------------------------------------------------------------------------------

#: Where runs go when neither ``tracking.mlflow_uri`` nor ``$MLFLOW_TRACKING_URI`` says.
DEFAULT_MLFLOW_DIR = "mlruns"
#: MLflow's limits (mlflow.utils.validation): params and tags per request, value lengths.
_BATCH = 100
_PARAM_CHARS = 6000
_TAG_CHARS = 5000
#: numeric notes logged as metrics per stage, at most
_MAX_NOTE_METRICS = 500


def tracking_uri(setting: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The tracking URI for ``tracking.mlflow_uri``: the setting, else ``$MLFLOW_TRACKING_URI``,
    else the file store ``./mlruns`` (as an absolute ``file:`` URI). A plain path is a file store."""
    env = os.environ if environ is None else environ
    uri = setting or env.get("MLFLOW_TRACKING_URI") or DEFAULT_MLFLOW_DIR
    if "://" in uri or uri.startswith("file:") or uri in ("databricks", "databricks-uc") or uri.startswith("databricks"):
        return uri
    return "file://" + os.path.abspath(uri)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{"a.b.c": leaf}``; lists stay leaves."""
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out if out or not prefix else {prefix[:-1]: "{}"}
    return {prefix[:-1]: data}


def _key(name: str) -> str:
    """A metric, param or tag name MLflow accepts: letters, digits, ``_ - . / :`` and spaces."""
    return re.sub(r"[^\w\-./: ]", "_", name)[:250]


def config_params(cfg: Config) -> dict[str, str]:
    """The configuration as MLflow params: dotted keys (``filter.gopher.min_doc_words``), lists
    and mappings of data as JSON, secrets redacted (:meth:`~pipelines.config.Config.redacted`)."""
    params = {}
    for key, value in flatten(cfg.redacted()).items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        params[_key(key)] = text if len(text) <= _PARAM_CHARS else text[:_PARAM_CHARS - 1] + "…"
    return params


def note_metrics(notes: Mapping[str, Any]) -> dict[str, float]:
    """The numeric leaves of a stage's notes as metrics: ``exact_removed``,
    ``languages.en.kept``; a list of mappings with a ``step`` (the filter funnel) by step:
    ``funnel.language.documents``. Booleans and text are left out; at most 500."""
    out: dict[str, float] = {}

    def walk(value: Any, name: str) -> None:
        if len(out) >= _MAX_NOTE_METRICS:
            return
        if isinstance(value, bool) or value is None:
            return
        if isinstance(value, (int, float)):
            out[_key(name)] = float(value)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f"{name}.{k}" if name else str(k))
        elif isinstance(value, (list, tuple)) and all(isinstance(v, Mapping) for v in value):
            for i, row in enumerate(value):
                label = str(row.get("step", i))
                for k, v in row.items():
                    if k != "step":
                        walk(v, f"{name}.{label}.{k}")

    walk(dict(notes), "")
    return out


def delta_source(location: str, version: int, catalog: bool = False):
    """An MLflow ``DeltaDatasetSource`` for the Delta table at ``location`` (a path, or a catalog
    table name when ``catalog``) and ``version``, whose JSON always carries ``delta_table_version``:
    MLflow's own ``to_dict`` leaves a falsy version out, so a table's first version (0) would be
    recorded as no version at all."""
    from mlflow.data.delta_dataset_source import DeltaDatasetSource

    class _VersionedDeltaSource(DeltaDatasetSource):
        def to_dict(self):
            info = super().to_dict()
            if self.delta_table_version is not None:
                info["delta_table_version"] = self.delta_table_version
            return info

    if catalog:
        return _VersionedDeltaSource(delta_table_name=location, delta_table_version=version)
    return _VersionedDeltaSource(path=location, delta_table_version=version)


class MlflowTracker(Tracker):
    """One MLflow run per runner call (a ``crawlake run``, a ``crawlake clicks`` command), named
    after its ``run_id``, with:

    * params: the configuration, flattened, secrets redacted (:func:`config_params`);
    * tags: ``crawlake.run_id``, ``crawlake.code_version``, ``crawlake.config_hash``,
      ``crawlake.lake``, ``crawlake.stages``;
    * a nested run per stage: metrics ``rows_in``, ``rows_out``, ``rows_quarantined``,
      ``seconds``, ``rows_per_s`` and the numeric notes (:func:`note_metrics`: the filter funnel's
      documents and words per step, dedup's removals, ...); tags ``crawlake.stage``,
      ``crawlake.status``, ``input_version.<table>``, ``output_version.<table>``,
      ``writer.<table>`` (and ``crawlake.error``); dataset inputs naming each Delta table read
      (context ``input``) and written (context ``output``) with its version;
    * the lake's HTML report (:mod:`pipelines.report`) as the artifact ``report.html`` of the
      parent run when ``tracking.mlflow_report`` is on and the lake is readable without Spark
      (path mode).

    Uses ``MlflowClient`` (no fluent active-run state): a notebook's own active run is left alone.
    A local file store is allowed explicitly (MLflow 3 otherwise refuses one:
    ``MLFLOW_ALLOW_FILE_STORE``).
    """

    def __init__(self, cfg: Config, console: Console):
        try:
            from mlflow import MlflowClient
        except ImportError as exc:
            raise TrackingError("tracking.mlflow=true needs MLflow: pip install 'crawlake[mlflow]'") from exc
        self.cfg, self.console = cfg, console
        self.uri = tracking_uri(cfg.tracking.mlflow_uri)
        if self.uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=self.uri)
        self.parent: str | None = None
        self.experiment_id: str | None = None
        self._stage_runs: dict[str, str] = {}

    # the hooks
    def run_started(self, ctx: StageContext, stages) -> None:
        from pipelines import ledger

        self.experiment_id = self._experiment(self.cfg.tracking.mlflow_experiment)
        tags = {"crawlake.run_id": ctx.run_id, "crawlake.code_version": ledger.code_version(),
                "crawlake.config_hash": self.cfg.hash(), "crawlake.lake": str(ctx.lake.cfg.root),
                "crawlake.stages": ",".join(s.name for s in stages)}
        run = self.client.create_run(self.experiment_id, run_name=ctx.run_id, tags=tags)
        self.parent = run.info.run_id
        self._log(self.parent, params=config_params(self.cfg))

    def stage_started(self, ctx: StageContext, stage: Stage) -> None:
        run = self.client.create_run(self.experiment_id, run_name=stage.name, tags={
            "mlflow.parentRunId": self.parent, "crawlake.run_id": ctx.run_id, "crawlake.stage": stage.name})
        self._stage_runs[stage.name] = run.info.run_id

    def stage_finished(self, ctx: StageContext, stage: Stage, run: StageRun) -> None:
        run_id = self._stage_runs[stage.name]
        res = run.result
        metrics = {"seconds": run.duration_s}
        tags = {"crawlake.status": run.status}
        if res is not None:
            metrics.update(rows_in=res.rows_in, rows_out=res.rows_out, rows_quarantined=res.rows_quarantined)
            if run.duration_s > 0:
                metrics["rows_per_s"] = res.rows_in / run.duration_s
            metrics.update(note_metrics(res.notes))
            tags.update({_key(f"input_version.{t}"): str(v) for t, v in res.input_versions.items()})
            tags.update({_key(f"output_version.{t}"): str(v) for t, v in res.output_versions.items()})
            tags.update({_key(f"writer.{t}"): str(w) for t, w in res.writers.items()})
        if run.error:
            tags["crawlake.error"] = run.error[:_TAG_CHARS]
        self._log(run_id, metrics=metrics, tags=tags)
        if res is not None:
            self._datasets(ctx, run_id, stage, res)
        self.client.set_terminated(run_id, "FINISHED" if run.status == "succeeded" else "FAILED")

    def run_finished(self, ctx: StageContext, runs, error) -> None:
        if self.parent is None:
            return
        try:
            succeeded = sum(r.status == "succeeded" for r in runs)
            self._log(self.parent, metrics={"seconds": sum(r.duration_s for r in runs),
                                            "stages_succeeded": succeeded, "stages_failed": len(runs) - succeeded})
            if self.cfg.tracking.mlflow_report and ctx.lake.cfg.mode == "path":
                self._report(ctx)
        finally:
            # stage runs a crash left open, then the parent
            for run_id in self._stage_runs.values():
                if self.client.get_run(run_id).info.status == "RUNNING":
                    self.client.set_terminated(run_id, "KILLED")
            self.client.set_terminated(self.parent, "FINISHED" if error is None else "FAILED")

    # helpers
    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:   # noqa: BLE001 - another process created it meanwhile
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _log(self, run_id: str, metrics: Mapping[str, float] | None = None, params: Mapping[str, str] | None = None,
             tags: Mapping[str, str] | None = None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        ms = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()]
        ps = [Param(k, v) for k, v in (params or {}).items()]
        ts = [RunTag(k, v[:_TAG_CHARS]) for k, v in (tags or {}).items()]
        for i in range(0, max(len(ms), len(ps), len(ts)), _BATCH):
            self.client.log_batch(run_id, metrics=ms[i:i + _BATCH], params=ps[i:i + _BATCH], tags=ts[i:i + _BATCH])

    def _datasets(self, ctx: StageContext, run_id: str, stage: Stage, res) -> None:
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import DatasetInput, InputTag

        specs = {s.qualified_name: s for s in (*stage.inputs, *stage.outputs)}
        inputs = []
        for context, versions in (("input", res.input_versions), ("output", res.output_versions)):
            for table, version in sorted(versions.items()):
                location = ctx.lake.location(specs[table]) if table in specs else table
                source = delta_source(location, int(version), catalog=ctx.lake.cfg.mode == "catalog")
                dataset = MetaDataset(source, name=table, digest=f"v{version}")
                inputs.append(DatasetInput(dataset._to_mlflow_entity(),
                                           tags=[InputTag("mlflow.data.context", context)]))
        if inputs:
            self.client.log_inputs(run_id, datasets=inputs)

    def _report(self, ctx: StageContext) -> None:
        from pipelines.report import build_report

        with tempfile.TemporaryDirectory(prefix="crawlake-report-") as folder:
            built = build_report(ctx.cfg, os.path.join(folder, "report.html"))
            self.client.log_artifact(self.parent, str(built.path))
            self._log(self.parent, metrics={"report_seconds": built.seconds})
