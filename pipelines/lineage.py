"""``crawlake lineage <table>``: which stage run wrote a table's version, from which versions of
its inputs, and so on up to the raw input.

Read from the run ledger (``ops.runs``: each stage run's input versions before it ran and output
versions after) and the table's Delta log, without Spark: a path-mode lake only, like
:mod:`pipelines.explain`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipelines.lake import read as lake_read
from schemas.catalog import OPS_RUNS, TABLES


@dataclass
class Link:
    """``table`` at ``version`` was written by ``stage`` in ``run_id`` (None: no ledger row says),
    from ``inputs`` (each a Link of its own)."""
    table: str
    version: int
    run_id: str | None = None
    stage: str | None = None
    started_at: datetime | None = None
    status: str | None = None
    rows_in: int | None = None
    rows_out: int | None = None
    written_version: int | None = None   # the version that run wrote (<= version: later commits were bookkeeping)
    inputs: list["Link"] = field(default_factory=list)

    def lines(self, indent: int = 0) -> list[str]:
        pad = "  " * indent
        arrow = "" if indent == 0 else "← "
        if self.stage is None:
            head = f"{pad}{arrow}{self.table} v{self.version}: no stage run in ops.runs wrote it"
        else:
            when = self.started_at.strftime("%Y-%m-%d %H:%M:%S") if self.started_at else "?"
            rows = f", {self.rows_in:,} rows in → {self.rows_out:,} out" if self.rows_in is not None and \
                self.rows_out is not None else ""
            at = "" if self.written_version in (None, self.version) else f" (wrote v{self.written_version})"
            head = (f"{pad}{arrow}{self.table} v{self.version}: {self.stage} in run {self.run_id}{at}, "
                    f"{when} UTC, {self.status}{rows}")
        out = [head]
        for link in self.inputs:
            out += link.lines(indent + 1)
        return out


def _as_dict(value: Any) -> dict:
    return dict(value) if value else {}


def lineage(lake: Any, table: str, version: int | None = None, max_depth: int = 20) -> Link:
    """The lineage of ``table`` (``layer.name``) at ``version`` (default its latest) in ``lake``
    (a ``Config``, ``LakeConfig`` or root; see :func:`pipelines.lake.read.lake_root`).

    Raises KeyError for a table the catalog does not know, LookupError when the lake has no such
    table or version, ValueError for a catalog-mode lake.
    """
    spec = TABLES[table]
    uri = lake_read.table_uri(spec, lake)
    if not lake_read.exists(uri):
        raise LookupError(f"{table} is not in the lake ({uri})")
    latest = lake_read.open_table(uri).version()
    if version is None:
        version = latest
    if not 0 <= version <= latest:
        raise LookupError(f"{table} has versions 0..{latest}, not {version}")
    ledger = lake_read.read_rows(OPS_RUNS, lake, ["run_id", "stage", "started_at", "status", "rows_in", "rows_out",
                                                  "input_versions", "output_versions"])
    for row in ledger:
        row["input_versions"] = _as_dict(row["input_versions"])
        row["output_versions"] = _as_dict(row["output_versions"])

    def link(name: str, at: int, depth: int) -> Link:
        # the last run that wrote this table at or before `at` (later versions of a ledger row's
        # table can be bookkeeping commits, e.g. ops tables written after the stage's own)
        writers = [r for r in ledger if r["status"] == "succeeded" and name in r["output_versions"]
                   and r["output_versions"][name] <= at]
        if not writers:
            return Link(name, at)
        r = max(writers, key=lambda r: (r["output_versions"][name], r["started_at"]))
        out = Link(name, at, r["run_id"], r["stage"], r["started_at"], r["status"], r["rows_in"], r["rows_out"],
                   r["output_versions"][name])
        if depth < max_depth:
            out.inputs = [link(t, v, depth + 1) for t, v in sorted(r["input_versions"].items())]
        return out

    return link(table, version, 0)
