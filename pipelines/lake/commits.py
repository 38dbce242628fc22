"""Committing files tasks wrote to a Delta table with ``deltalake`` (delta-rs), no JVM.

Tables on local disk or on S3 (``s3://``/``s3a://``; on S3 each commit file is created with a
conditional PUT, :func:`storage_options`). Tasks write their output as Parquet files straight into
the table's folder (invisible to readers until committed, :mod:`pipelines.lake.files`); :func:`describe` turns a file's footer into a Delta
add action with per-file statistics; :func:`retire_rows` finds the files holding rows a publish
replaces (rewriting a file that also holds other rows without them); :func:`commit` makes all of
it, adds and removes, one Delta transaction. Spark, delta-rs and every other Delta reader see an
ordinary commit. Only :class:`pipelines.lake.Lake` calls this module.

Follows the Delta protocol (delta-io/delta ``PROTOCOL.md``: "Add File and Remove File",
"Per-file Statistics", "Partition Value Serialization", "Set Transaction"). Only tables a plain
append may write are used (writer version <= 2: no CHECK constraints, generated columns or table
features a writer must enforce on the data); :func:`table_state` says which.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import NamedTuple

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


#: The commit info field that carries a commit's :class:`Lineage` as JSON: Spark's
#: ``userMetadata`` (the DataFrameWriter option, or the session conf
#: ``spark.databricks.delta.commitInfo.userMetadata`` for MERGE/DELETE/ALTER), which deltalake
#: writes too when its commit properties' custom metadata has that key.
LINEAGE_FIELD = "userMetadata"


@dataclass(frozen=True)
class Lineage:
    """What every commit crawlake makes says about where it came from, in its Delta commit info
    (:data:`LINEAGE_FIELD`), the same JSON from either engine::

        {"config_hash": "3f2a…", "inputs": {"bronze.documents": 4}, "run_id": "20240501T…-1a2b3c4d",
         "stage": "dedup"}

    ``run_id`` and ``stage`` are those of the stage run's ``ops.runs`` row, ``config_hash`` its
    ``Config.hash()`` (16 hex digits of the configuration with secrets left out: no secret value
    reaches a commit), ``inputs`` ``{table: Delta version}`` of the stage's input tables before it
    ran (what ``ops.runs.input_versions`` records; tables that did not exist yet are left out).
    Built by :func:`pipelines.ledger.commit_lineage`; :class:`pipelines.lake.Lake` puts it on its
    commits; :func:`pipelines.lake.read.commit_lineage` reads it back."""
    run_id: str
    stage: str
    config_hash: str
    inputs: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        """The JSON text the commit info carries (keys sorted, inputs sorted by table)."""
        return json.dumps({"run_id": self.run_id, "stage": self.stage, "config_hash": self.config_hash,
                           "inputs": {k: int(v) for k, v in sorted(self.inputs.items())}},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_commit_info(cls, info: Mapping | None) -> "Lineage | None":
        """The lineage a Delta commit info (a dict, as in ``DeltaTable.history()`` or the log's
        ``commitInfo`` action) carries; None when it has none (a commit made by an older crawlake
        or another tool, or ``userMetadata`` that is not this JSON)."""
        text = (info or {}).get(LINEAGE_FIELD)
        if not isinstance(text, str):
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("run_id", "stage", "config_hash")):
            return None
        inputs = data.get("inputs") or {}
        if not isinstance(inputs, dict):
            return None
        return cls(data["run_id"], data["stage"], data["config_hash"], {str(k): int(v) for k, v in inputs.items()})


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


def local_path(uri: str) -> str | None:
    """The local folder of a table URI (a plain path or ``file:``), else None."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return None if "://" in uri else os.path.abspath(uri)


