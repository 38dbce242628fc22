"""``crawlake lineage <table>``: which stage run wrote a table's version, from which versions of
its inputs, and so on up to the raw input files.

Two records say who wrote a version, both read without Spark (a path-mode lake only, like
:mod:`pipelines.explain`):

* the **commit info** of the table's versions: every commit crawlake makes carries the run id,
  stage, config hash and input table versions (:class:`pipelines.lake.commits.Lineage`, in
  ``userMetadata``). The newest commit at or before the asked version that a stage made names
  the run exactly, even where ``ops.runs`` is ambiguous (two runs that left a table at the same
  version, a run that committed and then failed, a commit made after the stage's own, such as a
  schema upgrade);
* the **run ledger** (``ops.runs``: each stage run's input versions before it ran, output
  versions after, rows, status): the rows of the run the commit info names, and the only record
  for commits made before crawlake wrote lineage into them (then: the last succeeded run whose
  recorded output version is at or before the asked one).

The chain ends at an ingest stage run, whose input files are the rows of its log
(``ops.ingest_log`` for WARC/WET, ``ops.clicks_ingest_log`` for click logs) at the version that
run left: every file that had fed ``bronze.*`` up to then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipelines.lake import read as lake_read
from pipelines.lake.commits import Lineage
from schemas.catalog import OPS_CLICKS_INGEST_LOG, OPS_INGEST_LOG, OPS_RUNS, TABLES, TableSpec

#: Stages whose inputs are files, and the log that lists them (``source_file`` per row).
INGEST_LOGS: dict[str, TableSpec] = {"ingest": OPS_INGEST_LOG, "clicks_ingest": OPS_CLICKS_INGEST_LOG}
#: How many commits below the asked version :func:`lineage` reads looking for a stage's commit.
MAX_COMMITS_SCANNED = 200
#: Input files printed per ingest run by :meth:`Link.lines` (the rest are counted).
MAX_FILES_SHOWN = 20


@dataclass
class InputFiles:
    """The files an ingest stage run had committed: ``rows`` of ``log`` (a table name) at
    ``version`` (None: the log's latest, no record said which), each a dict with ``source_file``
    and, where the log has them, ``documents``/``rows``, ``sha256``, ``run_id``."""
    log: str
    version: int | None
    rows: list[dict]


@dataclass
class Link:
    """``table`` at ``version`` was written by ``stage`` in ``run_id`` (None: no record says),
    from ``inputs`` (each a Link of its own); ``files`` for an ingest run.

    ``source`` says what named the run: ``"commit"`` (the version's commit info) or
    ``"ledger"`` (``ops.runs`` alone)."""
    table: str
    version: int
    run_id: str | None = None
    stage: str | None = None
    started_at: datetime | None = None
    status: str | None = None
    rows_in: int | None = None
    rows_out: int | None = None
    written_version: int | None = None   # the version that run wrote (<= version: later commits were bookkeeping)
    config_hash: str | None = None
    source: str | None = None
    inputs: list["Link"] = field(default_factory=list)
    files: InputFiles | None = None

    def lines(self, indent: int = 0, max_files: int = MAX_FILES_SHOWN) -> list[str]:
        """The chain as text, one line per table version (inputs indented under what they fed,
        marked ``←``), then an ingest run's input files (at most ``max_files``, the rest counted)."""
        pad = "  " * indent
        arrow = "" if indent == 0 else "← "
        if self.stage is None:
            head = f"{pad}{arrow}{self.table} v{self.version}: no stage run in ops.runs wrote it"
        else:
            at = "" if self.written_version in (None, self.version) else f" (wrote v{self.written_version})"
            if self.status is None:
                tail = ", no ops.runs row (the run did not finish)"
            else:
                when = self.started_at.strftime("%Y-%m-%d %H:%M:%S") if self.started_at else "?"
                rows = f", {self.rows_in:,} rows in → {self.rows_out:,} out" if self.rows_in is not None and \
                    self.rows_out is not None else ""
                tail = f", {when} UTC, {self.status}{rows}"
            config = f", config {self.config_hash}" if self.config_hash else ""
            head = f"{pad}{arrow}{self.table} v{self.version}: {self.stage} in run {self.run_id}{at}{tail}{config}"
        out = [head]
        for link in self.inputs:
            out += link.lines(indent + 1, max_files)
        if self.files is not None:
            out += self.files_lines(indent + 1, max_files)
        return out

    def files_lines(self, indent: int, max_files: int) -> list[str]:
        pad = "  " * indent
        f = self.files
        where = f"{f.log} v{f.version}" if f.version is not None else f"{f.log} (latest)"
        out = [f"{pad}← input files ({where}): {len(f.rows):,}"]
        for row in f.rows[:max_files]:
            count = next((f"{row[k]:,} {k}" for k in ("documents", "rows") if row.get(k) is not None), "")
            sha = f"sha256 {row['sha256'][:12]}…" if row.get("sha256") else ""
            run = f"run {row['run_id']}" if row.get("run_id") else ""
            details = ", ".join(x for x in (count, sha, run) if x)
            out.append(f"{pad}  {row['source_file']}" + (f" ({details})" if details else ""))
        if len(f.rows) > max_files:
            out.append(f"{pad}  … and {len(f.rows) - max_files:,} more in {where}")
        return out


def _as_dict(value: Any) -> dict:
    return dict(value) if value else {}


def _stage_commit(uri: str, at: int, stages: set[str]) -> tuple[int, Lineage] | None:
    """The newest version ``<= at`` (at most :data:`MAX_COMMITS_SCANNED` back) whose commit a
    stage in ``stages`` made, with its lineage, passing over commits crawlake made outside a
    stage (a schema upgrade); None at the first commit without lineage (made by an older
    crawlake or another tool, or no longer in the log)."""
    for v in range(at, max(-1, at - MAX_COMMITS_SCANNED), -1):
        found = lake_read.commit_lineage(uri, v)
        if found is None:
            return None
        if found.stage in stages:
            return v, found
    return None


def lineage(lake: Any, table: str, version: int | None = None, max_depth: int = 20) -> Link:
    """The lineage of ``table`` (``layer.name``) at ``version`` (default its latest) in ``lake``
    (a ``Config``, ``LakeConfig`` or root; see :func:`pipelines.lake.read.lake_root`): a
    :class:`Link` per table version, back to the input files of the ingest runs.

    Raises KeyError for a table the catalog does not know, LookupError when the lake has no such
    table or version, ValueError for a catalog-mode lake (its tables are found through Spark's
    metastore only).
    """
    from pipelines.stages import STAGES

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
    stage_names = set(STAGES)

    def input_files(stage: str, run_id: str, row: dict | None) -> InputFiles | None:
        log = INGEST_LOGS.get(stage)
        if log is None:
            return None
        log_uri = lake_read.table_uri(log, lake)
        if not lake_read.exists(log_uri):
            return None
        at = (row or {}).get("output_versions", {}).get(log.qualified_name)
        if at is None:   # no ledger row says: the newest commit of that run to the log
            newest = lake_read.open_table(log_uri).version()
            at = next((v for v in range(newest, max(-1, newest - MAX_COMMITS_SCANNED), -1)
                       if (c := lake_read.commit_lineage(log_uri, v)) is not None and c.run_id == run_id), None)
        columns = [c for c in ("source_file", "documents", "rows", "sha256", "run_id") if c in log.columns]
        rows = lake_read.read(log_uri, columns, version=at).to_pylist()
        return InputFiles(log.qualified_name, at, sorted(rows, key=lambda r: r["source_file"]))

    def from_commit(name: str, at: int, depth: int) -> Link | None:
        found = _stage_commit(lake_read.table_uri(TABLES[name], lake), at, stage_names) if name in TABLES else None
        if found is None:
            return None
        written, commit = found
        rows = [r for r in ledger if r["run_id"] == commit.run_id and r["stage"] == commit.stage]
        r = next((r for r in rows if r["status"] == "succeeded"), rows[0] if rows else None)
        out = Link(name, at, commit.run_id, commit.stage, r and r["started_at"], r and r["status"],
                   r and r["rows_in"], r and r["rows_out"], written, commit.config_hash, "commit")
        if depth < max_depth:
            out.inputs = [link(t, v, depth + 1) for t, v in sorted(commit.inputs.items())]
            out.files = input_files(commit.stage, commit.run_id, r)
        return out

    def from_ledger(name: str, at: int, depth: int) -> Link:
        # the last run that wrote this table at or before `at` (later versions of a ledger row's
        # table can be bookkeeping commits, e.g. ops tables written after the stage's own)
        writers = [r for r in ledger if r["status"] == "succeeded" and name in r["output_versions"]
                   and r["output_versions"][name] <= at]
        if not writers:
            return Link(name, at)
        r = max(writers, key=lambda r: (r["output_versions"][name], r["started_at"]))
        out = Link(name, at, r["run_id"], r["stage"], r["started_at"], r["status"], r["rows_in"], r["rows_out"],
                   r["output_versions"][name], source="ledger")
        if depth < max_depth:
            out.inputs = [link(t, v, depth + 1) for t, v in sorted(r["input_versions"].items())]
            out.files = input_files(r["stage"], r["run_id"], r)
        return out

    def link(name: str, at: int, depth: int) -> Link:
        return from_commit(name, at, depth) or from_ledger(name, at, depth)

    return link(table, version, 0)
