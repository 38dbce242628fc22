"""Reads of the lake without Spark or a JVM: the Delta log through ``deltalake``, the data through
``pyarrow`` on its own (native) filesystems. Search, ``crawlake explain`` and the training loaders
read through here.

Why not ``DeltaTable.to_pyarrow_dataset()`` / ``to_pyarrow_table()`` as they come: those give
pyarrow a *Python* filesystem (``PyFileSystem(DeltaStorageHandler)``), so every byte read is a
Python ``bytes`` object wrapped in an Arrow ``PyBuffer``, and the dataset scanner pre-buffers
reads on Arrow's IO threads. When a scan ends, the last references to its reader state (a
``ReadRangeCache`` holding those buffers) are dropped by a future's callback on an IO thread,
possibly after the main thread has returned and started to finalize the interpreter. Freeing a
``PyBuffer`` then takes the GIL (``PyGILState_Ensure``), which during finalization calls
``pthread_exit`` on that thread; the forced unwind crosses a ``noexcept`` C++ destructor and the
process aborts with ``terminate called without an active exception`` (exit 134), after all its
output was written (delta-io/delta-rs#2184, apache/arrow#34314). No version pin avoids it:
pyarrow's guard in the ``PyBuffer`` destructor (apache/arrow#49943) asks ``Py_IsFinalizing()``
before taking the GIL, which races with the start of finalization; with pyarrow 26.0.1 and
deltalake 1.6.6 a script reading five tables still aborts, with the same stack, 2 runs of 16
(8 of 16 with pyarrow 22).

Here the data files are read through pyarrow's native filesystem for the table's location
(local disk, ``s3://`` or ``s3a://``, ``gs://``, ``hdfs://``, ``abfs://``): the buffers are Arrow's own, so a
scan's leftovers on an IO thread never touch Python. Where no native filesystem fits (other
URLs, or ``storage_options`` carrying credentials only ``deltalake`` knows),
the files that may match are read one at a time on the calling thread and copied into Arrow
memory before they are scanned, so no Python-owned buffer reaches a background thread either.
The dataset is built here from the log's add actions (:func:`dataset`), not by
``to_pyarrow_dataset``, whose per-file statistics expressions skip files wrongly where a bound is
missing (see :func:`_guarantee`).

Functions:

* :func:`lake_root`, :func:`table_uri` — a catalog table's location under a config's lake (path
  mode; a catalog-mode lake is a ValueError saying why);
* :func:`exists`, :func:`open_table` — a table at a version (``deltalake.DeltaTable``);
* :func:`commit_info`, :func:`commit_lineage` — what a version's commit says about itself (the
  run, stage, config hash and input versions crawlake records there);
* :func:`changes_between` — whether commits between two versions removed or rewrote rows (a
  version diff from the log, for the incremental stages);
* :func:`data_files` — a version's data files: filesystem, paths, partition values, sizes;
* :func:`dataset` — a version as a ``pyarrow.dataset.Dataset`` over those files;
* :func:`read` / :func:`read_spec` — columns with a filter (pushed down to partition values and
  Parquet row-group statistics) into a ``pyarrow.Table``; :func:`read_rows` the same as dicts;
* :func:`read_parquet`, :func:`read_bytes` — one file by path or URL (the index's shard files);
* :func:`under_root` — a path recorded relative to the lake root, resolved.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.lake.commits import Lineage
from pipelines.lake.objectstore import for_arrow

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from schemas.catalog import TableSpec

#: A row filter: a pyarrow expression (``pyarrow.dataset.field("doc_id") == x``) or DNF tuples
#: as pyarrow and deltalake take them (``[("doc_id", "=", x)]``, ``[("doc_id", "in", [...])]``).
Filter = Any


# -- where tables are -----------------------------------------------------------------------------

def lake_root(lake: Any) -> str:
    """The root of a path-mode lake given a ``Config``, a ``LakeConfig``, a ``Lake`` or a root
    (str or ``Path``); a local root is made absolute.

    Raises ValueError for a catalog-mode lake: its tables are named ``<catalog>.<schema>.
    <layer>_<name>`` in a metastore, which only Spark (``Lake.read``) resolves.
    """
    cfg = getattr(lake, "lake", None) or getattr(lake, "cfg", None) or lake   # Config, Lake, LakeConfig
    if isinstance(cfg, (str, os.PathLike)):
        root = os.fspath(cfg)
    else:
        if getattr(cfg, "mode", "path") != "path":
            raise ValueError(
                f"lake.mode={cfg.mode}: tables are {cfg.catalog}.{cfg.schema_}.<layer>_<name> in a metastore, "
                "which only Spark resolves; reading without a JVM needs lake.mode=path (a folder or an "
                "object-store URL as lake.root)")
        root = cfg.root
    if "://" in root and not root.startswith("file://"):
        return root.rstrip("/")
    return os.path.abspath(_local(root))


def table_uri(spec: TableSpec, lake: Any) -> str:
    """Where ``spec``'s table lives in the path-mode lake ``lake`` (see :func:`lake_root`)."""
    return spec.path_under(lake_root(lake))


