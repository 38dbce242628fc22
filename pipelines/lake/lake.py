"""The lake: where each table lives, how it is read, and the one place that decides which engine
commits a write to it.

A table ``layer.name`` lives at ``<root>/<layer>/<name>`` (path mode) or is the catalog table
``<catalog>.<schema>.<layer>_<name>`` (catalog mode: Unity Catalog, or Spark's session catalog).

**Who commits.** :meth:`Lake.writer` picks, per table and lake, and nothing else does:

* ``deltalake`` — the table's rows arrive as files staged by tasks or as rows from the driver
  (``TableSpec.engine == "auto"``), and the lake can take plain commits of add/remove actions: path
  mode, on local disk or on S3 with ``lake.s3_commits: conditional_put`` (delta-rs creates each
  commit file with ``If-None-Match: *``, as crawlake's Spark log store does), a table without
  writer features. Tasks write straight into the table's folder and the driver commits
  (:mod:`pipelines.lake.commits`), so no row passes through the JVM and no file is written twice.
* ``spark`` — everywhere else: catalog mode, other object stores, S3 with ``lake.s3_commits:
  single_driver`` (a store without conditional writes), tables written from Spark DataFrames
  (MERGE, joins: ``TableSpec.engine == "spark"``), or ``lake.writer: spark``. Tasks stage their
  files under ``<root>/_staging/`` and Spark's Delta writer publishes them.

Either way one call publishes a stage's output for a table as one Delta transaction — append,
replace the rows of some sources or keys, or overwrite — and both engines leave the same rows
(the tests run every stage under both and in catalog mode). The engine used for each table is
recorded in :attr:`Lake.written` for the stage's notes and ``ops.runs``. Spark and deltalake read
each other's logs, checkpoints included, and both write checkpoints: every table gets
``delta.checkpointInterval`` 10 at creation (Spark's default; delta-rs's is 100), so a table one
engine owns is checkpointed as often as one the other owns (Spark at versions that are multiples
of 10, delta-rs after every tenth commit).

**Reads.** :meth:`Lake.read` gives Spark the Parquet files the log lists (read by deltalake)
where those files hold the table's rows as they are (path mode where deltalake commits, reader
version 1, unpartitioned), and uses Spark's Delta reader elsewhere; :meth:`Lake.rows` reads
small tables on the driver without Spark where it can.

**Log loads.** Inside :func:`loaded_logs` (the runner opens it for a run) each table's log is
loaded once and brought up to date at each later use, instead of being loaded again for the
engine, each read, each commit and each recorded version (:func:`commits.loaded_logs`).

**Lineage.** Every commit a :class:`Lake` makes carries :attr:`Lake.lineage` (run id, stage,
config hash, input versions: :class:`~pipelines.lake.commits.Lineage`) as JSON in its commit
info's ``userMetadata``: deltalake through its commit properties, Spark's DataFrame writes through
the ``userMetadata`` writer option, its MERGE and ALTER TABLE commands through the session conf
:data:`USER_METADATA_CONF`, set only while such a command runs.
"""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.parquet as pq
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from pipelines.config import LakeConfig
from pipelines.lake import commits
from pipelines.lake import read as lake_read
from pipelines.lake.commits import DataFile, Lineage, loaded_logs  # noqa: F401 - the package exports it
from pipelines.lake.objectstore import for_spark, is_s3
from pipelines.lake.files import TableFiles, Target, collect_audits, collect_staged
from schemas.catalog import TableSpec