def storage_options(table_uri: str) -> dict | None:
    """deltalake's storage options for a table at ``table_uri``: None on local disk. On S3 the
    credentials and endpoint come from the standard AWS variables (as for every reader,
    :func:`pipelines.lake.read.delta_options`), and ``conditional_put: etag`` is stated rather
    than left to delta-rs's default: each commit file is then a PUT with ``If-None-Match: *``, so
    of writers racing for one version exactly one creates it and the others retry at the next
    version or fail with a conflict, never overwrite it (the mechanism of crawlake's Spark log
    store, ``lake.s3_commits: conditional_put``)."""
    if "://" not in table_uri or table_uri.startswith("file:"):
        return None
    from pipelines.lake.read import delta_options

    return delta_options(table_uri, {"conditional_put": "etag"})


def _root(table_uri: str) -> str:
    return local_path(table_uri) or table_uri


#: ``{table root: DeltaTable}`` loaded inside :func:`loaded_logs` (None outside it). A context
#: variable: another thread (a stream's micro-batch callback, a progress watcher) starts without
#: it and loads for itself, so no DeltaTable is shared between threads.
_LOADED: ContextVar[dict | None] = ContextVar("crawlake_loaded_logs", default=None)


@contextmanager
def loaded_logs() -> Iterator[None]:
    """Inside the block (a run, :func:`pipelines.runner.run_stages`), :func:`latest_table` loads
    each table's log once and brings that load up to date at each later use (deltalake's
    ``update_incremental``: the commits after the loaded version, and a newer checkpoint if any),
    instead of reading the checkpoint and every commit since it again. A stage asks for its
    tables' latest versions many times (its engine, each read, each commit, the versions the
    ledger records); on object storage each full load is several requests. Commits by other
    writers are seen as before. For a block in which no table's log is deleted and re-created
    (a cached load would not notice that)."""
    token = _LOADED.set({})
    try:
        yield
    finally:
        _LOADED.reset(token)


