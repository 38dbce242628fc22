"""Whether an incremental stage may build on what its last run left, or must rebuild in full.

An incremental stage keeps its state in its outputs (which keys it has decided) and in the run
ledger: each run's notes (``ops.runs.notes``, JSON) carry ``mode`` (``"incremental"`` or
``"full"``), ``full_because`` and ``stage_config_hash``, the hash of the config sections that shape
its output (:meth:`pipelines.config.Config.hash` of those sections, plus the content of files they
name). :func:`plan` reads the ledger at the start of a run and says which mode it runs in:

* ``--full`` named the stage (:attr:`pipelines.stage.StageContext.full`) → full, ``"--full"``;
* no earlier successful run of the stage recorded a config hash → full, ``"first run"``;
* the hash differs from the last successful run's → full, ``"<stage> config changed"``;
* an output table's current Delta version is not one a successful run recorded in
  ``ops.runs.output_versions`` (a run was interrupted after a commit, or the table was written
  outside crawlake) → full, ``"<table> changed outside a finished run"``. A full rebuild that died
  between its commits is thus redone in full even when the config is set back to the last
  finished run's, so an output never mixes two configs;
* an ``upstream`` stage (one whose output this stage reads) rebuilt in full since this stage's last
  successful run → full, ``"<upstream> rebuilt in full"``: the hook through which a later stage
  follows an earlier one's full rebuild;
* otherwise incremental.

The stage then puts :meth:`Plan.notes` into its notes, which the runner records in ``ops.runs``
after the stage succeeded — so a run's hash is recorded only once all of its commits are made.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipelines.lake import Rows
from pipelines.stage import StageContext
from schemas.catalog import OPS_RUNS, TableSpec


def mode_notes(full_because: str | None) -> dict[str, str | None]:
    """A run's ``mode`` notes: ``{"mode": "full", "full_because": reason}`` when ``full_because``
    names why it rebuilt in full, else ``{"mode": "incremental", "full_because": None}``; what
    :func:`plan` reads back of an upstream stage's runs."""
    return {"mode": "incremental" if full_because is None else "full", "full_because": full_because}


@dataclass(frozen=True)
class Plan:
    """How a stage runs: ``full`` (rebuild every output from all of its input) with the reason in
    ``because``, or incremental (``because`` None); ``config_hash``: the stage's config hash."""
    full: bool
    because: str | None
    config_hash: str

    def notes(self) -> dict[str, str | None]:
        """``{"mode": "full" | "incremental", "full_because": reason or None, "stage_config_hash": hash}``."""
        return {**mode_notes(self.because if self.full else None), "stage_config_hash": self.config_hash}


def config_hash(cfg, sections: Sequence[str], files: Iterable[str] = ()) -> str:
    """16 hex digits: :meth:`Config.hash` of ``sections`` and the sha256 of each file in ``files``
    (paths the sections name: blocklists, word lists), so that editing such a file in place changes
    the hash too. A file that cannot be read counts as its path and ``"unreadable"``."""
    h = hashlib.sha256(cfg.hash(*sections).encode())
    for path in sorted(set(files)):
        try:
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            digest = "unreadable"
        h.update(f"\n{path}\t{digest}".encode())
    return h.hexdigest()[:16]


def plan(ctx: StageContext, stage: str, config_hash: str, outputs: Sequence[TableSpec],
         upstream: Sequence[str] = ()) -> Plan:
    """The mode ``stage`` runs in (see the module docstring). ``outputs``: the tables its
    incremental runs build on; ``upstream``: stages whose full rebuild forces one here. Reads
    ``ops.runs`` (successful runs only) and the outputs' current versions; writes nothing."""
    if ctx.forced_full(stage):
        return Plan(True, "--full", config_hash)
    runs = succeeded_runs(ctx)
    mine = [r for r in runs if r["stage"] == stage and r["notes"].get("stage_config_hash")]
    if not mine:
        return Plan(True, "first run", config_hash)
    last = mine[-1]
    if last["notes"]["stage_config_hash"] != config_hash:
        return Plan(True, f"{stage} config changed", config_hash)
    since = [r for r in runs if r["started_at"] >= last["started_at"]]
    for spec in outputs:
        recorded = {(r["output_versions"] or {}).get(spec.qualified_name) for r in since}
        if ctx.lake.version(spec) not in recorded - {None}:
            return Plan(True, f"{spec.qualified_name} changed outside a finished run", config_hash)
    for name in upstream:
        if rebuilt_since(runs, name, last["started_at"]):
            return Plan(True, f"{name} rebuilt in full", config_hash)
    return Plan(False, None, config_hash)


def last_input_version(ctx: StageContext, stage: str, spec: TableSpec) -> int | None:
    """The version of ``spec`` (an input of ``stage``) that ``stage``'s last successful run
    started from (``ops.runs.input_versions``; the run read that version or a later one), or None
    when no such run recorded one. That run handled every row of that version, so what an
    incremental run has left to do is in the rows committed after it
    (:meth:`pipelines.lake.Lake.read` ``added_since``), unless something undid a decision since."""
    mine = [r for r in succeeded_runs(ctx) if r["stage"] == stage]
    return (mine[-1]["input_versions"] or {}).get(spec.qualified_name) if mine else None


def not_yet_in(spark, added, added_rows: int | None, *stored):
    """The rows of ``added`` (a DataFrame with ``doc_id``: an input's rows committed since a
    stage's last run) whose doc_id none of ``stored`` (DataFrames with ``doc_id``: what the stage
    already holds, any size) has. The added doc_ids, ``added_rows`` of them (counted from the log;
    None: unknown, no hint), are broadcast to where the stored ones lie, and the stored ones found
    (at most as many) back to the added rows: every stored doc_id, shuffled to meet them, would
    grow with the history."""
    from functools import reduce

    from pipelines.session import DOC_ID_BYTES, broadcast_if_fits

    mine = broadcast_if_fits(spark, added_rows * DOC_ID_BYTES) if added_rows is not None else (lambda df: df)
    ids = mine(added.select("doc_id"))
    found = reduce(lambda a, b: a.union(b), [s.select("doc_id").join(ids, "doc_id", "left_semi") for s in stored])
    return added.join(mine(found), "doc_id", "left_anti")


def rebuilt_since(runs: list[dict], stage: str, since) -> bool:
    """Whether a successful run of ``stage`` in ``runs`` (:func:`succeeded_runs`) rebuilt in full
    (notes ``mode: full``) after ``since`` (a run's ``started_at``)."""
    return any(r["stage"] == stage and r["notes"].get("mode") == "full" and r["started_at"] > since for r in runs)


def succeeded_runs(ctx: StageContext) -> list[dict]:
    """Every successful run in ``ops.runs``, oldest first: ``stage``, ``started_at``,
    ``input_versions`` and ``output_versions`` (``{table: version}`` or None) and ``notes``
    (parsed; ``{}`` when none was recorded, as in a ledger written before notes were). Empty when
    there is no ledger."""
    rows = ctx.lake.rows(OPS_RUNS, ["stage", "started_at", "input_versions", "output_versions", "notes"],
                         Rows("status", ("succeeded",)))
    out = [{**r, "notes": _parse(r["notes"])} for r in rows]
    return sorted(out, key=lambda r: r["started_at"])


def _parse(text: str | None) -> dict:
    try:
        notes = json.loads(text) if text else {}
    except ValueError:
        return {}
    return notes if isinstance(notes, dict) else {}