def under_root(root: str, path: str) -> str:
    """A path recorded relative to the lake root (``gold.index_manifest.path``) → its URL or
    absolute path; absolute paths and URLs are returned as they are."""
    return path if "://" in path or path.startswith("/") else f"{root.rstrip('/')}/{path}"


def _local(uri: str) -> str:
    return unquote(urlparse(uri).path) if uri.startswith("file://") else uri


# -- tables ---------------------------------------------------------------------------------------

def delta_options(uri: str, storage_options: dict | None = None) -> dict | None:
    """``storage_options`` for ``deltalake`` at ``uri``: the given ones, plus ``AWS_ALLOW_HTTP``
    where an S3 table's endpoint (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` in the options or
    the environment, the standard AWS variables) is plain ``http://``, e.g. an S3-compatible server
    on the local network. deltalake's object store refuses HTTP unless told (its own variable, which
    no AWS tool sets); pyarrow and boto3 follow the endpoint's scheme."""
    if not str(uri).startswith(("s3://", "s3a://")):
        return storage_options
    opts = {k.upper(): v for k, v in (storage_options or {}).items()}
    if "AWS_ALLOW_HTTP" in opts or "AWS_ALLOW_HTTP" in os.environ:
        return storage_options
    endpoint = next((src[k] for src in (opts, os.environ)
                     for k in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT") if src.get(k)), "")
    if not str(endpoint).lower().startswith("http://"):
        return storage_options
    return {**(storage_options or {}), "AWS_ALLOW_HTTP": "true"}


def exists(uri: str, storage_options: dict | None = None) -> bool:
    """Whether a Delta table is at ``uri``."""
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(str(uri), storage_options=delta_options(str(uri), storage_options))


def open_table(uri: str, version: int | None = None, storage_options: dict | None = None) -> DeltaTable:
    """The Delta table at ``uri`` at ``version`` (None: the latest). Raises
    ``deltalake.exceptions.TableNotFoundError`` when there is none. On S3 the standard AWS
    variables are enough (see :func:`delta_options`)."""
    from deltalake import DeltaTable

    return DeltaTable(str(uri), version=version, storage_options=delta_options(str(uri), storage_options))


def native_filesystem(uri: str, storage_options: dict | None = None) -> tuple[pafs.FileSystem, str] | None:
    """``(pyarrow filesystem, path on it)`` for ``uri``, or None where pyarrow has no native
    filesystem for it or ``storage_options`` carry settings that only ``deltalake`` would see."""
    if "://" not in uri or uri.startswith("file://"):
        return pafs.LocalFileSystem(), os.path.abspath(_local(uri))
    if storage_options:
        return None
    try:
        return pafs.FileSystem.from_uri(for_arrow(uri))   # s3a:// (Spark's spelling) is pyarrow's s3://
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OSError):
        return None


def commit_info(uri: str, version: int, storage_options: dict | None = None) -> dict | None:
    """The ``commitInfo`` action of ``version`` of the Delta table at ``uri``, as a dict of the
    log's JSON (``operation``, ``timestamp`` in ms, ``userMetadata``, …), or None when the log no
    longer holds that commit (its JSON file removed by log cleanup after a checkpoint) or the
    commit has none.

    Reads the one file ``_delta_log/<version, 20 digits>.json`` (``deltalake``'s ``history()`` of a
    table opened at an old version lists the newest commits instead); where only ``deltalake``
    can reach the table (``storage_options`` with credentials), its history of the latest
    version, down to ``version``. Raises ValueError for a negative version and the filesystem's
    OSError when the log cannot be read for another reason than a missing file.
    """
    if version < 0:
        raise ValueError(f"no Delta version {version}")
    native = native_filesystem(str(uri), storage_options)
    if native is None:
        table = open_table(uri, None, storage_options)
        if version > table.version():
            return None
        entries = table.history(table.version() - version + 1)
        return next(({k: v for k, v in e.items() if k != "version"} for e in entries if e.get("version") == version), None)
    actions = _commit_actions(native, version, b'"commitInfo"')
    return next((a["commitInfo"] for a in actions or () if isinstance(a.get("commitInfo"), dict)), None)


#: What :func:`changes_between` says when the log cannot tell: everything.
UNKNOWN_CHANGES = frozenset({"removed", "rewritten"})


def changes_between(uri: str, after: int, last: int, storage_options: dict | None = None) -> frozenset[str]:
    """What the commits of the table at ``uri`` in versions ``after`` (exclusive) to ``last``
    (inclusive) did besides adding rows: ``"removed"`` for a ``remove`` action with ``dataChange``
    true (a delete, an overwrite, a replace by key), ``"rewritten"`` for an ``add`` or ``remove``
    with ``dataChange`` false (a compaction such as OPTIMIZE: its new files hold rows the table
    already had). Empty when they only appended. :data:`UNKNOWN_CHANGES` (both) when the log
    cannot tell: a commit file cleaned up after a checkpoint, or a location pyarrow has no native
    filesystem for. Reads those commits' JSON files only (no snapshot is built)."""
    native = native_filesystem(str(uri), storage_options)
    if native is None:
        return UNKNOWN_CHANGES
    changes: set[str] = set()
    for version in range(after + 1, last + 1):
        actions = _commit_actions(native, version, b'"add"', b'"remove"')
        if actions is None:
            return UNKNOWN_CHANGES
        for action in actions:
            for kind in ("add", "remove"):
                if isinstance(entry := action.get(kind), dict):
                    if not entry.get("dataChange", True):
                        changes.add("rewritten")
                    elif kind == "remove":
                        changes.add("removed")
    return frozenset(changes)


def _commit_actions(native: tuple[pafs.FileSystem, str], version: int, *markers: bytes) -> list[dict] | None:
    """The actions of ``version``'s commit file of the table that ``native`` (a
    :func:`native_filesystem` of its root) names, those whose line holds one of ``markers``
    (parsed JSON); None when the file is gone."""
    fs, root = native
    try:
        with fs.open_input_stream(f"{root.rstrip('/')}/_delta_log/{int(version):020d}.json") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in raw.splitlines() if any(m in line for m in markers)]


