"""A tiny executor for Databricks source-format notebooks (test-side code).

A ``.py`` notebook starts with ``# Databricks notebook source``; cells are separated by
``# COMMAND ----------``; cells whose lines all start with ``# MAGIC`` are magic cells (``%md``,
``%sql``, ...) and are not run. Code cells run in order in one namespace, which the caller
pre-fills with the notebook globals (``spark``, ``dbutils``, ``display``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = "# Databricks notebook source"
SEPARATOR = "# COMMAND ----------"
MAGIC = "# MAGIC"


@dataclass
class Cell:
    index: int          # position in the notebook, 0-based, magic cells included
    kind: str           # "code" | "magic"
    source: str


def parse_notebook(path: str | Path) -> list[Cell]:
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    if not lines or lines[0].strip() != HEADER:
        raise ValueError(f"{path}: not a Databricks source notebook (first line must be {HEADER!r})")
    chunks: list[list[str]] = [[]]
    for line in lines[1:]:
        if line.strip() == SEPARATOR:
            chunks.append([])
        else:
            chunks[-1].append(line)
    cells = []
    for i, chunk in enumerate(chunks):
        source = "\n".join(chunk).strip("\n")
        if not source.strip():
            continue
        body = [ln for ln in source.splitlines() if ln.strip()]
        kind = "magic" if all(ln.startswith(MAGIC) for ln in body) else "code"
        if kind == "code" and any(ln.startswith(MAGIC) for ln in body):
            raise ValueError(f"{path}: cell {i} mixes code and {MAGIC} lines")
        cells.append(Cell(i, kind, source + "\n"))
    return cells


class _Widgets:
    """dbutils.widgets: text() declares a widget; get() returns its value (an override or the default)."""

    def __init__(self, values: dict[str, str]):
        self._overrides = dict(values)
        self._declared: dict[str, str] = {}

    def text(self, name: str, defaultValue: str = "", label: str | None = None) -> None:
        self._declared[name] = defaultValue

    def get(self, name: str) -> str:
        if name not in self._declared:
            raise KeyError(f"InputWidgetNotDefined: no widget named {name!r}")
        return str(self._overrides.get(name, self._declared[name]))

    def removeAll(self) -> None:
        self._declared.clear()


class DbUtilsShim:
    def __init__(self, widgets: dict[str, str] | None = None):
        self.widgets = _Widgets(widgets or {})


@dataclass
class Displayed:
    cell: int
    obj: Any
    rows: list | None   # collected rows for DataFrames (the query really ran)


@dataclass
class NotebookRun:
    cells: list[Cell]
    executed: list[int] = field(default_factory=list)
    displayed: list[Displayed] = field(default_factory=list)
    namespace: dict = field(default_factory=dict)

    @property
    def code_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.kind == "code"]


def run_notebook(path: str | Path, spark, widgets: dict[str, str] | None = None,
                 display_limit: int = 20) -> NotebookRun:
    """Execute every code cell of the notebook at ``path``; an exception in a cell propagates."""
    cells = parse_notebook(path)
    run = NotebookRun(cells=cells)
    current = {"cell": -1}

    def display(obj, *args, **kwargs):
        rows = None
        if hasattr(obj, "limit") and hasattr(obj, "collect"):
            rows = obj.limit(display_limit).collect()
        run.displayed.append(Displayed(current["cell"], obj, rows))

    run.namespace.update(
        {"__name__": "__main__", "spark": spark, "dbutils": DbUtilsShim(widgets), "display": display}
    )
    for cell in run.code_cells:
        current["cell"] = cell.index
        code = compile(cell.source, f"{path}[cell {cell.index}]", "exec")
        exec(code, run.namespace)  # noqa: S102 - executing the notebook is the point
        run.executed.append(cell.index)
    return run