def latest_table(table_uri: str):
    """The deltalake table at ``table_uri`` at its latest version, or None when there is none:
    one load of the log, or inside :func:`loaded_logs` the block's load brought up to date."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    root = _root(table_uri)
    loaded = _LOADED.get()
    if loaded is not None and (table := loaded.get(root)) is not None:
        table.update_incremental()
        return table
    try:
        table = DeltaTable(root, storage_options=storage_options(root))
    except TableNotFoundError:
        return None
    if loaded is not None:
        loaded[root] = table
    return table


def _parquet(path: str, **options) -> pq.ParquetFile:
    """A Parquet file, local or an fsspec URL, open for reading (``options``: ParquetFile's)."""
    if "://" not in path:
        return pq.ParquetFile(path, **options)
    import fsspec

    return pq.ParquetFile(fsspec.open(path, "rb").open(), **options)


def _write_parquet(rows: pa.Table, path: str) -> tuple[int, pq.FileMetaData]:
    """``rows`` as the Parquet file ``path`` (local, or an fsspec URL: an object store publishes it
    whole on close); returns its size in bytes and its footer, as written (for :func:`describe`,
    which then reads nothing back)."""
    footer: list[pq.FileMetaData] = []
    if "://" not in path:
        pq.write_table(rows, path, metadata_collector=footer)
        return os.path.getsize(path), footer[0]
    import fsspec

    with fsspec.open(path, "wb") as fh:
        pq.write_table(rows, fh, metadata_collector=footer)
        size = fh.tell()
    return size, footer[0]


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
             stats_columns: Sequence[str], written: tuple[int, pq.FileMetaData] | None = None) -> DataFile:
    """The :class:`DataFile` of ``<table_root>/<relative_path>`` (a finished Parquet file, local or
    an fsspec URL). ``written``: its size in bytes and footer, as the writer that just wrote it
    has them (:class:`~pipelines.lake.files.PartFile`, a file :func:`retire_rows` rewrote); otherwise
    both are read from the file.

    Raises OSError when the file is missing, pyarrow.ArrowInvalid when it is not Parquet.
    """
    full = f"{table_root}/{relative_path}"
    if written is not None:
        size, metadata = written
    elif "://" in full:
        import fsspec

        fs, _, (path,) = fsspec.get_fs_token_paths(full)
        size = fs.size(path)
        with fs.open(path, "rb") as fh:
            metadata = pq.read_metadata(fh)
    else:
        size, metadata = os.path.getsize(full), pq.read_metadata(full)
    return DataFile(relative_path, size,
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


class TableState(NamedTuple):
    """What a writer learns of a table from one load of its log (:func:`table_state`)."""
    #: a plain commit of add/remove actions may write it: a Delta table (or no table yet) on local
    #: disk or S3 with writer version <= 2 and no table features (no CHECK constraints, generated
    #: columns, deletion vectors or column mapping a writer must honour). False for other
    #: locations (other object stores: their commit safety is not established here).
    writable: bool
    #: its properties (``delta.*`` settings); None when there is no table yet
    configuration: Mapping[str, str | None] | None


def table_state(table_uri: str) -> TableState:
    """Whether a plain commit may write the table, and its properties, from one load of its log
    (on S3 a load is requests: a stage learns both of each output before writing it)."""
    from pipelines.lake.objectstore import is_s3

    root = _root(table_uri)
    if "://" in root and not is_s3(root):
        return TableState(False, None)
    if (table := latest_table(root)) is None:
        return TableState(not _log_exists(root), None)
    protocol = table.protocol()
    return TableState(protocol.min_writer_version <= 2 and not protocol.writer_features, table.metadata().configuration)


class PlainSnapshot(NamedTuple):
    """What :func:`plain_snapshot` gives."""

    schema_json: str   # Delta's schema JSON, which is Spark's StructType JSON
    files: list[str]   # data file URIs
    num_rows: int | None   # the files' rows, from the log's per-file numRecords; None when one has none


def plain_snapshot(table_uri: str, added_since: int | None = None) -> PlainSnapshot | None:
    """The schema, data file URIs and row count of the latest version of the table at
    ``table_uri`` when a plain Parquet read of those files gives exactly its rows: reader version
    1 (no deletion vectors, no column mapping) and no partition columns (their values live in the
    log, not the files). None otherwise, and when there is no table. One load of the log through
    deltalake (no data read).

    ``added_since``: a version; only the files that version did not hold (a version diff of the
    two snapshots' file lists, a second load of the log). They hold every row committed after it,
    and the other rows of any file rewritten since (a delete, a compaction): a superset of what
    was added. Every file when the log cannot give that version (later than the latest, or its
    commits cleaned up after a checkpoint)."""
    if (table := latest_table(table_uri)) is None:
        return None
    if table.protocol().min_reader_version > 1 or table.metadata().partition_columns:
        return None
    files = list(table.file_uris())
    counts = _num_records(table, files)
    if added_since is not None and 0 <= added_since <= table.version():
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        root = _root(table_uri)
        try:
            before = set(DeltaTable(root, version=added_since, storage_options=storage_options(root)).file_uris())
        except DeltaError:   # that version's commits are gone: every file
            before = set()
        counts = [n for f, n in zip(files, counts) if f not in before]
        files = [f for f in files if f not in before]
    return PlainSnapshot(table.schema().to_json(), files, None if None in counts else sum(counts))


def _num_records(table, files: list[str]) -> list[int | None]:
    """``numRecords`` of each of ``files`` (``table.file_uris()``) from the log's add actions, which
    list the snapshot's files in the same order; None for each when a path does not pair up."""
    from urllib.parse import unquote

    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    counts = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else []
    if len(paths) != len(files) or len(counts) != len(files) or not all(
            f.endswith(p) or f.endswith(unquote(p)) for f, p in zip(files, paths)):
        return [None] * len(files)
    return counts


def _log_exists(root: str) -> bool:
    """Whether ``<root>/_delta_log`` holds anything (a folder deltalake does not take for a table)."""
    log = f"{root}/_delta_log"
    if "://" not in root:
        return os.path.exists(log)
    import fsspec

    fs, _, (path,) = fsspec.get_fs_token_paths(log)
    return bool(fs.exists(path) and fs.ls(path))


def commit(table_uri: str, schema_json: str, partition_by: Sequence[str], adds: Sequence[DataFile],
           removes: Sequence[Mapping] = (), *, txn: tuple[str, int] | None = None,
           configuration: Mapping[str, str] | None = None, operation: str = "WRITE",
           lineage: Lineage | None = None, remove_all: bool = False) -> bool:
    """Commit ``adds`` (files already under the table's folder) and ``removes`` (rows of
    :func:`files_in`, as dicts: the files to retire; ``remove_all``: every live file, as read
    from the version this commit follows) as one Delta transaction; create the table
    with this first commit if it does not exist, with ``schema_json`` (a Delta schema as JSON),
    ``partition_by`` and ``configuration`` (table properties).

    ``txn=(app_id, version)`` records a Delta set-transaction, as Spark's ``txnAppId``/
    ``txnVersion`` options do. Returns False, committing nothing, when that app already committed
    that version (a replayed micro-batch: :func:`already_committed`) or when there is nothing to
    add or remove in an existing table. Raises deltalake's errors (e.g. CommitFailedError on a
    conflicting concurrent commit).

    The commit info carries ``crawlake.operation`` (``operation``) and, with ``lineage``, its JSON
    in :data:`LINEAGE_FIELD` (as Spark's commits do).
    """
    from deltalake import Schema
    from deltalake.exceptions import DeltaError
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction, create_table_with_add_actions

    root = _root(table_uri)
    table = latest_table(root)
    if remove_all:
        removes = _live_files(table).to_pylist()
    if _txn_done(table, txn) or (table is not None and not adds and not removes):
        return False
    now_ms = int(time.time() * 1000)
    add_actions = [AddAction(f.path, f.size_bytes, f.partition_values, now_ms, True, f.stats) for f in adds]
    def properties(**retries) -> CommitProperties:
        return CommitProperties(app_transactions=[Transaction(txn[0], int(txn[1]))] if txn else None,
                                custom_metadata={"crawlake.operation": operation,
                                                 **({LINEAGE_FIELD: lineage.to_json()} if lineage else {})}, **retries)

    props = properties()
    if table is None:
        try:
            # No retry: delta-rs retries a create that lost version 0 at version 1, with a second
            # protocol and metadata, which every writer racing it then fails on ("Metadata changed").
            create_table_with_add_actions(root, Schema.from_json(schema_json), add_actions, mode="error",
                                          partition_by=list(partition_by), configuration=dict(configuration or {}),
                                          storage_options=storage_options(root),
                                          commit_properties=properties(max_commit_retries=0))
            return True
        except DeltaError:
            # another writer created the table since it was looked up (two first runs at once):
            # commit to its table as to any existing one (a replayed txn is then skipped)
            table = latest_table(root)
            if table is None:
                raise
            if _txn_done(table, txn):
                return False
    remove_actions = [RemoveAction(r["path"], True, now_ms, r.get("size_bytes"),
                                   {k[len("partition."):]: serialize_partition_value(v)
                                    for k, v in r.items() if k.startswith("partition.")})
                      for r in removes]
    table.create_write_transaction([*remove_actions, *add_actions], mode="append", schema=table.schema(),
                                   partition_by=list(partition_by) or None, commit_properties=props)
    drop_stale_checksum(root)
    return True


def drop_stale_checksum(table_root: str) -> None:
    """Delete ``_delta_log/._last_checkpoint.crc`` of a local table, after a delta-rs commit.

    Spark's local file system (Hadoop's ``ChecksumFileSystem``) writes a CRC sidecar beside each
    file and checks it on every read; delta-rs writes no sidecar. ``_last_checkpoint`` is the only
    file of a Delta log that is ever rewritten, so once delta-rs checkpoints a table Spark
    checkpointed before, Spark's sidecar no longer matches: each Spark read then fails the
    checksum, logs the stack, sleeps and retries (seconds) before it lists the log instead.
    Without a sidecar Hadoop reads the file unchecked, as delta-rs does."""
    root = local_path(table_root) or table_root
    if "://" not in root:
        try:
            os.remove(os.path.join(root, "_delta_log", "._last_checkpoint.crc"))
        except FileNotFoundError:
            pass


def vacuum(table_uri: str, *, lineage: Lineage | None = None) -> list[str]:
    """Delete every file under the table's folder that its latest version does not reference
    (removed files and files no commit ever took alike: delta-rs's full vacuum, zero retention;
    ``_delta_log`` and other names starting with ``_`` stay). Returns the deleted paths, relative to
    the table root. Earlier versions can no longer be read afterwards (time travel ends here). The
    VACUUM commits carry ``lineage`` like every other commit."""
    from deltalake.transaction import CommitProperties

    root = _root(table_uri)
    props = CommitProperties(custom_metadata={"crawlake.operation": "VACUUM",
                                              **({LINEAGE_FIELD: lineage.to_json()} if lineage else {})})
    removed = latest_table(root).vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True,
                                      commit_properties=props)
    drop_stale_checksum(root)
    return removed


