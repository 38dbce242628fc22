"""Parquet files written by engine workers, committed to a Delta table by deltalake (no JVM).

A stage whose tasks already write their output as Parquet files with pyarrow (``clicks ingest``)
needs no Spark Delta write, which would read those rows back into the JVM, encode them again and
collect statistics there. Instead each task writes its file straight into the table's folder
(invisible to readers until committed), :func:`describe` turns the file's footer into a Delta add
action with per-file statistics, and the driver commits all of them, with the remove actions of
the files they replace, as one Delta transaction through ``deltalake`` (delta-rs). Spark, delta-rs
and every other Delta reader see an ordinary commit.

Follows the Delta protocol (delta-io/delta ``PROTOCOL.md``: "Add File and Remove File",
"Per-file Statistics", "Partition Value Serialization", "Set Transaction"). Only tables a plain
append may write are used (writer version <= 2: no CHECK constraints, generated columns or table
features a writer must enforce on the data); :func:`writable` says which.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: The partition folder (and Spark's spelling) of a null partition value.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: Delta keeps string min/max statistics as 32-character prefixes (with a tie-breaker on the
#: max); longer values are left out of the statistics here, which readers take as "unknown".
STRING_PREFIX_LENGTH = 32
#: Characters Hive/Spark escape as %XX in partition folder names.
_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(32)}


@dataclass(frozen=True)
class DataFile:
    """One written Parquet file, ready to become a Delta add action."""
    path: str                                   # relative to the table root, '/'-separated
    size_bytes: int
    partition_values: dict[str, str | None]     # serialized as the protocol says (None = null)
    num_records: int
    stats: str                                  # the add action's JSON statistics

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DataFile":
        return cls(**json.loads(text))


class PartFile:
    """One Parquet data file a task writes into a table's folder: opened on the first batch,
    written under a hidden name and renamed on close, so it appears whole or not at all (object
    stores publish on close). ``options`` go to ``pyarrow.parquet.ParquetWriter``."""

    def __init__(self, path: str, schema: pa.Schema, **options):
        self.path, self.schema, self.options = path, schema, options
        self.stream = self.writer = self.tmp = None

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append ``batch`` (a record batch or a table) as a row group; an empty one writes
        nothing (no file for no rows)."""
        if batch.num_rows == 0:
            return
        if self.writer is None:
            if "://" in self.path:
                import fsspec

                self.stream = fsspec.open(self.path, "wb", auto_mkdir=True).open()
            else:
                folder = os.path.dirname(self.path) or "."
                os.makedirs(folder, exist_ok=True)
                self.tmp = os.path.join(folder, f".{os.path.basename(self.path)}.{os.getpid()}.tmp")
                self.stream = open(self.tmp, "wb")
            self.writer = pq.ParquetWriter(self.stream, self.schema, **self.options)
        self.writer.write(batch)

    def close(self) -> bool:
        """Finish the file; True if one was written (at least one row)."""
        if self.writer is None:
            return False
        self.writer.close()
        self.stream.close()
        if self.tmp is not None:
            os.replace(self.tmp, self.path)
        return True

    def abort(self) -> None:
        """Drop the file: nothing is published, a partial local file is removed."""
        if self.writer is not None:
            self.writer.is_open = False   # no footer: its __del__ would write one into the closed stream
        if self.stream is not None:
            # an fsspec upload is published by close(); discard() drops it instead
            getattr(self.stream, "discard", self.stream.close)()
        if self.tmp is not None and os.path.exists(self.tmp):
            os.remove(self.tmp)