def commit_lineage(uri: str, version: int, storage_options: dict | None = None) -> Lineage | None:
    """The :class:`~pipelines.lake.commits.Lineage` (run id, stage, config hash, input versions)
    that ``version``'s commit of the table at ``uri`` carries; None when it carries none or the
    log no longer holds it (see :func:`commit_info`)."""
    return Lineage.from_commit_info(commit_info(uri, version, storage_options))


@dataclass(frozen=True)
class DataFiles:
    """A table version's data files as a pyarrow filesystem names them.

    ``filesystem`` is pyarrow's native one for the table's location, or ``deltalake``'s own
    (``native`` False: see the module docstring) where none fits; ``uris`` as the log gives them
    and ``paths`` as ``filesystem`` names them, in the order of the log's add actions;
    ``partition_values`` per file: partition column → value (typed as the table's ``schema``);
    ``sizes`` in bytes; ``guarantees`` per file: what every row of it satisfies (its partition
    values, and the bounds of its integer columns from the log's statistics), for skipping it.
    """
    schema: pa.Schema
    filesystem: pafs.FileSystem
    uris: tuple[str, ...]
    paths: tuple[str, ...]
    partition_values: tuple[dict, ...]
    sizes: tuple[int, ...]
    guarantees: tuple[pds.Expression, ...]
    native: bool