def remove_files(table_root: str, files: Iterable[DataFile]) -> None:
    """Delete ``files`` (relative to ``table_root``, local or an fsspec URL) where they exist."""
    for f in files:
        full = f"{table_root}/{f.path}"
        if "://" in full:
            import fsspec

            fs, _, (path,) = fsspec.get_fs_token_paths(full)
            if fs.exists(path):
                fs.rm(path)
        elif os.path.exists(full):
            os.remove(full)


def _read_int96_as_utc(path: str) -> pa.Table:
    """The rows of the Parquet file ``path`` with its INT96 timestamp columns (Spark's default
    encoding: UTC instants, which pyarrow reads as naive) as ``timestamp[us, UTC]``, the type
    deltalake writes: written back as read, they would be naive nanoseconds, which Spark cannot
    read as a timestamp."""
    file = _parquet(path, coerce_int96_timestamp_unit="us")
    rows = file.read()
    for column in file.schema:
        if column.physical_type == "INT96" and column.path in rows.column_names:
            i = rows.column_names.index(column.path)
            rows = rows.set_column(i, column.path, rows.column(i).cast(pa.timestamp("us", tz="UTC")))
    return rows


def retire_rows(table_root: str, column: str, values: Sequence, partitions: Mapping[str, Sequence] | None,
                stats_columns: Sequence[str], *, where: Mapping[str, object] | None = None) -> tuple[list[dict], list[DataFile]]:
    """What removing the rows whose ``column`` is in ``values`` (and whose columns equal ``where``'s
    values) from the table takes: ``(removes, rewritten)`` — the live files (rows of
    :func:`files_in`) to retire, and new files already written beside them holding the rows of
    retired files that stay. Only files in ``partitions`` are looked at.

    A file named with a source key (:data:`SOURCE_PART`, when ``column`` is ``source_file`` and no
    ``where``) holds one source's rows: retired whole or kept without reading. Another file is
    skipped when its statistics prove it holds none of ``values``; else its rows are read, and it
    is retired, rewritten without them if some rows stay (e.g. a file OPTIMIZE compacted across
    sources). The caller commits both lists in one transaction, or deletes ``rewritten``.
    """
    return retire_any(table_root, column, [(values, where or {})], partitions, stats_columns)