class PartFiles:
    """One :class:`PartFile` named ``name`` (default: a fresh :func:`part_name`) in each table
    folder of ``roots`` (``{kind: folder}``, with ``schemas`` ``{kind: pa.Schema}``), as a task
    writes one file per output table. A context manager: at the end of its block all files are
    closed, or, if the block (or a close) raises, all are aborted. Then :meth:`adds` gives the
    add action of each file that got rows."""

    def __init__(self, roots: Mapping[str, str], schemas: Mapping[str, pa.Schema], name: str | None = None):
        self.roots, self.name = dict(roots), name or part_name()
        self.files = {kind: PartFile(f"{root}/{self.name}", schemas[kind]) for kind, root in self.roots.items()}
        self.written: dict[str, bool] = {}

    def write(self, kind: str, data: pa.RecordBatch | pa.Table) -> None:
        """Append ``data``'s columns of table ``kind``'s schema, in its order and types (extra
        columns are dropped; pyarrow raises when one is missing or cannot be cast)."""
        schema = self.files[kind].schema
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        self.files[kind].write(table.select(schema.names).cast(schema))

    def __enter__(self) -> "PartFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                self.written = {kind: f.close() for kind, f in self.files.items()}
                return False
            except BaseException:
                self._abort()
                raise
        self._abort()
        return False   # the block's exception goes on

    def _abort(self) -> None:
        for f in self.files.values():
            f.abort()

    def adds(self, stats_columns: Mapping[str, Sequence[str]]) -> dict[str, str]:
        """``{kind: DataFile JSON}`` for each closed file with rows; ``stats_columns[kind]`` are
        the columns its statistics cover."""
        return {kind: describe(self.roots[kind], self.name, {}, stats_columns[kind]).to_json()
                for kind, done in self.written.items() if done}


def task_adds(details: Iterable[Mapping], kinds: Iterable[str]) -> dict[str, list[DataFile]]:
    """``{kind: [DataFile]}`` from tasks' reports, each with ``"adds"``: ``{kind: DataFile JSON}``
    (what :meth:`PartFiles.adds` gave the task)."""
    details = list(details)
    return {kind: [DataFile.from_json(d["adds"][kind]) for d in details if kind in d["adds"]] for kind in kinds}


class Uncommitted:
    """The driver's side of :class:`PartFiles`: the files tasks wrote, ``adds`` (``{kind:
    [DataFile]}``, paths relative to the local folders ``roots[kind]``), until a commit names them.

    A context manager: call :meth:`committed` once a table's commit has succeeded; at the end of
    the block the files of every other table (its commit raised, or committed nothing, e.g. a
    replayed transaction) are deleted. Readers never see such files, but only VACUUM would remove
    them, so a failed stage would otherwise leave them behind for good.
    """

    def __init__(self, roots: Mapping[str, str], adds: Mapping[str, Sequence[DataFile]]):
        self.roots, self.adds = dict(roots), {kind: list(files) for kind, files in adds.items()}
        self.pending = set(self.adds)

    def committed(self, kind: str) -> None:
        self.pending.discard(kind)

    def __enter__(self) -> "Uncommitted":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        for kind in sorted(self.pending):
            for add in self.adds[kind]:
                path = os.path.join(self.roots[kind], add.path)
                if os.path.exists(path):
                    os.remove(path)
        return False   # the block's exception goes on


#: Files a task writes for one source file: ``part-<source key>-<uuid4 hex>.c000.snappy.parquet``.
SOURCE_PART = re.compile(r"part-([0-9a-f]{16})-[0-9a-f]{32}\.c000\.snappy\.parquet")


def source_key(source: str) -> str:
    """16 hex digits of sha256(source): names the files holding only that source's rows."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def part_name(source: str | None = None) -> str:
    """A fresh data file name, ``part-<uuid4 hex>.c000.snappy.parquet``; with ``source``, a
    :data:`SOURCE_PART` name carrying its :func:`source_key`."""
    tag = f"{source_key(source)}-" if source is not None else ""
    return f"part-{tag}{uuid.uuid4().hex}.c000.snappy.parquet"


def files_of_sources(table_uri: str, sources: Sequence[str]) -> list[dict] | None:
    """The live files of an unpartitioned table holding rows of ``sources`` (a re-ingest replaces
    them), as :func:`files_in` rows. A :data:`SOURCE_PART` file holds one source's rows, named by
    its key. None when another file (written by Spark, or rewritten by OPTIMIZE) may hold rows of
    one of ``sources`` by its ``source_file`` statistics: it needs a row-level rewrite (Spark's
    ``replaceWhere``)."""
    keys = {source_key(s) for s in sources}
    found = []
    for entry in files_in(table_uri, None, ["source_file"]).to_pylist():
        match = SOURCE_PART.fullmatch(entry["path"].rsplit("/", 1)[-1])
        if match:
            if match.group(1) in keys:
                found.append(entry)
            continue
        low, high = entry.get("min.source_file"), entry.get("max.source_file")
        # statistics hold 32-character prefixes: p may be in the file iff low <= p and p's prefix <= high's
        if low is None or high is None or any(low <= p and p[:STRING_PREFIX_LENGTH] <= high[:STRING_PREFIX_LENGTH]
                                              for p in sources):
            return None
    return found


def local_path(uri: str) -> str | None:
    """The local folder of a table URI (a plain path or ``file:``), else None."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return None if "://" in uri else os.path.abspath(uri)