def _guarantee(schema: pa.Schema, parts: dict, stats: dict) -> pds.Expression:
    """What all rows of one file satisfy: ``column == value`` (``is_null``) per partition column,
    which also fills those columns in, and ``min <= column <= max`` for integer columns whose
    statistics are complete (no nulls, both bounds).

    deltalake's own fragments carry ``column >= null`` where a bound is missing (Spark's Delta
    writer keeps no min/max of booleans; a column of nulls has none), and pyarrow then skips
    files that hold matching rows: ``kept == False`` finds nothing in a ``silver.duplicate_clusters``
    written by Spark. Hence these, which state only what the log guarantees.
    """
    terms = []
    for name, value in parts.items():
        f = pds.field(name)
        terms.append(f.is_null() if value is None else f == pa.scalar(value, schema.field(name).type))
    for name in schema.names:
        if name in parts or not pa.types.is_integer(schema.field(name).type):
            continue
        low, high = stats.get(f"min.{name}"), stats.get(f"max.{name}")
        if stats.get(f"null_count.{name}") == 0 and low is not None and high is not None:
            terms.append((pds.field(name) >= low) & (pds.field(name) <= high))
    out = pds.scalar(True)
    for term in terms:
        out = out & term
    return out


def data_files(table: DeltaTable, storage_options: dict | None = None) -> DataFiles:
    """The data files of ``table``'s loaded version (see :class:`DataFiles`). Raises ValueError
    if the log's file URIs and add actions disagree."""
    schema = pa.schema(table.schema().to_arrow())
    uris = list(table.file_uris())
    actions = pa.table(table.get_add_actions(flatten=True))
    if len(uris) != actions.num_rows:
        raise ValueError(f"{table.table_uri}: {len(uris)} file URIs but {actions.num_rows} add actions")
    rows = actions.to_pylist()
    for uri, row in zip(uris, rows):
        if not unquote(uri).endswith(unquote(unquote(row["path"]))):
            raise ValueError(f"{table.table_uri}: file URI {uri} does not match add action {row['path']}")
    parts = [{k[len("partition."):]: v for k, v in row.items() if k.startswith("partition.")} for row in rows]
    sizes = tuple(int(row["size_bytes"]) for row in rows)
    guarantees = tuple(_guarantee(schema, p, row) for p, row in zip(parts, rows))
    located = [native_filesystem(u, storage_options) for u in uris]
    if all(n is not None for n in located):
        fs = located[0][0] if located else pafs.LocalFileSystem()
        return DataFiles(schema, fs, tuple(uris), tuple(n[1] for n in located), tuple(parts), sizes, guarantees, True)
    dataset = table.to_pyarrow_dataset()
    paths = list(dataset.files)
    if len(paths) != len(uris):
        raise ValueError(f"{table.table_uri}: deltalake lists {len(paths)} files for {len(uris)} add actions")
    return DataFiles(schema, dataset.filesystem, tuple(uris), tuple(paths), tuple(parts), sizes, guarantees, False)


def dataset(table: DeltaTable, storage_options: dict | None = None) -> pds.FileSystemDataset:
    """``table``'s loaded version as a pyarrow dataset over :func:`data_files` (files skipped by
    their guarantees, partition columns filled in). Scan it on this process's threads only where
    ``data_files(...).native``; :func:`read` does the rest."""
    protocol = table.protocol()
    features = set(protocol.reader_features or ())
    if features & {"deletionVectors", "columnMapping"}:
        from deltalake.exceptions import DeltaProtocolError

        raise DeltaProtocolError(f"{table.table_uri}: reader feature(s) {sorted(features)} are not readable "
                                 "with pyarrow; read the table with Spark")
    files = data_files(table, storage_options)
    fmt = pds.ParquetFileFormat(default_fragment_scan_options=pds.ParquetFragmentScanOptions(pre_buffer=True))
    fragments = [fmt.make_fragment(path, filesystem=files.filesystem, partition_expression=g)
                 for path, g in zip(files.paths, files.guarantees)]
    return pds.FileSystemDataset(fragments, files.schema, fmt, files.filesystem)


def _expression(filter: Filter) -> pds.Expression | None:
    if filter is None or isinstance(filter, pds.Expression):
        return filter
    return pq.filters_to_expression(filter)