#: Table properties every table gets at creation, before its own: both engines checkpoint every
#: ten commits (Spark's default interval is 10, delta-rs's 100).
DEFAULT_PROPERTIES = (("delta.checkpointInterval", "10"),)
#: Delta's session conf whose value Spark's commands (MERGE, DELETE, ALTER TABLE, OPTIMIZE) write
#: as their commit info's ``userMetadata``.
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
#: Delta's guard against a VACUUM retention shorter than ``delta.deletedFileRetentionDuration``
#: (7 days); :meth:`Lake.purge` lifts it only while its zero-retention VACUUM runs.
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
#: How many tasks Spark's VACUUM lists a table's folders with (default 10,000, sized for tables of
#: many thousand partition folders); :meth:`Lake.purge` uses the cluster's cores while it runs.
LISTING_PARALLELISM_CONF = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (backslashes and quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_list(values: Iterable[str]) -> str:
    """``values`` as the inside of a Spark SQL ``IN (...)`` list of string literals."""
    return ", ".join(sql_string(v) for v in values)


def _match(keys) -> str:
    """MERGE condition: target ``t`` and source ``s`` equal on ``keys``."""
    return " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)


def delta_schema_json(spec: TableSpec) -> str:
    """``spec``'s schema as Delta stores it for a path write: every column, array element and map
    value nullable, as Spark's path writes make them (``StructType.asNullable``)."""
    return json.dumps(commits.as_nullable(json.loads(spec.schema.json())))


def nullable_schema(spec: TableSpec) -> StructType:
    """``spec``'s Spark schema with every column, array element and map value nullable."""
    return StructType.fromJson(commits.as_nullable(json.loads(spec.schema.json())))


def arrow_schema(spec: TableSpec) -> pa.Schema:
    """``spec``'s schema as Arrow (timestamps UTC microseconds), every column nullable."""
    return to_arrow_schema(StructType([StructField(f.name, f.dataType, True) for f in spec.schema]))


def properties(spec: TableSpec) -> dict[str, str]:
    """The table properties ``spec``'s table is created with."""
    return {**dict(DEFAULT_PROPERTIES), **dict(spec.properties)}


@dataclass(frozen=True)
class Rows:
    """Which rows a publish replaces: those whose ``column`` is in ``values`` (within the partitions
    ``partitions`` ``{column: [values, None for null]}``, when given, so that both engines prune)
    and, when given, whose columns equal ``where``'s values (data columns, non-null values)."""
    column: str
    values: tuple
    partitions: Mapping[str, Sequence] | None = None
    where: Mapping[str, object] | None = None

    def predicate(self) -> str:
        """As a Spark SQL predicate."""
        parts = []
        for column, values in (self.partitions or {}).items():
            known = [v for v in values if v is not None]
            alternatives = ([f"`{column}` IN ({', '.join(_literal(v) for v in known)})"] if known else []) + (
                [f"`{column}` IS NULL"] if None in values else [])
            parts.append("(" + " OR ".join(alternatives or ["false"]) + ")")
        parts.append(f"`{self.column}` IN ({', '.join(_literal(v) for v in self.values)})" if self.values else "false")
        parts += [f"`{column}` = {_literal(value)}" for column, value in (self.where or {}).items()]
        return " AND ".join(parts)

    def expression(self) -> "pds.Expression":
        """As a pyarrow dataset expression (the same rows as :meth:`predicate`)."""
        expr = pds.field(self.column).isin(list(self.values))
        for column, values in (self.partitions or {}).items():
            known = [v for v in values if v is not None]
            part = pds.field(column).isin(known) if known else pds.scalar(False)
            expr &= (part | pds.field(column).is_null()) if None in values else part
        for column, value in (self.where or {}).items():
            expr &= pds.field(column) == value
        return expr


def _literal(value) -> str:
    return sql_string(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class AnyRows:
    """The rows that any of ``parts`` selects, e.g. the ``(doc_id, method)`` pairs of
    ``silver.duplicate_clusters`` as one :class:`Rows` per method. The parts share their key
    column and have no ``partitions``; ValueError otherwise."""
    parts: tuple[Rows, ...]

    def __post_init__(self):
        if len({p.column for p in self.parts}) > 1 or any(p.partitions for p in self.parts):
            raise ValueError("AnyRows: the parts must share one key column and have no partitions")

    def predicate(self) -> str:
        """As a Spark SQL predicate (``false`` for no parts)."""
        return " OR ".join(f"({p.predicate()})" for p in self.parts) or "false"

    def expression(self) -> "pds.Expression":
        """As a pyarrow dataset expression (the same rows as :meth:`predicate`)."""
        expr = pds.scalar(False)
        for part in self.parts:
            expr |= part.expression()
        return expr


#: ``replace=ALL``: a publish replaces every row of the table.
ALL = "all"


@dataclass(frozen=True)
class Keys:
    """Which rows a publish replaces, by key: those whose ``column`` holds a value that the staged
    rows' ``column`` holds (the staged rows take their place), or one of ``also`` (removed with
    nothing in their place: keys that left the input). One commit adds the new keys, replaces the
    rows of keys staged again and drops ``also``'s — an incremental stage's publish.
    :meth:`Staging.publish` reads the staged files' ``column`` (and :attr:`by`) on the driver and
    publishes as :class:`Rows` of both sets (:class:`AnyRows` with :attr:`by`), so ``column`` must
    be a data column (not a partition column) and the key set must fit the driver (Spark's Delta
    writer gets it as an ``IN`` list)."""
    column: str
    also: tuple = ()
    #: a second data column: a stored row is replaced when its (``column``, ``by``) pair is staged,
    #: e.g. ``silver.duplicate_clusters``' (doc_id, method), where a document has a row per method
    #: and a publish may replace one of them only. :attr:`also`'s keys lose their rows of every ``by``.
    by: str | None = None

    def columns(self) -> list[str]:
        """The staged columns that :meth:`rows` takes."""
        return [self.column] if self.by is None else [self.column, self.by]

    def rows(self, staged: Iterable, by: Iterable | None = None) -> Rows | AnyRows:
        """The :class:`Rows` of ``staged`` keys and :attr:`also`, sorted, each once; with
        :attr:`by`, ``by`` holds each staged key's value of it, and the result is an
        :class:`AnyRows` of one :class:`Rows` per value (those of :attr:`also` first)."""
        if self.by is None:
            return Rows(self.column, tuple(sorted({*staged, *self.also})))
        groups: dict = {}
        for key, value in zip(staged, by):
            groups.setdefault(value, set()).add(key)
        parts = [Rows(self.column, tuple(sorted(self.also)))] if self.also else []
        parts += [Rows(self.column, tuple(sorted(keys)), where={self.by: value})
                  for value, keys in sorted(groups.items(), key=lambda item: str(item[0]))]
        return AnyRows(tuple(parts))


class Lake:
    def __init__(self, spark: SparkSession, cfg: LakeConfig):
        self.spark = spark
        self.cfg = cfg
        # one spelling per table: Spark's s3a:// (Delta's commit entries are keyed by the path)
        self.root = for_spark(cfg.root) if "://" in cfg.root else str(Path(cfg.root).resolve())
        #: ``{qualified table name: engine}`` of every write made through this lake (the runner
        #: records it per stage and clears it).
        self.written: dict[str, str] = {}
        #: What every commit of this lake carries in its commit info (None: nothing); the runner
        #: sets it before each stage (:func:`pipelines.ledger.commit_lineage`).
        self.lineage: Lineage | None = None
        self._schema_ready = False
        self._metadata_lock = threading.Lock()
        self._metadata_users = 0
        self._metadata_saved: str | None = None

    @contextmanager
    def _user_metadata(self) -> Iterator[None]:
        """Spark's SQL commands run inside this block write :attr:`lineage` (when set) as their
        commit info's ``userMetadata`` (:data:`USER_METADATA_CONF`). The conf is the session's, so
        concurrent blocks (driver threads) share it: the first sets it, the
        last restores what the session had before (unset when nothing)."""
        if self.lineage is None:
            yield
            return
        with self._metadata_lock:
            if self._metadata_users == 0:
                self._metadata_saved = self.spark.conf.get(USER_METADATA_CONF, None)
                self.spark.conf.set(USER_METADATA_CONF, self.lineage.to_json())
            self._metadata_users += 1
        try:
            yield
        finally:
            with self._metadata_lock:
                self._metadata_users -= 1
                if self._metadata_users == 0:
                    if self._metadata_saved is None:
                        self.spark.conf.unset(USER_METADATA_CONF)
                    else:
                        self.spark.conf.set(USER_METADATA_CONF, self._metadata_saved)

    # -- naming ---------------------------------------------------------------------------------
    def location(self, spec: TableSpec) -> str:
        """Filesystem path or URL (path mode) or three-part table name (catalog mode)."""
        if self.cfg.mode == "catalog":
            return f"{self.cfg.catalog}.{self.cfg.schema_}.{spec.layer}_{spec.name}"
        return spec.path_under(self.root)

    def _delta(self, spec: TableSpec) -> DeltaTable:
        if self.cfg.mode == "catalog":
            return DeltaTable.forName(self.spark, self.location(spec))
        return DeltaTable.forPath(self.spark, self.location(spec))

    def _local(self, spec: TableSpec) -> str | None:
        """The table's local folder in a path-mode lake on local disk, else None."""
        return commits.local_path(self.location(spec)) if self.cfg.mode == "path" else None

    def _direct(self, spec: TableSpec) -> str | None:
        """Where deltalake would commit ``spec``'s table: its local folder, or its S3 URL when
        concurrent commits there are conditional PUTs (``lake.s3_commits: conditional_put``);
        None in catalog mode and elsewhere."""
        if (local := self._local(spec)) is not None or self.cfg.mode != "path":
            return local
        uri = self.location(spec)
        return uri if is_s3(uri) and self.cfg.s3_commits == "conditional_put" else None

    # -- reads ----------------------------------------------------------------------------------
    def exists(self, spec: TableSpec) -> bool:
        if self.cfg.mode == "catalog":
            return self.spark.catalog.tableExists(self.location(spec))
        if (direct := self._direct(spec)) is not None:
            return commits.table_version(direct) is not None   # the log's listing; no Spark job
        return DeltaTable.isDeltaTable(self.spark, self.location(spec))

    def read(self, spec: TableSpec, *, added_since: int | None = None) -> DataFrame:
        """The table, or an empty DataFrame with its schema when it does not exist yet.

        ``added_since``: a Delta version; at least the rows committed after it, for a stage that
        looks for its new input since its last run (and drops what it already decided). On a plain
        table where deltalake reads the log, the rows of the files that version did not hold (a
        version diff: :func:`commits.plain_snapshot`); elsewhere, and when the log no longer holds
        that version, the whole table.

        Where deltalake reads the log (:meth:`_direct`: local disk, S3 with conditional PUTs) and
        the table's files hold all of its rows as they are (:func:`commits.plain_snapshot`),
        Spark reads the latest version's Parquet files by name with the log's schema. Spark's
        Delta reader would replay the log in Spark jobs (the snapshot's state, then the file
        listing) on each table's first read after a commit: a fixed cost of every read in every
        stage, larger on object storage. The DataFrame reads the version current at this call;
        Spark's Delta reader (catalog mode, other stores, tables with reader features or
        partitions) reads the latest at each execution."""
        return self._read(spec, added_since)[0]

    def read_counted(self, spec: TableSpec, *, added_since: int | None = None) -> tuple[DataFrame, int]:
        """:meth:`read` and its number of rows, from the same version. Where the read is of
        Parquet files named by the log (:func:`commits.plain_snapshot`), the log's per-file
        ``numRecords`` add up to it, with no Spark job; elsewhere, or when a file has no
        statistics, Spark counts the DataFrame (Parquet footers)."""
        frame, rows = self._read(spec, added_since)
        return frame, frame.count() if rows is None else rows

    def _read(self, spec: TableSpec, added_since: int | None) -> tuple[DataFrame, int | None]:
        """:meth:`read`'s DataFrame and its row count where the log gives it (else None)."""
        direct = self._direct(spec)
        # one load of the log for a plain table; None also when there is none, which exists() tells
        if direct is not None and (snapshot := commits.plain_snapshot(direct, added_since)) is not None:
            schema = StructType.fromJson(json.loads(snapshot.schema_json))
            uris = [for_spark(u) for u in snapshot.files]
            frame = self.spark.read.schema(schema).parquet(*uris) if uris else self.spark.createDataFrame([], schema)
            return frame, snapshot.num_rows
        if not self.exists(spec):
            return self.spark.createDataFrame([], spec.schema), 0
        if self.cfg.mode == "catalog":
            return self.spark.read.table(self.location(spec)), None
        return self.spark.read.format("delta").load(self.location(spec)), None

    def read_arrow(self, spec: TableSpec, columns: Sequence[str]) -> pa.Table:
        """``columns`` of every row of ``spec``'s table, as one Arrow table on the driver (no
        rows when the table does not exist): for a few narrow columns of a large table, which the
        driver aggregates sooner than a Spark job (two stages and their tasks) would. Where
        deltalake reads the log (:meth:`_direct`) pyarrow reads the files; elsewhere Spark does
        (``DataFrame.toArrow``). Raises pyarrow's or Spark's error for an unknown column."""
        empty = arrow_schema(spec).empty_table().select(list(columns))
        if (direct := self._direct(spec)) is not None:
            table = self._read_direct(direct, columns)
            return empty if table is None else table
        return self.read(spec).select(*columns).toArrow() if self.exists(spec) else empty

    @staticmethod
    def _read_direct(direct: str, columns: Sequence[str], where: Rows | None = None,
                     limit: int | None = None) -> pa.Table | None:
        """pyarrow's read of the table at ``direct`` (:meth:`_direct`; :func:`lake_read.read`),
        or None when it does not exist: one load of the log, not a second one to learn that the
        table exists."""
        if (table := commits.latest_table(direct)) is None:
            return None
        return lake_read.read(table, columns, None if where is None else where.expression(), limit=limit)

    def rows(self, spec: TableSpec, columns: Sequence[str], where: Rows | None = None, *,
             limit: int | None = None) -> list[dict]:
        """The driver's lookups in small tables (ledgers): ``columns`` of the rows ``where``
        selects (None: all), as dicts; none when the table does not exist. ``limit``: at most that
        many rows (which ones unspecified), e.g. one row of a value every row of a large table
        shares.

        Where deltalake commits (local disk, S3 with conditional PUTs: :meth:`_direct`) read with
        pyarrow over the Delta log's files (:mod:`pipelines.lake.read`): Spark's first read of a
        table replays its log in a job, seconds for a ledger of a few rows, paid again by every
        micro-batch of a stream. Elsewhere (catalog mode, other stores) Spark reads it, with the
        credentials the session has."""
        if (direct := self._direct(spec)) is not None:
            if (table := self._read_direct(direct, columns, where, limit)) is None:
                return []
            maps = [f.name for f in table.schema if pa.types.is_map(f.type)]
            rows = table.to_pylist()
            for r in rows:   # pyarrow gives a map as a list of pairs; Spark as a dict: a dict here
                r.update({m: dict(r[m]) for m in maps if r[m] is not None})
            return rows
        if not self.exists(spec):
            return []
        df = self.read(spec) if where is None else self.read(spec).where(where.predicate())
        df = df if limit is None else df.limit(limit)
        # PySpark gives timestamps as naive local times; pyarrow as UTC-aware: the same here
        return [{k: v.astimezone(timezone.utc) if isinstance(v, datetime) else v for k, v in r.asDict().items()}
                for r in df.select(*columns).collect()]

    def version(self, spec: TableSpec) -> int | None:
        """Latest Delta version, or None when the table does not exist."""
        if (direct := self._direct(spec)) is not None:
            return commits.table_version(direct)
        if not self.exists(spec):
            return None
        return int(self._delta(spec).history(1).select("version").first()[0])

    def removed_rows_since(self, spec: TableSpec, version: int | None) -> bool:
        """Whether a commit after ``version`` removed rows from ``spec``'s table (``"removed"`` in
        :meth:`changes_since`: deletes, overwrites and replaces count, a compaction does not).
        True when it cannot tell."""
        return "removed" in self.changes_since(spec, version)

    def changes_since(self, spec: TableSpec, version: int | None) -> frozenset[str]:
        """What commits after ``version`` did to ``spec``'s table besides adding rows, from its log
        (:func:`pipelines.lake.read.changes_between`): ``"removed"`` (deletes, overwrites,
        replaces) and ``"rewritten"`` (a compaction); empty after appends only. Both when it
        cannot tell: ``version`` None, the table gone, or a log pyarrow cannot read (commits
        cleaned up after a checkpoint, storage only Spark reaches). Reads the commits' JSON
        files, no data and no snapshot."""
        if version is None or (latest := self.version(spec)) is None:
            return lake_read.UNKNOWN_CHANGES
        if latest <= version:
            return frozenset()
        uri = self.location(spec)
        if self.cfg.mode == "catalog":
            detail = self.spark.sql(f"DESCRIBE TABLE EXTENDED {uri}").collect()
            uri = next((r.data_type for r in detail if r.col_name == "Location"), None)
            if uri is None:
                return lake_read.UNKNOWN_CHANGES
            uri = commits.local_path(uri) or uri   # Spark spells a local location file:/...
        try:
            return lake_read.changes_between(uri, version, latest)
        except OSError:
            return lake_read.UNKNOWN_CHANGES

    # -- the engine -------------------------------------------------------------------------------
    def writer(self, spec: TableSpec) -> str:
        """``"deltalake"`` or ``"spark"``: the engine that commits writes to ``spec``'s table on this
        lake (see the module docstring). Raises ValueError when ``lake.writer: deltalake`` is asked
        of a table or lake deltalake cannot commit to."""
        return self._writing(spec)[0]

    def _writing(self, spec: TableSpec) -> tuple[str, tuple[str, ...]]:
        """:meth:`writer` and, when it is deltalake, the columns its add actions carry statistics
        of (Delta's data-skipping columns under the table's properties, or under the catalog's
        when it does not exist yet; () for Spark), from one load of the table's log."""
        direct = self._direct(spec)
        state = commits.table_state(direct) if spec.engine == "auto" and direct is not None else None
        can = state is not None and state.writable
        if self.cfg.writer == "deltalake" and spec.engine == "auto" and not can:
            raise ValueError(f"lake.writer=deltalake cannot commit {spec.qualified_name} at {self.location(spec)}: "
                             "deltalake commits only to path-mode tables on local disk, or on S3 with "
                             "lake.s3_commits=conditional_put, without writer features")
        if not can or self.cfg.writer == "spark":
            return "spark", ()
        configuration = properties(spec) if state.configuration is None else state.configuration
        return "deltalake", tuple(commits.indexed_columns(spec.columns, spec.partition_by, configuration))

    def _record(self, spec: TableSpec, engine: str) -> None:
        self.written[spec.qualified_name] = engine

    # -- files staged by tasks ----------------------------------------------------------------------
    def staging(self, outputs: Mapping[str, TableSpec], options: Mapping[str, Sequence] | None = None,
                gate: "Gate | None" = None) -> "Staging":
        """Where a stage's tasks stage files for ``outputs`` (``{kind: spec}``): a context manager
        whose :attr:`Staging.targets` go to the tasks and whose :meth:`Staging.publish` commits a
        table's files. ``options`` ``{kind: ParquetWriter options}``. With ``gate`` the tasks
        validate their files with each table's suite, and a table is published only if the
        results pass (:class:`Gate`)."""
        return Staging(self, outputs, options or {}, gate)

    def _publish_files(self, spec: TableSpec, engine: str, folder: str, files: list[DataFile], replace,
                       txn: tuple[str, int] | None, operation: str, stats_columns: Sequence[str]) -> bool:
        """Commit ``files`` (staged under ``folder``) to ``spec``'s table with ``engine``; for
        deltalake, ``stats_columns`` are the table's (:meth:`_writing`), for the files a
        replace by :class:`Rows` rewrites."""
        if engine == "deltalake":
            root = self._direct(spec)
            removes, rewritten = [], []
            parts = replace.parts if isinstance(replace, AnyRows) else (replace,) if isinstance(replace, Rows) else ()
            if parts:   # an AnyRows' parts have no partitions: the first part's are every part's
                removes, rewritten = commits.retire_any(root, parts[0].column, [(list(p.values), dict(p.where or {})) for p in parts],
                                                        parts[0].partitions, list(stats_columns))
            try:
                done = commits.commit(root, delta_schema_json(spec), spec.partition_by, [*files, *rewritten], removes,
                                      txn=txn, configuration=properties(spec), operation=operation,
                                      lineage=self.lineage, remove_all=replace == ALL)
            except BaseException:
                commits.remove_files(root, rewritten)
                raise
            if not done:
                commits.remove_files(root, rewritten)
            return done
        paths = [f"{folder}/{f.path}" for f in files]
        df = (self.spark.read.schema(nullable_schema(spec)).option("basePath", folder).parquet(*paths) if paths
              else self.spark.createDataFrame([], spec.schema))
        mode = "append" if replace is None else "overwrite"
        where = replace.predicate() if isinstance(replace, (Rows, AnyRows)) else None
        return self._spark_write(spec, df, mode, where=where, txn=txn)

    # -- rows from the driver -------------------------------------------------------------------------
    def append_rows(self, spec: TableSpec, rows: list[tuple]) -> None:
        """Append a few rows (tuples in ``spec``'s column order): ledgers keyed by a fresh run id.
        Raises TypeError/ArrowInvalid (deltalake) or Spark's error when a value does not fit its column."""
        self.replace_rows(spec, rows, None)

    def replace_rows(self, spec: TableSpec, rows: list[tuple], replace: Rows | None, *,
                     txn: tuple[str, int] | None = None) -> bool:
        """Replace the rows ``replace`` selects (None: append) with ``rows`` (tuples in ``spec``'s
        column order), one commit; with ``txn`` it is skipped (False) when that app already
        committed that version."""
        engine, stats = self._writing(spec)
        self._record(spec, engine)
        if engine == "deltalake":
            root = self._direct(spec)
            target = Target(spec.qualified_name, root, arrow_schema(spec), tuple(spec.partition_by), stats)
            with TableFiles({"rows": target}) as out:
                out.write("rows", pa.Table.from_pylist([dict(zip(spec.columns, row)) for row in rows],
                                                       schema=target.schema))
            files = collect_staged([{"staged": out.staged()}], ["rows"])["rows"]
            try:
                done = self._publish_files(spec, engine, root, files, replace, txn, "WRITE", stats)
            except BaseException:
                commits.remove_files(root, files)
                raise
            if not done:
                commits.remove_files(root, files)
            return done
        df = self.spark.createDataFrame(rows, spec.schema)
        return self._spark_write(spec, df, "append" if replace is None else "overwrite",
                                 where=None if replace is None else replace.predicate(), txn=txn)

    def delete_rows(self, spec: TableSpec, column: str, values: Sequence[str], where: Mapping[str, str] | None = None) -> None:
        """Delete the rows whose ``column`` is in ``values`` and, when given, whose columns equal
        ``where``'s values, in one commit; no-op on a missing table or no values. The key set
        stays distributed under Spark (a MERGE), however large."""
        if not values or not self.exists(spec):
            return
        engine, stats = self._writing(spec)
        self._record(spec, engine)
        if engine == "deltalake":
            root = self._direct(spec)
            removes, rewritten = commits.retire_rows(root, column, list(values), None, list(stats),
                                                     where=dict(where or {}))
            if removes:
                commits.commit(root, delta_schema_json(spec), spec.partition_by, rewritten, removes,
                               configuration=properties(spec), operation="DELETE", lineage=self.lineage)
            return
        keys = self.spark.createDataFrame([(v,) for v in values], f"`{column}` string")
        extra = " AND ".join(f"t.`{c}` = {sql_string(v)}" for c, v in (where or {}).items()) or None
        self.delete_matching(spec, keys, (column,), extra)

    # -- physical removal ----------------------------------------------------------------------------
    def purge(self, spec: TableSpec) -> int | None:
        """Remove from storage every byte of ``spec``'s table that its latest version no longer
        holds (``crawlake forget --purge``): files whose deleted rows deletion vectors only mark
        are rewritten first (``REORG TABLE ... APPLY (PURGE)``, where the table has the feature),
        then every file the latest version does not reference is deleted (VACUUM with zero
        retention, by the engine that owns the table: deltalake's full vacuum, or Spark's VACUUM
        with ``spark.databricks.delta.retentionDurationCheck.enabled`` false only while it runs).
        Earlier versions cannot be read afterwards. Returns the files deleted (None where Spark
        vacuumed: it does not say); None on a missing table. The log (``_delta_log``) is kept."""
        if not self.exists(spec):
            return None
        engine = self.writer(spec)
        self._record(spec, engine)
        if engine == "deltalake":   # such a table has no deletion vectors (commits.table_state)
            return len(commits.vacuum(self._direct(spec), lineage=self.lineage))
        target = f"delta.`{self.location(spec)}`" if self.cfg.mode == "path" else self.location(spec)
        features = self._delta(spec).detail().select("tableFeatures").first()[0] or []
        with self._user_metadata():
            if "deletionVectors" in features:
                self.spark.sql(f"REORG TABLE {target} APPLY (PURGE)")
            cores = str(max(1, self.spark.sparkContext.defaultParallelism))
            with self._session_conf({RETENTION_CHECK_CONF: "false", LISTING_PARALLELISM_CONF: cores}):
                self.spark.sql(f"VACUUM {target} RETAIN 0 HOURS")
        return None

    @contextmanager
    def _session_conf(self, values: dict[str, str]) -> Iterator[None]:
        """Spark session ``values`` only while the block runs; what the session had is restored."""
        saved = {k: self.spark.conf.get(k, None) for k in values}
        for k, v in values.items():
            self.spark.conf.set(k, v)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    self.spark.conf.unset(k)
                else:
                    self.spark.conf.set(k, v)

    def remove_staging(self) -> bool:
        """Delete ``<root>/_staging`` (files tasks staged for Spark-published tables that a killed
        run left behind; a finished stage removes its own). Only while no run writes the lake.
        Returns whether there was one."""
        folder = f"{self.root.rstrip('/')}/_staging"
        if "://" in folder:
            import fsspec

            fs, _, (path,) = fsspec.get_fs_token_paths(folder)
            found = fs.exists(path)
        else:
            found = Path(folder).exists()
        _remove_tree(folder)
        return found

    # -- Spark DataFrame writes ----------------------------------------------------------------------
    @staticmethod
    def conform(spec: TableSpec | Sequence[TableSpec], df: DataFrame) -> DataFrame:
        """Select and cast ``df``'s columns to ``spec``'s schema, or to the union of several specs'
        schemas (rows bound for several tables, each file taking its own columns); raise ValueError
        if the columns differ, or if two specs give a shared column different types."""
        specs = [spec] if isinstance(spec, TableSpec) else list(spec)
        name = " + ".join(s.qualified_name for s in specs)
        # to the nullable form of each type: Delta stores every column, element and value
        # nullable on a path write, and a cast may not drop nulls from an array of a file's rows
        fields: dict[str, StructField] = {}
        for s in specs:
            for f in nullable_schema(s).fields:
                if fields.setdefault(f.name, f).dataType != f.dataType:
                    raise ValueError(f"{name}: column {f.name} is {fields[f.name].dataType.simpleString()} "
                                     f"in one table and {f.dataType.simpleString()} in {s.qualified_name}")
        have, want = set(df.columns), set(fields)
        if have != want:
            raise ValueError(f"{name}: missing columns {sorted(want - have)}, unexpected {sorted(have - want)}")
        # one call into the JVM for the whole projection: a Column per field costs three calls
        # (before each staged or Spark write); catalog types are primitives, lists and maps
        return df.selectExpr(*(f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`" for f in fields.values()))

    def _spark_write(self, spec: TableSpec, df: DataFrame, mode: str, *, where: str | None = None,
                     txn: tuple[str, int] | None = None, replace_schema: bool = False) -> bool:
        """One Spark Delta write of ``df`` (``mode`` append or overwrite; ``where`` makes an
        overwrite a ``replaceWhere``), creating the table with its properties if it does not
        exist. With ``txn`` the commit records Delta's ``txnAppId``/``txnVersion``, and Delta skips
        it when that app already committed that version (True either way)."""
        self._record(spec, "spark")
        writer = self.conform(spec, df).write.format("delta")
        if spec.partition_by:
            writer = writer.partitionBy(*spec.partition_by)
        if self.exists(spec):
            writer = writer.mode(mode)
            if where is not None and mode == "overwrite":
                writer = writer.option("replaceWhere", where)
        else:
            writer = writer.mode("overwrite")
            for key, value in properties(spec).items():   # options named delta.* become table properties
                writer = writer.option(key, value)
        if replace_schema:
            writer = writer.option("overwriteSchema", "true")
        if txn is not None:
            writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
        if self.lineage is not None:
            writer = writer.option("userMetadata", self.lineage.to_json())
        with self._user_metadata():   # the option is the writer's; the conf covers a catalog CTAS too
            if self.cfg.mode == "catalog":
                self._ensure_schema()
                writer.saveAsTable(self.location(spec))
            else:
                writer.save(self.location(spec))
        return True

    def _ensure_schema(self) -> None:
        if not self._schema_ready:
            name = f"{self.cfg.catalog}.{self.cfg.schema_}"
            if not self.spark.catalog.databaseExists(name):
                self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {name}")
            self._schema_ready = True

    def overwrite(self, spec: TableSpec, df: DataFrame, *, replace_schema: bool = False) -> None:
        """Replace the whole table with ``df`` (one atomic Delta commit).

        ``replace_schema``: also replace the stored schema with the catalog's (a table written
        before the catalog added a column); otherwise a schema change is an error.
        """
        self._spark_write(spec, df, "overwrite", replace_schema=replace_schema)

    def replace_where(self, spec: TableSpec, df: DataFrame, predicate: str) -> None:
        """Atomically replace the rows matching ``predicate`` with ``df`` (creates the table if new)."""
        self._spark_write(spec, df, "overwrite", where=predicate)

    def merge(self, spec: TableSpec, df: DataFrame) -> None:
        """Upsert ``df`` on the table's keys."""
        df = self.conform(spec, df)
        if not self.exists(spec):
            self.overwrite(spec, df)
            return
        self._record(spec, "spark")
        with self._user_metadata():
            (self._delta(spec).alias("t").merge(df.alias("s"), _match(spec.keys))
             .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    def insert_new(self, spec: TableSpec, df: DataFrame) -> None:
        """Insert the rows of ``df`` whose keys the table lacks (an insert-only MERGE: a retried
        write adds nothing twice, and a concurrent writer of the same keys conflicts)."""
        df = self.conform(spec, df)
        if not self.exists(spec):
            self.overwrite(spec, df)
            return
        self._record(spec, "spark")
        with self._user_metadata():
            self._delta(spec).alias("t").merge(df.alias("s"), _match(spec.keys)).whenNotMatchedInsertAll().execute()

    def delete_matching(self, spec: TableSpec, keys: DataFrame, on: tuple[str, ...], where: str | None = None) -> None:
        """Delete the rows whose ``on`` columns match a row of ``keys`` (and, if given, the SQL
        predicate ``where`` over the table's columns prefixed ``t.``), in one MERGE; no-op on a
        missing table. The key set stays distributed, however large."""
        if not self.exists(spec):
            return
        self._record(spec, "spark")
        cond = _match(on) + (f" AND ({where})" if where else "")
        with self._user_metadata():
            self._delta(spec).alias("t").merge(keys.select(*on).distinct().alias("s"), cond).whenMatchedDelete().execute()

    # -- schema upgrades ----------------------------------------------------------------------------
    def add_missing_columns(self, spec: TableSpec) -> list[str]:
        """Add the catalog's columns that an existing table lacks (a lake written by an earlier
        crawlake), each at its catalog position (``ALTER TABLE ... ADD COLUMNS (c t AFTER p)``),
        so that readers and both writers see the catalog's schema; returns the added names. Only
        nullable columns can be added to rows already written: a missing NOT NULL column raises
        ValueError naming the table and column. A missing table is left alone.

        Where deltalake reads the log (:meth:`_direct`) the columns come from one load of it: a
        run checks every table this way before its first stage, and on object storage a Spark
        read only for the schema lists the table's files."""
        if (direct := self._direct(spec)) is not None:
            have = commits.table_columns(direct)
            if have is None:
                return []
        elif not self.exists(spec):
            return []
        else:
            have = set(self.read(spec).columns)
        missing = [(i, f) for i, f in enumerate(spec.schema.fields) if f.name not in have]
        if not missing:
            return []
        required = [f.name for _, f in missing if not f.nullable]
        if required:
            raise ValueError(f"{spec.qualified_name} at {self.location(spec)} lacks NOT NULL column(s) {required}: "
                             "rows already written cannot have them; rebuild the table")
        target = f"delta.`{self.location(spec)}`" if self.cfg.mode == "path" else self.location(spec)
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()} " + (
            f"AFTER `{spec.schema.fields[i - 1].name}`" if i else "FIRST") for i, f in missing)
        with self._user_metadata():
            self.spark.sql(f"ALTER TABLE {target} ADD COLUMNS ({columns})")
        return [f.name for _, f in missing]


class Gate:
    """Write-audit-publish for staged files: :meth:`check` gets a table's suite results before
    its publish and raises (publishing nothing) when one failed, returning the rows to record
    otherwise; :meth:`record` gets those rows once the stage's staging block has ended well.
    :meth:`pipelines.stage.StageContext.staging` makes one that records in ``ops.quality``."""

    def check(self, spec: TableSpec, results: list) -> list:
        raise NotImplementedError

    def record(self, rows: list) -> None:
        raise NotImplementedError


class Staging:
    """A stage's staged files, from the targets its tasks write to until each table's publish.

    Use as a context manager (:meth:`Lake.staging`): send :attr:`targets` to the tasks, :meth:`add`
    their reports, then :meth:`publish` each table (once, or as files arrive). At the end of the
    block every staged file no commit took (a publish raised, committed nothing, or never ran) is
    removed, and the staging folder of Spark-published tables with it; readers never see such
    files, but only VACUUM would remove them otherwise.
    """

    def __init__(self, lake: Lake, outputs: Mapping[str, TableSpec], options: Mapping[str, Sequence],
                 gate: Gate | None = None):
        self.lake, self.outputs, self.gate = lake, dict(outputs), gate
        writing = {kind: lake._writing(spec) for kind, spec in self.outputs.items()}
        self.engines = {kind: engine for kind, (engine, _) in writing.items()}
        self.folder = f"{lake.root.rstrip('/')}/_staging/{uuid.uuid4().hex}"
        self.targets = {
            kind: Target(spec.qualified_name,
                         lake._direct(spec) if self.engines[kind] == "deltalake" else f"{self.folder}/{spec.layer}.{spec.name}",
                         arrow_schema(spec), tuple(spec.partition_by), writing[kind][1],
                         tuple(options.get(kind, ())), audit=gate is not None)
            for kind, spec in self.outputs.items()}
        #: ``{kind: [DataFile]}``: staged and not yet published
        self.files: dict[str, list[DataFile]] = {kind: [] for kind in self.outputs}
        #: ``{kind: [suite results of each task]}``, and the passed results to record
        self.audits: dict[str, list] = {kind: [] for kind in self.outputs}
        self._passed: list = []

    def add(self, details: Iterable[Mapping]) -> None:
        """Take the tasks' reports: each a mapping whose ``"staged"`` is what
        :meth:`~pipelines.lake.files.TableFiles.staged` gave the task."""
        details = list(details)
        for kind, files in collect_staged(details, list(self.outputs)).items():
            self.files[kind].extend(files)
        for kind, results in collect_audits(details, list(self.outputs)).items():
            self.audits[kind].extend(results)

    def stage(self, kinds: str | Sequence[str], df: DataFrame) -> None:
        """Stage ``df``'s rows as files of the table of each of ``kinds`` (one kind, or several:
        each row goes to every one of their tables, each file taking its table's columns), written by
        ``df``'s own tasks (one file per table and task with rows, audited there under a gate): for
        outputs that Spark computes (joins, windows), where no kernel task writes them. ``df``
        must hold exactly the tables' columns (:meth:`Lake.conform`: ValueError naming the
        missing and unexpected ones)."""
        self.add(self._staged(kinds, df))

    def stage_all(self, parts: Sequence[tuple[str | Sequence[str], DataFrame]]) -> None:
        """:meth:`stage` of each ``(kinds, df)`` of ``parts``, their Spark jobs run side by side
        (a driver thread each, with the calling thread's Spark job properties and context): a
        small job's fixed costs (planning, scheduling, its last task) overlap the other's instead
        of adding up. The files of every part that succeeded are added, so the block removes them
        when nothing publishes them; then the error of the first part (in ``parts``' order) that
        failed, if any, is raised."""
        import contextvars

        from pyspark.util import InheritableThread

        results: list[list | None] = [None] * len(parts)
        errors: list[BaseException | None] = [None] * len(parts)

        def run(i: int, kinds, df: DataFrame, context: contextvars.Context) -> None:
            try:
                results[i] = context.run(self._staged, kinds, df)
            except BaseException as e:   # raised below, on the calling thread
                errors[i] = e

        threads = [InheritableThread(target=run, args=(i, kinds, df, contextvars.copy_context()))
                   for i, (kinds, df) in enumerate(parts)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for details in results:
            if details is not None:
                self.add(details)
        for error in errors:
            if error is not None:
                raise error

    def _staged(self, kinds: str | Sequence[str], df: DataFrame) -> list[dict]:
        """The task reports of :meth:`stage`'s job (not yet added)."""
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        df = Lake.conform([self.outputs[k] for k in kinds], df)
        task = partial(_stage_rows, kinds=kinds, targets={k: self.targets[k] for k in kinds})
        return [json.loads(r.detail) for r in df.mapInArrow(task, "detail string").collect()]

    def paths(self, kind: str) -> list[str]:
        """Full paths (or URLs) of ``kind``'s staged files."""
        return [f"{self.targets[kind].folder}/{f.path}" for f in self.files[kind]]

    def read_arrow(self, kind: str, columns: Sequence[str]) -> pa.Table:
        """``columns`` of ``kind``'s staged files as one Arrow table, read on the driver (for
        checks on small columns before publishing); empty with the target's types when none."""
        target = self.targets[kind]
        if not self.files[kind]:
            return target.file_schema.empty_table().select(list(columns))
        fs, paths = _filesystem(self.paths(kind))
        return pq.read_table(paths, columns=list(columns), filesystem=fs, schema=target.file_schema, partitioning=None)

    def open(self, kind: str, file: DataFile) -> pq.ParquetFile:
        """One of ``kind``'s staged files, open for reading."""
        fs, (path,) = _filesystem([f"{self.targets[kind].folder}/{file.path}"])
        return pq.ParquetFile(fs.open_input_file(path) if fs is not None else path)

    def swap(self, kind: str, old: DataFile, new: Sequence[DataFile]) -> None:
        """A driver-side rewrite replaced staged file ``old`` by ``new`` (already written into the
        target's folder); ``old`` is deleted."""
        self.files[kind].remove(old)
        commits.remove_files(self.targets[kind].folder, [old])
        self.files[kind].extend(new)

    def publish(self, kind: str, *, replace=None, txn: tuple[str, int] | None = None, operation: str,
                checks: Sequence = ()) -> bool:
        """Commit ``kind``'s staged files (those added since its last publish) to its table as one
        transaction: appended (``replace`` None), replacing every row (:data:`ALL`), the rows a
        :class:`Rows` selects, or those of the staged keys and more (:class:`Keys`). With ``txn`` the commit is skipped when that app already committed
        that version. Returns whether a commit was made (deltalake makes none for nothing to add
        or remove, or a replayed ``txn``; its files are then removed at the end of the block).

        With a gate, the tasks' suite results and ``checks`` (the stage's own, e.g. key
        uniqueness across files: ``(expectation, column, success, observed)``) must pass first;
        :class:`~pipelines.stage.QualityGateError` otherwise, nothing published."""
        spec = self.outputs[kind]
        engine = self.engines[kind]
        if self.gate is not None:
            from pipelines import quality

            self._passed.extend(self.gate.check(spec, quality.merge_results(self.audits[kind]) + list(checks)))
            self.audits[kind] = []
        self.lake._record(spec, engine)
        files = self.files[kind]
        if isinstance(replace, Keys):
            keys = self.read_arrow(kind, replace.columns())
            replace = replace.rows(*(keys.column(c).to_pylist() for c in replace.columns()))
        done = self.lake._publish_files(spec, engine, self.targets[kind].folder, files, replace, txn, operation,
                                        self.targets[kind].stats_columns)
        if done or engine == "spark":
            self.files[kind] = []
        return done

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        for kind, files in self.files.items():
            if self.engines[kind] == "deltalake":
                commits.remove_files(self.targets[kind].folder, files)
        if "spark" in self.engines.values():   # only Spark's targets are under the folder
            _remove_tree(self.folder)
        if exc_type is None and self.gate is not None and self._passed:
            self.gate.record(self._passed)
        return False   # the block's exception goes on


def _stage_rows(batches, *, kinds: Sequence[str], targets: Mapping[str, Target]):
    """A task of :meth:`Staging.stage`: its rows into one file of each of ``kinds``' tables;
    yields one row, JSON of :meth:`TableFiles.report`."""
    with TableFiles(targets) as files:
        for batch in batches:
            for kind in kinds:
                files.write(kind, batch)
    yield pa.RecordBatch.from_pydict({"detail": [json.dumps(files.report())]})


def _filesystem(paths: Sequence[str]):
    """``(pyarrow filesystem or None for local, paths as that filesystem names them)``."""
    if not paths or "://" not in paths[0]:
        return None, list(paths)
    import fsspec
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs, _, names = fsspec.get_fs_token_paths(list(paths))
    return PyFileSystem(FSSpecHandler(fs)), list(names)


def _remove_tree(path: str) -> None:
    if "://" in path:
        import fsspec

        fs, _, (root,) = fsspec.get_fs_token_paths(path)
        if fs.exists(root):
            fs.rm(root, recursive=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
