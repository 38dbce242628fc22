"""Delta table I/O through the catalog.

Every write conforms the DataFrame to its :class:`~schemas.catalog.TableSpec` (column order and
types; a missing or extra column is a ``ValueError`` naming it) and is idempotent by construction:
full ``overwrite``, ``replaceWhere`` on a predicate, or ``MERGE`` on the table's keys. Only the
append-only ledgers (``ops.runs``, ``ops.quality``) append.

Locally a table ``layer.name`` lives at ``<root>/<layer>/<name>``; in catalog mode (Databricks,
Unity Catalog) it is ``<catalog>.<schema>.<layer>_<name>``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from pipelines.lake import commits as delta_files
from pipelines.config import LakeConfig
from schemas.catalog import TableSpec


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (backslashes and quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_list(values: list[str]) -> str:
    """``values`` as the inside of a Spark SQL ``IN (...)`` list of string literals."""
    return ", ".join(sql_string(v) for v in values)


def _match(keys) -> str:
    """MERGE condition: target ``t`` and source ``s`` equal on ``keys``."""
    return " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)


def delta_schema_json(spec: TableSpec) -> str:
    """``spec``'s schema as Delta stores it for a path write: every column, array element and map
    value nullable, as Spark's path writes make them (``StructType.asNullable``)."""
    return json.dumps(delta_files.as_nullable(json.loads(spec.schema.json())))


def arrow_schema(spec: TableSpec):
    """``spec``'s schema as Arrow (timestamps UTC microseconds), every column nullable."""
    return to_arrow_schema(StructType([StructField(f.name, f.dataType, True) for f in spec.schema]))