def read(source: str | DeltaTable, columns: Sequence[str] | None = None, filter: Filter = None, *,
         version: int | None = None, storage_options: dict | None = None, limit: int | None = None) -> pa.Table:
    """Rows of a Delta table (a URI, or an open ``DeltaTable`` at its loaded version) matching
    ``filter``, ``columns`` only (default all), as one ``pyarrow.Table``; with ``limit``, at most
    that many rows (the first files that hold them: which rows is unspecified).

    The filter skips files by their partition values (and integer bounds) and row groups by their
    Parquet statistics before rows are filtered exactly. Raises TableNotFoundError for a missing
    table, deltalake's DeltaProtocolError for a table this reader cannot read (deletion vectors,
    column mapping), and pyarrow's error for an unknown column.
    """
    table = open_table(os.fspath(source), version, storage_options) if isinstance(source, (str, os.PathLike)) \
        else source
    expr = _expression(filter)
    cols = list(columns) if columns is not None else None
    data = dataset(table, storage_options)
    if native_filesystem(table.table_uri, storage_options) is not None:
        if limit is not None:
            return data.head(limit, columns=cols, filter=expr)
        return data.to_table(columns=cols, filter=expr)
    # deltalake's filesystem is a Python one: read each file that may match whole, on this thread,
    # into Arrow memory, and scan it there (no Python-owned buffer reaches Arrow's IO threads)
    pieces, held = [], 0
    for fragment in data.get_fragments(filter=expr) if expr is not None else data.get_fragments():
        with data.filesystem.open_input_file(fragment.path) as f:
            buf = _arrow_buffer(f.read())
        local = data.format.make_fragment(pa.BufferReader(buf), partition_expression=fragment.partition_expression)
        pieces.append(local.to_table(schema=data.schema, columns=cols, filter=expr, use_threads=False))
        held += pieces[-1].num_rows
        if limit is not None and held >= limit:
            return pa.concat_tables(pieces).slice(0, limit)
    if not pieces:
        empty = data.schema.empty_table()
        return empty.select(cols) if cols is not None else empty
    return pa.concat_tables(pieces)


def _arrow_buffer(raw: bytes) -> pa.Buffer:
    """``raw`` copied into memory that Arrow owns (freeing it needs no GIL)."""
    buf = pa.allocate_buffer(len(raw))
    np.frombuffer(buf, np.uint8)[:] = np.frombuffer(raw, np.uint8)
    return buf


def read_spec(spec: TableSpec, lake: Any, columns: Sequence[str] | None = None, filter: Filter = None, *,
              version: int | None = None) -> pa.Table | None:
    """:func:`read` of ``spec``'s table in ``lake`` (see :func:`lake_root`); None when the lake
    has no such table yet."""
    uri = table_uri(spec, lake)
    if not exists(uri):
        return None
    return read(uri, columns, filter, version=version)


def read_rows(spec: TableSpec, lake: Any, columns: Sequence[str] | None = None,
              filter: Filter = None) -> list[dict]:
    """:func:`read_spec` as a list of dicts (no rows for a missing table): for point lookups."""
    table = read_spec(spec, lake, columns, filter)
    return [] if table is None else table.to_pylist()


# -- single files ---------------------------------------------------------------------------------

def read_bytes(uri: str) -> bytes:
    """The whole file at ``uri`` (a path, a native filesystem URL or any fsspec URL)."""
    native = native_filesystem(uri)
    if native is not None:
        fs, path = native
        with fs.open_input_stream(path) as f:
            return f.read()
    import fsspec

    with fsspec.open(uri, "rb") as f:
        return f.read()


def read_parquet(uri: str, columns: Sequence[str] | None = None) -> pa.Table:
    """One Parquet file: through pyarrow's native filesystem, else read whole on this thread
    and parsed from Arrow memory (never from a Python file object, see the module docstring)."""
    cols = list(columns) if columns is not None else None
    native = native_filesystem(uri)
    if native is not None:
        fs, path = native
        return pq.read_table(path, filesystem=fs, columns=cols)
    return pq.read_table(pa.BufferReader(_arrow_buffer(read_bytes(uri))), columns=cols, use_threads=False)