def serialize_partition_value(value) -> str | None:
    """A partition value as Delta stores it in ``partitionValues`` (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def partition_folder(values: Mapping[str, object]) -> str:
    """``col=value/...`` for ``values`` in order, Hive-escaped, nulls as :data:`NULL_PARTITION`."""
    parts = []
    for name, value in values.items():
        text = serialize_partition_value(value)
        text = NULL_PARTITION if text is None else "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)
        parts.append(f"{name}={text}")
    return "/".join(parts)


def indexed_columns(columns: Sequence[str], partition_by: Sequence[str], configuration: Mapping[str, str | None]) -> list[str]:
    """The columns whose statistics Delta keeps: ``delta.dataSkippingStatsColumns`` if set, else
    the first ``delta.dataSkippingNumIndexedCols`` (default 32, -1 = all) non-partition columns."""
    named = configuration.get("delta.dataSkippingStatsColumns")
    if named:
        return [c.strip().strip("`") for c in named.split(",") if c.strip()]
    data_columns = [c for c in columns if c not in partition_by]
    n = int(configuration.get("delta.dataSkippingNumIndexedCols") or 32)
    return data_columns if n < 0 else data_columns[:n]


def _stat_value(value):
    if isinstance(value, datetime):   # Delta's timestamp statistics: UTC, milliseconds
        value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str) and len(value) > STRING_PREFIX_LENGTH:
        return None
    if isinstance(value, (bytes, bytearray)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None   # JSON has no infinity or NaN: left out, so readers take the bound as unknown
    return value


def file_stats(metadata: pq.FileMetaData, columns: Sequence[str]) -> dict:
    """Delta per-file statistics of a Parquet file from its footer: ``numRecords`` and, for each
    top-level column of ``columns`` in the file, ``minValues``/``maxValues``/``nullCount`` over
    its row groups. A column whose min/max a row group lacks, or cannot be stated exactly (strings
    over :data:`STRING_PREFIX_LENGTH` characters, binary), gets no min/max: readers then never
    skip the file by it."""
    stats: dict = {"numRecords": metadata.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    where = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    for name in columns:
        if name not in where:
            continue
        j = where[name]
        lows, highs, nulls = [], [], 0
        for g in range(metadata.num_row_groups):
            if metadata.row_group(g).num_rows == 0:
                continue   # an empty row group has no statistics and holds nothing
            s = metadata.row_group(g).column(j).statistics
            if s is None or not s.has_null_count:
                nulls = None
            elif nulls is not None:
                nulls += s.null_count
            if s is not None and s.has_min_max:
                lows.append(s.min)
                highs.append(s.max)
            elif s is None or s.null_count != metadata.row_group(g).num_rows:
                lows = highs = None   # a row group with values but no min/max: unknown
                break
        if nulls is not None:
            stats["nullCount"][name] = nulls
        if lows and highs:
            low, high = _stat_value(min(lows)), _stat_value(max(highs))
            if low is not None and high is not None:
                stats["minValues"][name], stats["maxValues"][name] = low, high
    return stats


def describe(table_root: str, relative_path: str, partition_values: Mapping[str, object],
             stats_columns: Sequence[str]) -> DataFile:
    """The :class:`DataFile` of ``<table_root>/<relative_path>`` (a finished local Parquet file).

    Raises OSError when the file is missing, pyarrow.ArrowInvalid when it is not Parquet.
    """
    full = os.path.join(table_root, relative_path)
    metadata = pq.read_metadata(full)
    return DataFile(relative_path, os.path.getsize(full),
                    {k: serialize_partition_value(v) for k, v in partition_values.items()},
                    metadata.num_rows, json.dumps(file_stats(metadata, stats_columns), separators=(",", ":")))


def as_nullable(schema, *, metadata: bool = True):
    """A Delta/Spark schema (parsed JSON) with every field, array element and map value nullable
    (what Spark's path writes store); ``metadata=False`` also drops field metadata (the form
    schemas are compared in)."""
    if isinstance(schema, dict):
        out = {k: as_nullable(v, metadata=metadata) for k, v in schema.items() if metadata or k != "metadata"}
        for key in ("nullable", "containsNull", "valueContainsNull"):
            if key in out:
                out[key] = True
        return out
    if isinstance(schema, list):
        return [as_nullable(v, metadata=metadata) for v in schema]
    return schema


def writable(table_uri: str, schema_json: str | None = None) -> bool:
    """True when ``table_uri`` is a local Delta table (or no table yet) that a plain commit of
    add/remove actions may write: writer version <= 2, no table features and, given
    ``schema_json`` (a Spark/Delta struct type as JSON), the same column names and types."""
    from deltalake import DeltaTable

    root = local_path(table_uri)
    if root is None:
        return False
    if not DeltaTable.is_deltatable(root):
        return not os.path.exists(os.path.join(root, "_delta_log"))
    table = DeltaTable(root)
    protocol = table.protocol()
    if protocol.min_writer_version > 2 or protocol.writer_features:
        return False
    if schema_json is None:
        return True
    have, want = (as_nullable(json.loads(text), metadata=False) for text in (table.schema().to_json(), schema_json))
    return have == want


def commit(table_uri: str, schema_json: str, partition_by: Sequence[str], adds: Sequence[DataFile],
           removes: Sequence[Mapping] = (), *, txn: tuple[str, int] | None = None,
           configuration: Mapping[str, str] | None = None, operation: str = "WRITE") -> bool:
    """Commit ``adds`` (files already under the table's folder) and ``removes`` (rows of
    :func:`files_in`, as dicts: the files to retire) as one Delta transaction; create the table
    with this first commit if it does not exist, with ``schema_json`` (a Delta schema as JSON),
    ``partition_by`` and ``configuration`` (table properties).

    ``txn=(app_id, version)`` records a Delta set-transaction, as Spark's ``txnAppId``/
    ``txnVersion`` options do. Returns False, committing nothing, when that app already committed
    that version (a replayed micro-batch: :func:`already_committed`) or when there is nothing to
    add or remove in an existing table. Raises deltalake's errors (e.g. CommitFailedError on a
    conflicting concurrent commit).
    """
    from deltalake import DeltaTable, Schema
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction, create_table_with_add_actions

    root = local_path(table_uri) or table_uri
    exists = DeltaTable.is_deltatable(root)
    if already_committed(root, txn) or (exists and not adds and not removes):
        return False
    now_ms = int(time.time() * 1000)
    add_actions = [AddAction(f.path, f.size_bytes, f.partition_values, now_ms, True, f.stats) for f in adds]
    props = CommitProperties(app_transactions=[Transaction(txn[0], int(txn[1]))] if txn else None,
                             custom_metadata={"crawlake.operation": operation})
    if not exists:
        create_table_with_add_actions(root, Schema.from_json(schema_json), add_actions, mode="error",
                                      partition_by=list(partition_by), configuration=dict(configuration or {}),
                                      commit_properties=props)
        return True
    table = DeltaTable(root)
    remove_actions = [RemoveAction(r["path"], True, now_ms, r.get("size_bytes"),
                                   {k[len("partition."):]: serialize_partition_value(v)
                                    for k, v in r.items() if k.startswith("partition.")})
                      for r in removes]
    table.create_write_transaction([*remove_actions, *add_actions], mode="append", schema=table.schema(),
                                   partition_by=list(partition_by) or None, commit_properties=props)
    return True


def append_table(table_uri: str, table: pa.Table, partition_by: Sequence[str] = (),
                 configuration: Mapping[str, str] | None = None) -> None:
    """Append ``table``'s rows (deltalake writes and commits them); create the table, with
    ``partition_by`` and ``configuration``, if it does not exist."""
    from deltalake import DeltaTable, write_deltalake

    root = local_path(table_uri) or table_uri
    if DeltaTable.is_deltatable(root):
        write_deltalake(root, table, mode="append")
    else:
        write_deltalake(root, table, mode="error", partition_by=list(partition_by) or None,
                        configuration=dict(configuration or {}))


def replace_rows(table_uri: str, table: pa.Table, column: str, values: Sequence[str], *,
                 txn: tuple[str, int] | None = None) -> None:
    """Replace the rows whose ``column`` is in ``values`` with ``table``'s rows, in one commit
    (deltalake's predicate overwrite); create the table if it does not exist. With ``txn``, a
    set-transaction is recorded and the write skipped when that app already committed that version."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.transaction import CommitProperties, Transaction

    root = local_path(table_uri) or table_uri
    if already_committed(root, txn):
        return
    props = CommitProperties(app_transactions=[Transaction(txn[0], int(txn[1]))] if txn else None)
    if DeltaTable.is_deltatable(root):
        predicate = f"{column} IN (" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + ")"
        write_deltalake(root, table, mode="overwrite", predicate=predicate, commit_properties=props)
    else:
        write_deltalake(root, table, mode="error", commit_properties=props)


def already_committed(table_uri: str, txn: tuple[str, int] | None) -> bool:
    """Whether the table records a set-transaction of ``txn``'s app at ``txn``'s version or later
    (False for no ``txn`` or no table)."""
    from deltalake import DeltaTable

    root = local_path(table_uri) or table_uri
    if txn is None or not DeltaTable.is_deltatable(root):
        return False
    done = DeltaTable(root).transaction_version(txn[0])
    return done is not None and done >= txn[1]


def stats_columns(table_uri: str, columns: Sequence[str], partition_by: Sequence[str],
                  configuration: Mapping[str, str | None]) -> list[str]:
    """:func:`indexed_columns` under the table's own properties, or ``configuration`` (those it will
    be created with) when the table does not exist yet."""
    from deltalake import DeltaTable

    root = local_path(table_uri) or table_uri
    if DeltaTable.is_deltatable(root):
        configuration = DeltaTable(root).metadata().configuration
    return indexed_columns(columns, partition_by, configuration)


def table_version(table_uri: str) -> int | None:
    """The table's latest version (None: no table)."""
    from deltalake import DeltaTable

    root = local_path(table_uri) or table_uri
    return DeltaTable(root).version() if DeltaTable.is_deltatable(root) else None


def files_in(table_uri: str, partitions: Mapping[str, Sequence[object]] | None = None,
             columns: Sequence[str] = ()) -> pa.Table:
    """The table's live files (``path``, ``size_bytes``, ``partition.<col>``, ``min.<c>``,
    ``max.<c>`` of ``columns``), only those whose partition values are in ``partitions``
    (``{col: [values, None for null]}``). An empty table when the table does not exist."""
    from deltalake import DeltaTable

    root = local_path(table_uri) or table_uri
    if not DeltaTable.is_deltatable(root):
        return pa.table({"path": pa.array([], pa.string()), "size_bytes": pa.array([], pa.int64())})
    actions = pa.table(DeltaTable(root).get_add_actions(flatten=True))
    keep = None
    for column, values in (partitions or {}).items():
        col = actions.column(f"partition.{column}")
        wanted = [v for v in values if v is not None]
        hit = pc.is_in(col, value_set=pa.array(wanted, col.type)) if wanted else pa.repeat(False, len(col))
        if None in values:
            hit = pc.or_(pc.fill_null(hit, False), pc.is_null(col))
        hit = pc.fill_null(hit, False)
        keep = hit if keep is None else pc.and_(keep, hit)
    if keep is not None:
        actions = actions.filter(keep)
    names = ["path", "size_bytes", *[n for n in actions.column_names if n.startswith("partition.")],
             *[f"{kind}.{c}" for c in columns for kind in ("min", "max") if f"{kind}.{c}" in actions.column_names]]
    return actions.select(names)
