"""The task side of the lake: files a task stages for a table, and what it reports of them.

A stage's tasks (Spark ``mapInArrow`` functions, Dask workers) never commit. Each writes its rows
for each output table as Parquet files into the folder a :class:`Target` names — the table's own
folder when ``deltalake`` will commit the files where they lie, else a staging folder that Spark's
Delta writer will read — and returns their descriptions (:meth:`TableFiles.staged`, JSON-able),
which the driver hands to :meth:`pipelines.lake.Lake.staging` to publish in one transaction per
table. A file appears whole or not at all (written under a hidden name and renamed, or published
by an object store on close), so a retried task simply writes it again; files no commit names are
removed by the driver.

Layout follows Delta: partition columns are folders (``day=5/``, Hive-escaped) and not stored in
the files; a file holding one source's rows carries that source's key in its name
(:func:`~pipelines.lake.commits.part_name`), which lets a re-ingest retire it without reading it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.lake.commits import DataFile, describe, part_name, partition_folder, remove_files

#: A file is audited this many rows at a time (pandas memory).
AUDIT_CHUNK_ROWS = 100_000
#: A row group size for tables whose tasks write many small batches (``row_group_bytes``, Arrow
#: bytes): a reader pays per row group (Spark's vectorized reader, most in a scan of a few
#: columns; an S3A read per row group), so one per small batch (bronze's 256-record kernel
#: batches) slows every later scan. About a quarter of Spark's 128 MB ``parquet.block.size``
#: once compressed.
ROW_GROUP_BYTES = 64 << 20
#: :class:`Target` options for those tables. Not for tables the training loaders read
#: (``gold.token_sequences``): their row groups are the loaders' blocks, the unit of shuffling
#: and of sharding by rank.
LARGE_ROW_GROUPS = (("row_group_bytes", ROW_GROUP_BYTES),)


def _open(path: str):
    """A local path as it is; an fsspec URL opened for reading."""
    if "://" not in path:
        return path
    import fsspec

    return fsspec.open(path, "rb").open()


@dataclass(frozen=True)
class Target:
    """Where a task stages one table's files; made on the driver by :meth:`Lake.staging` and sent
    to tasks (picklable).

    ``schema``: the table's columns as Arrow, every field nullable (partition columns included:
    :class:`TableFiles` moves them to folder names). ``stats_columns``: the columns whose min/max/
    null counts the add actions carry (Delta's data-skipping columns of the table). ``options``:
    extra ``pyarrow.parquet.ParquetWriter`` options, and ``row_group_bytes`` (see :class:`PartFile`).
    """
    table: str
    folder: str
    schema: pa.Schema
    partition_by: tuple[str, ...] = ()
    stats_columns: tuple[str, ...] = ()
    options: tuple[tuple[str, object], ...] = field(default_factory=tuple)
    #: validate each file with the table's Great Expectations suite in the task (write-audit-publish)
    audit: bool = False

    @property
    def file_schema(self) -> pa.Schema:
        """The schema of the Parquet files: the table's, less its partition columns."""
        return pa.schema([f for f in self.schema if f.name not in self.partition_by])


class PartFile:
    """One Parquet data file: opened on the first batch, written under a hidden name and renamed
    on close, so it appears whole or not at all (object stores publish on close). ``options`` go
    to ``pyarrow.parquet.ParquetWriter``. ``row_group_bytes`` > 0: batches are held until they
    reach that many Arrow bytes (or the file closes) and written as one row group; 0: each batch
    is a row group as it comes."""

    def __init__(self, path: str, schema: pa.Schema, row_group_bytes: int = 0, **options):
        self.path, self.schema, self.options, self.row_group_bytes = path, schema, options, row_group_bytes
        self.stream = self.writer = self.tmp = None
        self.held: list[pa.Table] = []
        self.held_bytes = 0
        #: once closed with rows: the file's size in bytes and its footer, as written
        self.size: int | None = None
        self.metadata: pq.FileMetaData | None = None

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append ``batch``'s rows (a row group of their own unless ``row_group_bytes`` holds them
        for a larger one); an empty one writes nothing (no file for no rows)."""
        if batch.num_rows == 0:
            return
        if not self.row_group_bytes:
            self._write(batch)
            return
        self.held.append(batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch]))
        self.held_bytes += batch.nbytes
        if self.held_bytes >= self.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.held:
            table = pa.concat_tables(self.held)
            self.held, self.held_bytes = [], 0
            self._write(table, row_group_size=table.num_rows)

    def _write(self, batch: pa.RecordBatch | pa.Table, **kwargs) -> None:
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
        self.writer.write(batch, **kwargs)

    def close(self) -> bool:
        """Finish the file; True if one was written (at least one row)."""
        self._flush()
        if self.writer is None:
            return False
        self.writer.close()
        # the footer as written (what pq.write_table's metadata_collector collects), so that
        # describing the file reads nothing back (on an object store, requests per file)
        self.metadata = self.writer.writer.metadata
        self.size = self.stream.tell()
        self.stream.close()
        if self.tmp is not None:
            os.replace(self.tmp, self.path)
        return True

    def abort(self) -> None:
        """Drop the file: nothing is published, a partial local file is removed."""
        self.held, self.held_bytes = [], 0
        if self.writer is not None:
            self.writer.is_open = False   # no footer: its __del__ would write one into the closed stream
        if self.stream is not None:
            # an fsspec upload is published by close(); discard() drops it instead
            getattr(self.stream, "discard", self.stream.close)()
        if self.tmp is not None and os.path.exists(self.tmp):
            os.remove(self.tmp)


class TableFiles:
    """A task's files for several tables, ``targets`` ``{kind: Target}``: for each table one file
    named ``name`` (default a fresh :func:`part_name`) per partition value met.

    A context manager: at the end of its block every file is closed, or, if the block (or a close)
    raises, every file is aborted. Then :meth:`staged` describes the files that got rows.
    """

    def __init__(self, targets: Mapping[str, Target], name: str | None = None):
        self.targets, self.name = dict(targets), name or part_name()
        self.files: dict[str, dict[tuple, PartFile]] = {kind: {} for kind in self.targets}
        self.written: dict[str, list[tuple]] = {}
        #: ``{kind: suite results}`` of the files written, for targets with ``audit``
        self.audits: dict[str, list] = {}

    def write(self, kind: str, data: pa.RecordBatch | pa.Table) -> None:
        """Append ``data``'s rows to table ``kind``: its columns of the table's schema, in order and
        cast (extra columns are dropped; pyarrow raises when one is missing or cannot be cast)."""
        target = self.targets[kind]
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        table = table.select(target.schema.names).cast(target.schema)
        if not target.partition_by:
            self._file(kind, ()).write(table)
            return
        keys = table.select(list(target.partition_by)).group_by(list(target.partition_by)).aggregate([])
        for values in keys.to_pylist():
            mask = None
            for column, value in values.items():
                hit = pc.is_null(table[column]) if value is None else pc.fill_null(pc.equal(table[column], value), False)
                mask = hit if mask is None else pc.and_(mask, hit)
            part = table.filter(mask).drop_columns(list(target.partition_by))
            self._file(kind, tuple(values[c] for c in target.partition_by)).write(part)

    def _file(self, kind: str, values: tuple) -> PartFile:
        files = self.files[kind]
        if values not in files:
            target = self.targets[kind]
            folder = partition_folder(dict(zip(target.partition_by, values)))
            path = f"{target.folder}/{folder}/{self.name}" if folder else f"{target.folder}/{self.name}"
            files[values] = PartFile(path, target.file_schema, **dict(target.options))
        return files[values]

    def __enter__(self) -> "TableFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                self.written = {kind: [v for v, f in files.items() if f.close()] for kind, files in self.files.items()}
                self.audits = {kind: self._audit(kind) for kind, target in self.targets.items() if target.audit}
                return False
            except BaseException:
                self._abort()
                raise
        self._abort()
        return False   # the block's exception goes on

    def _abort(self) -> None:
        for files in self.files.values():
            for f in files.values():
                f.abort()
        for kind, values in self.written.items():   # closed files, if a later close or audit failed
            remove_files(self.targets[kind].folder, [DataFile(self._relative(kind, v), 0, {}, 0, "") for v in values])

    def _relative(self, kind: str, values: tuple) -> str:
        folder = partition_folder(dict(zip(self.targets[kind].partition_by, values)))
        return f"{folder}/{self.name}" if folder else self.name

    def _audit(self, kind: str) -> list:
        """The table's suite over this task's files of ``kind`` (chunk by chunk, partition values
        added back as columns), results merged; key uniqueness is thereby checked per chunk."""
        from pipelines import quality
        from schemas.catalog import TABLES

        target = self.targets[kind]
        spec = TABLES[target.table]
        columns = [c for c in quality.suite_columns(spec) if c not in target.partition_by]
        parts = []
        for values in self.written.get(kind, ()):
            path = f"{target.folder}/{self._relative(kind, values)}"
            source = _open(path)
            for batch in pq.ParquetFile(source).iter_batches(batch_size=AUDIT_CHUNK_ROWS, columns=columns):
                for column, value in zip(target.partition_by, values):
                    batch = batch.append_column(column, pa.array([value] * batch.num_rows, target.schema.field(column).type))
                parts.append(quality.validate_arrow(batch, spec))
        return quality.merge_results(parts)

    def report(self) -> dict:
        """What the task sends the driver about its files: ``{"staged": {kind: [DataFile JSON]},
        "audits": {kind: suite results}}``."""
        return {"staged": self.staged(), "audits": self.audits}

    def staged(self) -> dict[str, list[str]]:
        """``{kind: [DataFile JSON]}`` of the closed files with rows (paths relative to the
        target's folder; statistics of the target's ``stats_columns``)."""
        out: dict[str, list[str]] = {}
        for kind, values in self.written.items():
            target = self.targets[kind]
            for v in values:
                partition = dict(zip(target.partition_by, v))
                written = self.files[kind][v]
                out.setdefault(kind, []).append(describe(target.folder, self._relative(kind, v), partition,
                                                         target.stats_columns, (written.size, written.metadata)).to_json())
        return out


def collect_staged(details: Sequence[Mapping], kinds: Sequence[str]) -> dict[str, list[DataFile]]:
    """``{kind: [DataFile]}`` from tasks' reports, each carrying ``"staged"``: what
    :meth:`TableFiles.staged` gave the task."""
    return {kind: [DataFile.from_json(s) for d in details for s in d.get("staged", {}).get(kind, ())] for kind in kinds}


def collect_audits(details: Sequence[Mapping], kinds: Sequence[str]) -> dict[str, list]:
    """``{kind: [suite results of each task]}`` from tasks' reports (their ``"audits"``)."""
    return {kind: [d["audits"][kind] for d in details if kind in d.get("audits", {})] for kind in kinds}