def retire_any(table_root: str, column: str, clauses: Sequence[tuple[Sequence, Mapping[str, object]]],
               partitions: Mapping[str, Sequence] | None, stats_columns: Sequence[str]) -> tuple[list[dict], list[DataFile]]:
    """:func:`retire_rows` for the rows that any of ``clauses`` selects: each ``(values, where)``
    selects the rows whose ``column`` is in ``values`` and whose columns equal ``where``'s values
    (e.g. one clause per ``method`` of ``(doc_id, method)`` keys). Each file is read once."""
    named = column == "source_file" and len(clauses) == 1 and not clauses[0][1]
    everything = [v for values, _ in clauses for v in values]
    keys = {source_key(v) for v in everything} if named else set()
    extra = list(dict.fromkeys(name for _, where in clauses for name in where))
    wanted = [(pa.array(list(values)), where) for values, where in clauses]
    removes: list[dict] = []
    rewritten: list[DataFile] = []
    try:
        for entry in files_in(table_root, partitions, [column]).to_pylist():
            match = SOURCE_PART.fullmatch(entry["path"].rsplit("/", 1)[-1]) if named else None
            if match:
                if match.group(1) in keys:
                    removes.append(entry)
                continue
            low, high = entry.get(f"min.{column}"), entry.get(f"max.{column}")
            if isinstance(low, str) and isinstance(high, str) and not any(
                    low <= v and v[:STRING_PREFIX_LENGTH] <= high[:STRING_PREFIX_LENGTH] for v in everything):
                continue   # statistics hold 32-character prefixes: v may be in the file iff low <= v <= high's prefix
            path = f"{table_root.rstrip('/')}/{entry['path']}"
            # ParquetFile, not read_table: no partition discovery from the folder names
            probe = _parquet(path).read(columns=[column, *extra])   # the full rows only when some go
            hit = pa.array([False] * probe.num_rows)
            for values, where in wanted:
                part = pc.is_in(probe.column(column), value_set=values.cast(probe.schema.field(column).type))
                for name, value in where.items():
                    part = pc.and_(part, pc.equal(probe.column(name), value))
                hit = pc.or_(hit, pc.fill_null(part, False))
            gone = pc.sum(hit).as_py() or 0
            if not gone:
                continue
            removes.append(entry)
            if gone < probe.num_rows:
                rows = _read_int96_as_utc(path)
                partition = {k[len("partition."):]: v for k, v in entry.items() if k.startswith("partition.")}
                folder = entry["path"].rsplit("/", 1)[0] if "/" in entry["path"] else ""
                relative = f"{folder}/{part_name()}" if folder else part_name()
                written = _write_parquet(rows.filter(pc.invert(hit)), f"{table_root.rstrip('/')}/{relative}")
                rewritten.append(describe(table_root, relative, partition, stats_columns, written))
    except BaseException:
        remove_files(table_root, rewritten)
        raise
    return removes, rewritten