class Lake:
    def __init__(self, spark: SparkSession, cfg: LakeConfig):
        self.spark = spark
        self.cfg = cfg
        self.root = cfg.root if "://" in cfg.root else str(Path(cfg.root).resolve())

    # -- naming ---------------------------------------------------------------------------------
    def location(self, spec: TableSpec) -> str:
        """Filesystem path (path mode) or three-part table name (catalog mode)."""
        if self.cfg.mode == "catalog":
            return f"{self.cfg.catalog}.{self.cfg.schema_}.{spec.layer}_{spec.name}"
        return spec.path_under(self.root)

    def _delta(self, spec: TableSpec) -> DeltaTable:
        if self.cfg.mode == "catalog":
            return DeltaTable.forName(self.spark, self.location(spec))
        return DeltaTable.forPath(self.spark, self.location(spec))

    # -- reads ----------------------------------------------------------------------------------
    def exists(self, spec: TableSpec) -> bool:
        if self.cfg.mode == "catalog":
            return self.spark.catalog.tableExists(self.location(spec))
        return DeltaTable.isDeltaTable(self.spark, self.location(spec))

    def read(self, spec: TableSpec) -> DataFrame:
        """The table, or an empty DataFrame with its schema when it does not exist yet."""
        if not self.exists(spec):
            return self.spark.createDataFrame([], spec.schema)
        if self.cfg.mode == "catalog":
            return self.spark.read.table(self.location(spec))
        return self.spark.read.format("delta").load(self.location(spec))

    def version(self, spec: TableSpec) -> int | None:
        """Latest Delta version, or None when the table does not exist."""
        if self.cfg.mode == "path" and (local := delta_files.local_path(self.location(spec))) is not None:
            return delta_files.table_version(local)   # the log's listing; no Spark job
        if not self.exists(spec):
            return None
        return int(self._delta(spec).history(1).select("version").first()[0])

    def add_missing_columns(self, spec: TableSpec) -> list[str]:
        """Add the catalog's columns that an existing table lacks (a lake written by an earlier
        crawlake), each at its catalog position (``ALTER TABLE ... ADD COLUMNS (c t AFTER p)``),
        so that readers and both writers see the catalog's schema; returns the added names. Only
        nullable columns can be added to rows already written: a missing NOT NULL column raises
        ValueError naming the table and column. A missing table is left alone."""
        if not self.exists(spec):
            return []
        local = delta_files.local_path(self.location(spec)) if self.cfg.mode == "path" else None
        if local is not None:
            from deltalake import DeltaTable as RustTable

            have = {f.name for f in RustTable(local).schema().fields}
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
        self.spark.sql(f"ALTER TABLE {target} ADD COLUMNS ({columns})")
        return [f.name for _, f in missing]

    # -- writes ---------------------------------------------------------------------------------
    @staticmethod
    def conform(spec: TableSpec, df: DataFrame) -> DataFrame:
        """Select and cast ``df``'s columns to ``spec``'s schema; raise ValueError if they differ."""
        have, want = set(df.columns), set(spec.columns)
        if have != want:
            raise ValueError(
                f"{spec.qualified_name}: missing columns {sorted(want - have)}, unexpected {sorted(have - want)}"
            )
        return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in spec.schema.fields])

    def _writer(self, spec: TableSpec, df: DataFrame, mode: str):
        writer = self.conform(spec, df).write.format("delta").mode(mode)
        if spec.partition_by:
            writer = writer.partitionBy(*spec.partition_by)
        return writer

    def _save(self, spec: TableSpec, writer) -> None:
        if self.cfg.mode == "catalog":
            writer.saveAsTable(self.location(spec))
        else:
            writer.save(self.location(spec))

    def overwrite(self, spec: TableSpec, df: DataFrame, *, replace_schema: bool = False) -> None:
        """Replace the whole table with ``df`` (one atomic Delta commit).

        ``replace_schema``: also replace the stored schema with the catalog's (a table written
        before the catalog added a column); otherwise a schema change is an error.
        """
        writer = self._writer(spec, df, "overwrite")
        if replace_schema:
            writer = writer.option("overwriteSchema", "true")
        self._save(spec, writer)

    def replace_where(self, spec: TableSpec, df: DataFrame, predicate: str) -> None:
        """Atomically replace the rows matching ``predicate`` with ``df`` (creates the table if new)."""
        if not self.exists(spec):
            self.overwrite(spec, df)
            return
        self._save(spec, self._writer(spec, df, "overwrite").option("replaceWhere", predicate))

    def merge(self, spec: TableSpec, df: DataFrame) -> None:
        """Upsert ``df`` on the table's keys."""
        df = self.conform(spec, df)
        if not self.exists(spec):
            self.overwrite(spec, df)
            return
        cond = _match(spec.keys)
        (self._delta(spec).alias("t").merge(df.alias("s"), cond)
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    def insert_new(self, spec: TableSpec, df: DataFrame) -> None:
        """Insert the rows of ``df`` whose keys the table lacks (an insert-only MERGE: a retried
        write adds nothing twice, and a concurrent writer of the same keys conflicts)."""
        df = self.conform(spec, df)
        if not self.exists(spec):
            self.overwrite(spec, df)
            return
        cond = _match(spec.keys)
        self._delta(spec).alias("t").merge(df.alias("s"), cond).whenNotMatchedInsertAll().execute()

    def delete_matching(self, spec: TableSpec, keys: DataFrame, on: tuple[str, ...], where: str | None = None) -> None:
        """Delete the rows whose ``on`` columns match a row of ``keys`` (and, if given, the SQL
        predicate ``where`` over the table's columns prefixed ``t.``), in one MERGE; no-op on a
        missing table. The key set stays distributed, however large."""
        if not self.exists(spec):
            return
        cond = _match(on) + (f" AND ({where})" if where else "")
        self._delta(spec).alias("t").merge(keys.select(*on).distinct().alias("s"), cond).whenMatchedDelete().execute()

    def append(self, spec: TableSpec, df: DataFrame) -> None:
        """Append rows; only for append-only ledgers keyed by a fresh run id."""
        self._save(spec, self._writer(spec, df, "append"))

    def direct_location(self, spec: TableSpec) -> str | None:
        """The local folder of ``spec``'s table when tasks may write its Parquet files themselves
        and the driver commit them with deltalake (:mod:`pipelines.lake.commits`): path mode, a
        local lake, a plain protocol and the catalog's columns. None otherwise (use Spark)."""
        location = self.location(spec)
        if self.cfg.mode == "path" and delta_files.writable(location, delta_schema_json(spec)):
            return delta_files.local_path(location)
        return None

    def stats_columns(self, spec: TableSpec) -> list[str]:
        """The columns Delta keeps per-file statistics of in ``spec``'s table."""
        return delta_files.stats_columns(self.location(spec), spec.columns, spec.partition_by, dict(spec.properties))

    def commit_files(self, spec: TableSpec, adds: list[delta_files.DataFile], removes: list[dict] = (), *,
                     txn: tuple[str, int] | None = None, operation: str) -> bool:
        """Commit files tasks wrote into ``spec``'s table folder (and retire ``removes``) with
        deltalake, creating the table with the catalog's schema, partitioning and properties;
        see :func:`pipelines.delta_files.commit` (False: nothing committed)."""
        return delta_files.commit(self.location(spec), delta_schema_json(spec), spec.partition_by, adds, removes,
                                  txn=txn, configuration=dict(spec.properties), operation=operation)

    def replace_with_files(self, outputs: Mapping[str, TableSpec], roots: Mapping[str, str],
                           adds: Mapping[str, list[delta_files.DataFile]], *, operation: str) -> None:
        """Replace all rows of each table in ``outputs`` (``{kind: spec}``) with the files tasks
        wrote into its folder ``roots[kind]`` (``adds[kind]``), one deltalake commit per table, in
        order. If a commit raises, the files of that table and of the tables after it are removed
        (:class:`~pipelines.delta_files.Uncommitted`) and the error goes on."""
        with delta_files.Uncommitted(roots, adds) as written:
            for kind, spec in outputs.items():
                if self.commit_files(spec, adds[kind], delta_files.files_in(roots[kind]).to_pylist(), operation=operation):
                    written.committed(kind)

    def append_rows(self, spec: TableSpec, rows: list[tuple]) -> None:
        """Append a few rows (tuples in ``spec``'s column order), as :meth:`append`.

        On a local path-mode lake the commit goes through deltalake (milliseconds; a Spark write of
        one ledger row costs about a second of driver and job overhead), else through Spark.
        Raises TypeError/ArrowInvalid (deltalake) or Spark's error when a value does not fit its column.
        """
        location = self.direct_location(spec)
        if location is not None:
            table = pa.Table.from_pylist([dict(zip(spec.columns, row)) for row in rows], schema=arrow_schema(spec))
            delta_files.append_table(location, table, spec.partition_by, dict(spec.properties))
        else:
            self.append(spec, self.spark.createDataFrame(rows, spec.schema))