def already_committed(table_uri: str, txn: tuple[str, int] | None) -> bool:
    """Whether the table records a set-transaction of ``txn``'s app at ``txn``'s version or later
    (False for no ``txn`` or no table)."""
    return _txn_done(latest_table(table_uri) if txn is not None else None, txn)


def _txn_done(table, txn: tuple[str, int] | None) -> bool:
    if txn is None or table is None:
        return False
    done = table.transaction_version(txn[0])
    return done is not None and done >= txn[1]


def table_columns(table_uri: str) -> set[str] | None:
    """The names of the table's columns in its latest version (None: no table)."""
    table = latest_table(table_uri)
    return None if table is None else {f.name for f in table.schema().fields}


def table_version(table_uri: str) -> int | None:
    """The table's latest version (None: no table)."""
    table = latest_table(table_uri)
    return None if table is None else table.version()


def files_in(table_uri: str, partitions: Mapping[str, Sequence[object]] | None = None,
             columns: Sequence[str] = ()) -> pa.Table:
    """The table's live files (``path``, ``size_bytes``, ``partition.<col>``, ``min.<c>``,
    ``max.<c>`` of ``columns``), only those whose partition values are in ``partitions``
    (``{col: [values, None for null]}``). An empty table when the table does not exist."""
    return _live_files(latest_table(table_uri), partitions, columns)


def _live_files(table, partitions: Mapping[str, Sequence[object]] | None = None, columns: Sequence[str] = ()) -> pa.Table:
    """:func:`files_in` of a loaded table (None: no table)."""
    if table is None:
        return pa.table({"path": pa.array([], pa.string()), "size_bytes": pa.array([], pa.int64())})
    actions = pa.table(table.get_add_actions(flatten=True))
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
