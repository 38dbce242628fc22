"""Rows of one Delta table version as training samples: sharded, shuffled, resumable (no JVM).

:class:`DeltaRowDataset` is a ``torch.utils.data.IterableDataset`` over any Delta table whose rows
are samples. It reads the table's Parquet files with ``deltalake`` (the snapshot) and ``pyarrow``
(the data); subclasses turn decoded rows into tensors (:class:`~pipelines.loaders.tokens.
TokenSequenceDataset` for ``gold.token_sequences``).

The order of one epoch, given ``seed`` and ``epoch``:

1. **Snapshot.** The table version is pinned when the dataset is built (``version=None``: the
   latest one then), so later writes to the table never change an epoch in flight. Its data
   files, sorted by path, and their Parquet row groups are the *blocks*.
2. **Block shuffle.** The blocks are permuted by a generator seeded with ``(seed, epoch)``; laid
   end to end they give the epoch's stream of ``N`` rows.
3. **Ranks.** Rank ``r`` of ``W`` takes the contiguous slice ``[r*N//W, (r+1)*N//W)`` of the
   stream: every row exactly once over the ranks, rank sizes differ by at most one row.
4. **Workers.** The rank's slice is cut into *units* of ``batch_size`` rows (one row when
   ``batch_size`` is None; only the rank's last unit can be short); DataLoader worker ``w`` of
   ``n`` takes the contiguous units ``[w*U//n, (w+1)*U//n)``, so workers read disjoint rows.
5. **Buffer shuffle.** A worker reads its range window by window (``shuffle_buffer`` rows,
   rounded down to whole units, at least one) and permutes each window with a generator seeded
   with ``(seed, epoch, window start)``. The DataLoader then takes the workers' units round
   robin, in order.

This is the block-then-buffer shuffle of MosaicML Streaming (``shuffle_algo='py1b'``) and of
``tf.data``'s shard/interleave/shuffle pipelines. The order is a function of (table version, seed,
epoch, world_size, rank, batch_size, shuffle_buffer, num_workers); one epoch over all ranks is
every row exactly once whatever these are.

**Resumption** is exact: :meth:`DeltaRowDataset.state_dict` records the table version (and the
lake's config hash from that version's commit info) and how many units this rank's consumer has
taken; :meth:`~DeltaRowDataset.load_state_dict` makes the next iteration continue after them
(workers skip whole windows without reading them). A state loaded into a dataset that reads
another version of the table is a ValueError naming both versions, unless the caller asks to
re-pin (``repin=True``: the dataset then reads the state's version, and the resume is exact).
Iterated in-process (no workers) the dataset counts by itself; with DataLoader workers it cannot see what the main process has
taken (workers prefetch), so iterate through :class:`DeltaLoader`, which counts. A rank's own
state resumes with the same ``num_workers`` (a ValueError says so otherwise). ``set_epoch`` and
``load_state_dict`` reach workers through a small shared-memory tensor, so persistent workers see
them too.

**Elastic resumption**: :meth:`~DeltaRowDataset.load_state_dict` given *every* rank's state of one
moment (a list) continues the epoch on any number of ranks and workers, with any batch size:
the rows no old rank delivered (computed from the states: each old worker delivered a prefix of
its windows' permuted rows) are dealt to the new ranks as contiguous slices of the remaining
stream, each exactly once, and shuffled as above within that *part* of the epoch. The new states
carry the earlier parts (``history``), so a run can be resized again.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

DEFAULT_SHUFFLE_BUFFER = 4096
DEFAULT_THREADS = 1
_EPOCH, _RESUME_UNITS, _RESUME_WORKERS, _RAN_IN_WORKER, _PHASES = range(5)


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``(rank, world_size)`` from the arguments, else ``RANK``/``WORLD_SIZE`` (torchrun), else an
    initialized ``torch.distributed`` group, else ``(0, 1)``. Raises ValueError when only one of
    the two is given or ``not 0 <= rank < world_size``."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    if rank is None:
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        elif torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        else:
            rank, world_size = 0, 1
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    return rank, world_size


@dataclass(frozen=True)
class Snapshot:
    """One Delta table version as read by the loaders: files sorted by path, row groups as blocks."""
    table_uri: str
    version: int
    schema: pa.Schema
    files: tuple[str, ...]                   # paths on `filesystem`
    filesystem: pafs.FileSystem
    partition_values: tuple[dict, ...]       # per file: partition column → value
    block_file: np.ndarray                   # int64[blocks]: index into files
    block_row_group: np.ndarray              # int64[blocks]
    block_rows: np.ndarray                   # int64[blocks]

    @property
    def num_rows(self) -> int:
        return int(self.block_rows.sum())


def load_snapshot(table_uri: str, version: int | None = None, storage_options: dict | None = None) -> Snapshot:
    """Pin ``version`` (None: the latest) of the Delta table at ``table_uri`` and list its blocks.

    Reads the Delta log and every data file's Parquet footer (in threads), through
    :mod:`pipelines.lake.read` (pyarrow's own filesystem for local/S3/GCS/HDFS paths, so no read
    leaves Python-owned buffers to Arrow's threads at exit; deltalake's where ``storage_options``
    carry credentials). Raises ``deltalake.exceptions.TableNotFoundError`` for a missing table and
    ValueError for a table this reader cannot read row-exactly (deletion vectors in use, column
    mapping).
    """
    from pipelines.lake.read import data_files, open_table

    dt = open_table(str(table_uri), version, storage_options)
    features = set(dt.protocol().reader_features or ())
    if "columnMapping" in features:
        raise ValueError(f"{table_uri}: column mapping is not supported by the loaders")
    if "deletionVectors" in features and pa.table(dt.deletion_vectors()).num_rows:
        raise ValueError(f"{table_uri} v{dt.version()}: deletion vectors in use; run OPTIMIZE/REORG "
                         "(PURGE) on the table before loading it")
    files = data_files(dt, storage_options)
    order = sorted(range(len(files.uris)), key=files.uris.__getitem__)
    fs = files.filesystem
    paths = [files.paths[i] for i in order]
    parts = [files.partition_values[i] for i in order]

    def row_groups(path: str) -> list[int]:
        meta = pq.ParquetFile(path, filesystem=fs).metadata
        return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(paths)))) as pool:
        per_file = list(pool.map(row_groups, paths))
    block_file = np.repeat(np.arange(len(paths), dtype=np.int64), [len(r) for r in per_file])
    block_rg = np.concatenate([np.arange(len(r), dtype=np.int64) for r in per_file]) if per_file else np.empty(0, np.int64)
    block_rows = np.asarray([n for r in per_file for n in r], dtype=np.int64)
    return Snapshot(str(table_uri), dt.version(), files.schema, tuple(paths), fs,
                    tuple(parts), block_file, block_rg, block_rows)


def delivered_per_worker(consumed: int, counts: Sequence[int]) -> tuple[list[int], int]:
    """Units each worker had delivered when the consumer had taken ``consumed`` in all, and the
    worker the DataLoader would have asked next.

    A DataLoader (``in_order=True``) takes one unit from each worker in turn, 0, 1, …, skipping
    workers that are done; ``counts`` are the workers' unit counts. A new DataLoader starts again
    at worker 0, so on resume worker ``j`` plays the part of worker ``(next + j) % n``: the turns
    then continue exactly. Raises ValueError if ``consumed`` exceeds the sum of ``counts``.
    """
    if consumed > sum(counts):
        raise ValueError(f"consumed {consumed} units but the workers hold {sum(counts)}")
    done, left, level, last = [0] * len(counts), consumed, 0, -1
    while left:
        active = [w for w, c in enumerate(counts) if c > level]
        span = min(counts[w] for w in active) - level
        rounds = min(span, left // len(active))
        if rounds == 0:  # a partial round, in worker order
            for w in active[:left]:
                done[w] += 1
            last = active[left - 1]
            break
        for w in active:
            done[w] += rounds
        level, left, last = level + rounds, left - rounds * len(active), active[-1]
    return done, (last + 1) % len(counts)


def shared_empty(*specs: tuple[Sequence[int], torch.dtype]) -> list[torch.Tensor]:
    """Uninitialized tensors ``(shape, dtype)`` carved out of one buffer, which is allocated in
    shared memory inside a DataLoader worker.

    As ``default_collate`` does, a batch built there then crosses to the main process without
    the extra copy torch would otherwise make into shared memory, and as one segment (one file
    descriptor to pass) however many tensors it holds. Each tensor starts 64-byte aligned.
    """
    offsets, total = [], 0
    for shape, dtype in specs:
        offsets.append(total)
        total += -(-math.prod(shape) * dtype.itemsize // 64) * 64
    if get_worker_info() is None or total == 0:
        buffer = torch.empty(total, dtype=torch.uint8)
    else:
        storage = torch.empty(0, dtype=torch.uint8)._typed_storage()._new_shared(total)
        buffer = torch.empty(0, dtype=torch.uint8).new(storage)
    return [buffer[o:o + math.prod(shape) * dtype.itemsize].view(dtype).view(tuple(shape))
            for o, (shape, dtype) in zip(offsets, specs)]


def column_to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A decoded column as numpy, leading dimension = rows.

    Numbers and booleans: 1-d; lists of numbers of one length: 2-d; anything else (strings,
    ragged lists, nulls): an object array of Python values.
    """
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = arr.type
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)) and arr.null_count == 0:
        return arr.to_numpy(zero_copy_only=False)
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and arr.null_count == 0 \
            and (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)) and len(arr):
        lengths = pa.compute.list_value_length(arr).to_numpy()
        values = arr.flatten()
        if lengths.min() == lengths.max() and values.null_count == 0:
            return values.to_numpy(zero_copy_only=False).reshape(len(arr), int(lengths[0]))
    out = np.empty(len(arr), dtype=object)
    out[:] = arr.to_pylist()
    return out


def to_torch(arrays: dict[str, Any]) -> dict[str, Any]:
    """Numeric numpy arrays → tensors (in one shared buffer in a worker); others → lists/values."""
    numeric = {k: v for k, v in arrays.items() if isinstance(v, np.ndarray) and v.dtype != object}
    tensors = dict(zip(numeric, shared_empty(*[(v.shape, torch.from_numpy(np.empty(0, v.dtype)).dtype)
                                                for v in numeric.values()])))
    out = {}
    for key, value in arrays.items():
        if key in tensors:
            tensors[key].numpy()[...] = value
            out[key] = tensors[key]
        elif isinstance(value, np.ndarray):
            out[key] = value.tolist()
        elif isinstance(value, np.generic):
            out[key] = value.item()
        else:
            out[key] = value
    return out


class DeltaRowDataset(IterableDataset):
    """The rows of one Delta table version, sharded over ranks and workers, shuffled, resumable.

    Args:
        table_uri: the table's folder or URL (``s3://``, ``gs://``, ``abfss://`` …).
        columns: columns to read (default: all); partition columns are filled in from the log.
        version: Delta version to read (default: the latest when built; pinned from then on).
        rank, world_size: this process's place (default: ``RANK``/``WORLD_SIZE``, then
            ``torch.distributed``, then a single process).
        shuffle: block and buffer shuffle (False: table order, still split over ranks/workers).
        seed: with the epoch, fixes the order (a non-negative int).
        shuffle_buffer: rows permuted together by each worker (memory: that many decoded rows).
        batch_size: yield batches of this many rows (use ``DataLoader(batch_size=None)`` or
            :class:`DeltaLoader`); None yields single rows.
        num_threads: threads per process (the main one, or each DataLoader worker) that decode
            and batch the next windows ahead; they do not change the order.
        storage_options: credentials/options for ``deltalake`` (object stores).
        cache_dir: a local folder for the data files of a remote table (``s3://`` …): each file
            is downloaded once, whole, when first needed, and read from there afterwards (later
            epochs, resumes, other datasets of the same table). Delta never rewrites a data file
            under its path, so a cached file is never stale. None (default): read remotely each
            time. Local tables are read in place either way.

    Raises ValueError for a bad argument or an unknown column, deltalake's TableNotFoundError
    for a missing table. Subclasses override :meth:`decode`, :meth:`make_batch`,
    :meth:`make_sample` to shape the samples.
    """

    def __init__(self, table_uri: str, *, columns: Sequence[str] | None = None, version: int | None = None,
                 rank: int | None = None, world_size: int | None = None, shuffle: bool = True, seed: int = 0,
                 shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, batch_size: int | None = None,
                 num_threads: int = DEFAULT_THREADS, storage_options: dict | None = None,
                 cache_dir: str | os.PathLike | None = None):
        super().__init__()
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be >= 1, got {shuffle_buffer}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.table_uri, self.storage_options = str(table_uri), storage_options
        self.shuffle, self.seed, self.shuffle_buffer, self.batch_size = shuffle, seed, shuffle_buffer, batch_size
        self.num_threads = num_threads
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        self.snapshot = load_snapshot(self.table_uri, version, storage_options)
        self._config_hash: tuple[int, str | None] | None = None   # (version, its commit's config hash)
        names = self.snapshot.schema.names
        self.columns = tuple(dict.fromkeys(columns)) if columns is not None else tuple(names)
        unknown = [c for c in self.columns if c not in names]
        if unknown:
            raise ValueError(f"{self.table_uri}: no column(s) {unknown}; the table has {names}")
        # epoch, resume position, its worker count, "ran in a worker": shared with the workers.
        # and the number of elastic phases (see load_state_dict) the workers' copies must hold.
        self._control = torch.zeros(5, dtype=torch.int64).share_memory_()
        #: earlier parts of this epoch consumed under other rank layouts (elastic resume): per part
        #: its world_size, batch_size, shuffle_buffer and, per old rank, num_workers and consumed
        self._history: list[dict] = []
        self._positions_cache: tuple | None = None
        self._consumed = 0          # units this process's consumer has taken this epoch
        self._workers: int | None = None
        self._counted = False       # a DeltaLoader counts for us

    # ------------------------------------------------------------------------------ public API
    @property
    def version(self) -> int:
        """The pinned Delta table version."""
        return self.snapshot.version

    @property
    def config_hash(self) -> str | None:
        """The config hash (16 hex digits, ``Config.hash()``) that the pinned version's commit info
        records (:func:`pipelines.lake.read.commit_lineage`): the crawlake configuration that
        wrote this version. None when the commit records none (a table written by another tool or
        an older crawlake, or a commit the log no longer holds). Read once per pinned version."""
        if self._config_hash is None or self._config_hash[0] != self.version:
            from pipelines.lake.read import commit_lineage

            lineage = commit_lineage(self.table_uri, self.version, self.storage_options)
            self._config_hash = (self.version, lineage.config_hash if lineage is not None else None)
        return self._config_hash[1]

    @property
    def epoch(self) -> int:
        return int(self._control[_EPOCH])

    @property
    def num_rows(self) -> int:
        """Rows (samples) in the pinned table version, all ranks together."""
        return self.snapshot.num_rows

    def rank_rows(self) -> tuple[int, int]:
        """``[start, stop)`` of this rank's slice of the epoch's row stream."""
        n = self.num_rows
        return self.rank * n // self.world_size, (self.rank + 1) * n // self.world_size

    def __len__(self) -> int:
        """Items this rank yields per epoch (after an elastic resume: in the rest of the epoch):
        batches (``batch_size`` set) or rows."""
        positions = self._rank_positions(self.epoch)
        if positions is None:
            start, stop = self.rank_rows()
            return math.ceil((stop - start) / (self.batch_size or 1))
        return math.ceil(len(positions) / (self.batch_size or 1))

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (a non-negative int) from its beginning on the next iteration."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._control[_EPOCH] = epoch
        self._control[_RESUME_UNITS] = 0
        self._control[_RESUME_WORKERS] = 0
        self._set_history([])
        self._consumed, self._workers = 0, None

    def _set_history(self, history: list[dict]) -> None:
        self._history = [dict(phase) for phase in history]
        self._positions_cache = None
        self._control[_PHASES] = len(self._history)

    def state_dict(self) -> dict:
        """Where this rank's consumer is in the epoch (plain ints and strings: JSON-safe):
        ``table_uri``, ``version`` (the pinned Delta version), ``config_hash`` (:attr:`config_hash`,
        str or None), ``epoch``, ``seed``, ``shuffle``, ``shuffle_buffer``, ``batch_size``,
        ``rank``, ``world_size``, ``num_workers`` (None before an iteration), ``consumed`` (units
        taken: batches, or rows without ``batch_size``) and ``history`` (earlier elastic parts).

        Raises RuntimeError if DataLoader workers iterated the dataset outside a
        :class:`DeltaLoader`: only the main process knows what it took.
        """
        if bool(self._control[_RAN_IN_WORKER]) and not self._counted:
            raise RuntimeError("this dataset was iterated by DataLoader workers, whose prefetching hides how many "
                               "batches were taken: iterate through pipelines.loaders.DeltaLoader to resume exactly")
        return {"table_uri": self.table_uri, "version": self.version, "config_hash": self.config_hash,
                "epoch": self.epoch, "seed": self.seed,
                "shuffle": self.shuffle, "shuffle_buffer": self.shuffle_buffer, "batch_size": self.batch_size,
                "rank": self.rank, "world_size": self.world_size, "num_workers": self._workers,
                "consumed": self._consumed, "history": [dict(phase) for phase in self._history]}

    def load_state_dict(self, state: dict | Sequence[dict], *, repin: bool = False) -> None:
        """Continue from ``state`` on the next iteration (and on every one until ``set_epoch``).

        ``state`` is either

        * this rank's own ``state_dict()``: the same rank layout (rank, world_size), batch size
          and DataLoader worker count go on exactly where they stopped; or
        * **every** rank's ``state_dict()`` of one moment (a list, any order; e.g. gathered with
          ``torch.distributed.all_gather_object``): an *elastic* resume. The rows those ranks had
          not yet delivered are dealt to *this* dataset's ranks (any ``world_size``, any
          ``num_workers``, any ``batch_size`` and ``shuffle_buffer``): rank ``r`` of ``W'`` takes
          the contiguous slice ``[r*M//W', (r+1)*M//W')`` of the M remaining rows in stream
          order, then units, workers and buffer shuffle as for an epoch (windows seeded with the
          part's number too). Every remaining row is delivered exactly once over the new ranks,
          in an order fixed by the states and the new layout. Its ``state_dict()`` carries the
          earlier parts (``history``), so it can be resumed again, elastically or not.

        **Versions.** The state is for one table version, and this dataset reads one (the
        latest when it was built without ``version``). When they differ — typically the table
        got a newer version since the checkpoint — the rows and their order differ, so resuming
        would silently skip or repeat samples: ValueError naming both versions. With
        ``repin=True`` the dataset is re-pinned to the state's version (its snapshot is read
        again) and the resume is exact; to train on the newer version instead, start its epoch
        without this state. A state that records a config hash must also match the one this
        version's commit records (:attr:`config_hash`; None on either side is not checked): a
        mismatch means the table was re-created under the same path, a ValueError naming both.

        Raises ValueError when the state belongs to another table, version (without
        ``repin``), config hash, seed or shuffle setting, or (own state) another rank layout,
        batch size or buffer; or when the list is not one state per rank of one moment.
        """
        if not isinstance(state, dict):
            return self._load_elastic(list(state), repin)
        for key in ("table_uri", "seed", "shuffle", "shuffle_buffer", "batch_size", "rank", "world_size"):
            if state[key] != getattr(self, key):
                hint = (" (to resume on another number of ranks, pass every rank's state_dict as a list)"
                        if key in ("rank", "world_size") else "")
                raise ValueError(f"state has {key}={state[key]!r}, this dataset {key}={getattr(self, key)!r}{hint}")
        self._adopt_version(state, repin)
        self._set_history(state.get("history", []))
        if not 0 <= state["consumed"] <= len(self):
            raise ValueError(f"state consumed {state['consumed']} of {len(self)} units")
        self._control[_EPOCH] = state["epoch"]
        self._control[_RESUME_UNITS] = state["consumed"]
        self._control[_RESUME_WORKERS] = state["num_workers"] or 0
        self._consumed, self._workers = state["consumed"], state["num_workers"]

    def _adopt_version(self, state: dict, repin: bool) -> None:
        """Check ``state``'s version (re-pinning to it with ``repin``) and config hash; see
        :meth:`load_state_dict`."""
        target = state["version"]
        if target != self.version and not repin:
            raise ValueError(
                f"the state is for version {target} of {self.table_uri}, this dataset reads version "
                f"{self.version}: resuming across versions would skip or repeat rows. Pass repin=True to re-pin "
                f"the dataset to version {target} and resume exactly, or start version {self.version} "
                "without the state")
        if target == self.version:
            ours = self.config_hash
        else:
            from pipelines.lake.read import commit_lineage

            lineage = commit_lineage(self.table_uri, target, self.storage_options)
            ours = lineage.config_hash if lineage is not None else None
        saved = state.get("config_hash")
        if saved is not None and ours is not None and saved != ours:
            raise ValueError(f"the state was saved under config hash {saved} at version {target} of "
                             f"{self.table_uri}, but that version's commit records config hash {ours}: the table "
                             "was re-created since; start a new epoch without the state")
        if target != self.version:   # re-pin, as asked
            self.snapshot = load_snapshot(self.table_uri, target, self.storage_options)
            self._config_hash = (target, ours)
            self._positions_cache = None

    def _load_elastic(self, states: list[dict], repin: bool) -> None:
        if not states:
            raise ValueError("no states given: pass every rank's state_dict")
        states = sorted(states, key=lambda st: st["rank"])
        world = states[0]["world_size"]
        if [st["rank"] for st in states] != list(range(world)) or any(st["world_size"] != world for st in states):
            raise ValueError(f"an elastic resume needs one state per rank of one world: got ranks "
                             f"{[st['rank'] for st in states]} of world sizes {sorted({st['world_size'] for st in states})}")
        for key in ("table_uri", "version", "config_hash", "epoch", "seed", "shuffle", "batch_size", "shuffle_buffer",
                    "history"):
            if any(st.get(key) != states[0].get(key) for st in states):
                raise ValueError(f"the ranks' states differ in {key}: not one moment of one run")
        first = states[0]
        for key in ("table_uri", "seed", "shuffle"):
            if first[key] != getattr(self, key):
                raise ValueError(f"state has {key}={first[key]!r}, this dataset {key}={getattr(self, key)!r}")
        self._adopt_version(first, repin)
        phase = {"world_size": world, "batch_size": first["batch_size"], "shuffle_buffer": first["shuffle_buffer"],
                 "num_workers": [st["num_workers"] or 0 for st in states], "consumed": [st["consumed"] for st in states]}
        for st in states:
            if st["consumed"] and not st["num_workers"]:
                raise ValueError(f"rank {st['rank']}'s state consumed {st['consumed']} units but names no worker count")
        self._control[_EPOCH] = first["epoch"]
        self._set_history([*first.get("history", []), phase])
        self._rank_positions(first["epoch"])   # checks every old rank's count (ValueError)
        self._control[_RESUME_UNITS] = 0
        self._control[_RESUME_WORKERS] = 0
        self._consumed, self._workers = 0, None

    # ------------------------------------------------------------------------------ hooks
    def decode(self, table: pa.Table) -> dict[str, Any]:
        """Decoded rows (in stream order) → per-column arrays with rows as the leading dimension."""
        return {name: column_to_numpy(table.column(name)) for name in self.columns}

    def make_batch(self, arrays: dict[str, Any], index: np.ndarray) -> Any:
        """Rows ``index`` (int64[batch]) of ``arrays`` → one batch: a dict of tensors (numbers)
        and lists (strings, ragged lists)."""
        return to_torch({name: arr[index] for name, arr in arrays.items()})

    def make_sample(self, arrays: dict[str, Any], i: int) -> Any:
        """Row ``i`` of ``arrays`` → one sample (0-d tensors for scalars)."""
        return {name: value[0] for name, value in self.make_batch(arrays, np.arange(i, i + 1)).items()}

    # ------------------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if info is not None:
            self._control[_RAN_IN_WORKER] = 1
        resume, saved_workers = int(self._control[_RESUME_UNITS]), int(self._control[_RESUME_WORKERS])
        if resume and saved_workers != workers:
            raise ValueError(f"the state was saved with {saved_workers} DataLoader worker(s); resume with the same "
                             f"number (this loader has {workers})")
        items = self._worker_items(worker, workers, resume)
        if info is not None:
            return items
        return self._counting(items, resume)

    def _counting(self, items: Iterator[Any], start: int) -> Iterator[Any]:
        self._consumed, self._workers = start, 1
        for item in items:
            self._consumed += 1
            yield item

    def _block_order(self, epoch: int) -> np.ndarray:
        blocks = len(self.snapshot.block_rows)
        if not self.shuffle:
            return np.arange(blocks)
        return np.random.default_rng([self.seed, epoch]).permutation(blocks)

    def _window_perm(self, epoch: int, phase: int, key: int, n: int) -> np.ndarray:
        """The buffer shuffle of a window of ``n`` rows whose first row is stream row ``key``."""
        if not self.shuffle:
            return np.arange(n)
        seeds = [self.seed, epoch, 1, key] if phase == 0 else [self.seed, epoch, 1, key, phase]
        return np.random.default_rng(seeds).permutation(n)

    def _rank_positions(self, epoch: int) -> np.ndarray | None:
        """This rank's rows (stream positions, in order) in the current part of the epoch; None
        for the first part, where they are the contiguous :meth:`rank_rows`."""
        if not self._history:
            return None
        key = (epoch, self.version, self.rank, self.world_size, repr(self._history))
        if self._positions_cache is None or self._positions_cache[0] != key:
            remaining = np.arange(self.num_rows, dtype=np.int64)
            for k, phase in enumerate(self._history):
                remaining = remaining[~self._consumed_mask(epoch, k, phase, remaining)]
            n, w, r = len(remaining), self.world_size, self.rank
            self._positions_cache = (key, remaining[r * n // w:(r + 1) * n // w])
        return self._positions_cache[1]

    def _consumed_mask(self, epoch: int, k: int, phase: dict, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` (the stream positions part ``k`` dealt to its ranks) its ranks delivered."""
        mask = np.zeros(len(rows), dtype=bool)
        world, size = phase["world_size"], phase["batch_size"] or 1
        window = max(size, phase["shuffle_buffer"] // size * size)
        for r in range(world):
            lo_r, hi_r = r * len(rows) // world, (r + 1) * len(rows) // world
            mine = rows[lo_r:hi_r]
            workers, consumed = max(1, phase["num_workers"][r]), phase["consumed"][r]
            ranges = _split_units(len(mine), size, workers)
            counts = [math.ceil((b - a) / size) for a, b in ranges]
            if consumed > sum(counts):
                raise ValueError(f"rank {r}'s state consumed {consumed} of {sum(counts)} units")
            done, _ = delivered_per_worker(consumed, counts)
            for w, (a, b) in enumerate(ranges):
                skip = min(done[w] * size, b - a)
                full = skip // window * window
                mask[lo_r + a:lo_r + a + full] = True
                if skip > full:
                    lo = a + full
                    n = min(lo + window, b) - lo
                    mask[lo_r + lo + self._window_perm(epoch, k, int(mine[lo]), n)[:skip - full]] = True
        return mask

    def _worker_items(self, worker: int, workers: int, resume: int) -> Iterator[Any]:
        epoch = self.epoch
        if int(self._control[_PHASES]) != len(self._history):
            raise RuntimeError("an elastic state was loaded after this DataLoader's persistent workers started; "
                               "load it before the first iteration, or use non-persistent workers")
        size = self.batch_size or 1
        phase = len(self._history)
        positions = self._rank_positions(epoch)
        if positions is None:
            start, stop = self.rank_rows()
            positions = np.arange(start, stop, dtype=np.int64)
        ranges = _split_units(len(positions), size, workers)
        counts = [math.ceil((b - a) / size) for a, b in ranges]
        done, turn = delivered_per_worker(resume, counts)
        worker = (turn + worker) % workers  # see delivered_per_worker: the turns continue exactly
        skip = done[worker] * size
        first, last = ranges[worker]
        order = self._block_order(epoch)
        starts = np.concatenate(([0], np.cumsum(self.snapshot.block_rows[order])))
        window = max(size, self.shuffle_buffer // size * size)
        windows = [(lo, min(lo + window, last)) for lo in range(first + skip // window * window, last, window)]
        runs = [_runs(positions[lo:hi]) for lo, hi in windows]

        def batches(k: int, table: pa.Table) -> Iterator[Any]:
            arrays, n = self.decode(table), table.num_rows
            perm = self._window_perm(epoch, phase, int(positions[windows[k][0]]), n)
            for u in range(skip % window if k == 0 else 0, n, size):
                if self.batch_size is None:
                    yield self.make_sample(arrays, int(perm[u]))
                else:
                    yield self.make_batch(arrays, perm[u:u + size])

        # A window is shuffled as a whole, so none of it can go out before all of it is read. A
        # thread pool (pyarrow releases the GIL) reads the blocks of the next windows ahead:
        # without it a DataLoader worker stalls at every window, and the DataLoader, which takes
        # the workers' batches in turn, with it. The first window's batches are made one at a
        # time, so the first batch (an epoch's, a resume's) waits only for its own blocks. Once
        # it is out, a thread makes each next window's batches whole while the current ones are
        # handed out: held here until sent, their shared-memory pages are freed by this worker,
        # not by the main process, which is the loader's serial consumer (and batches made in
        # one run cost the worker less CPU than batches made between sends).
        with ThreadPoolExecutor(max_workers=self.num_threads, thread_name_prefix="crawlake-loader") as pool, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="crawlake-batches") as maker:
            reader = _BlockReader(self, order, starts, runs, pool)
            ahead: Future | None = None
            try:
                for k in range(len(windows)):
                    items = iter(ahead.result() if ahead is not None else batches(k, reader.window(k)))
                    first = next(items, _END)
                    if first is not _END:
                        yield first
                    ahead = (maker.submit(lambda j=k + 1: list(batches(j, reader.window(j))))
                             if k + 1 < len(windows) else None)
                    yield from items
            finally:
                if ahead is not None:
                    ahead.cancel()
                reader.cancel()


#: End of an iterator (``next(it, _END)``): a sample may be any value, None included.
_END = object()


def _split_units(n: int, size: int, workers: int) -> list[tuple[int, int]]:
    """``n`` rows in units of ``size`` dealt to ``workers`` as contiguous ``[start, stop)`` ranges."""
    units = math.ceil(n / size)
    bounds = [min(w * units // workers * size, n) for w in range(workers + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _runs(positions: np.ndarray) -> list[tuple[int, int]]:
    """Sorted-or-not stream positions → ``[lo, hi)`` runs of consecutive ones, in their order."""
    if len(positions) == 0:
        return []
    breaks = np.flatnonzero(np.diff(positions) != 1) + 1
    lows = positions[np.concatenate(([0], breaks))]
    highs = positions[np.concatenate((breaks - 1, [len(positions) - 1]))] + 1
    return list(zip(lows.tolist(), highs.tolist()))


class FileCache:
    """Whole remote files kept in a local folder, by their path on the remote filesystem.

    For immutable files only (Delta data files): a cached copy is used as it is. Several processes
    (DataLoader workers, ranks on one host) may fill one folder: each download goes to a
    uniquely named temporary file renamed into place, so a reader sees a whole file or none.
    """

    def __init__(self, folder: str, filesystem: pafs.FileSystem):
        self.folder, self.fs = os.path.abspath(folder), filesystem

    def local(self, path: str) -> str:
        """The local copy of remote ``path`` (downloaded now if missing)."""
        target = os.path.join(self.folder, path.lstrip("/"))
        if os.path.exists(target):
            return target
        os.makedirs(os.path.dirname(target), exist_ok=True)
        part = f"{target}.{os.getpid()}.{threading.get_ident()}.part"
        try:
            with self.fs.open_input_stream(path) as src, open(part, "wb") as dst:
                while chunk := src.read(8 << 20):
                    dst.write(chunk)
            os.replace(part, target)
        finally:
            if os.path.exists(part):
                os.remove(part)
        return target


class _BlockReader:
    """The rows of a worker's windows: their blocks decoded ahead, in order, on a thread pool.

    Every block is decoded once (windows may share one) and dropped after the last window that
    needs it; blocks for the next ``threads`` windows are in flight.
    """

    def __init__(self, ds: DeltaRowDataset, order: np.ndarray, starts: np.ndarray,
                 windows: list[list[tuple[int, int]]], pool: ThreadPoolExecutor):
        self.snap, self.columns, self.pool, self.ahead = ds.snapshot, ds.columns, pool, ds.num_threads
        remote = not isinstance(ds.snapshot.filesystem, pafs.LocalFileSystem)
        self.cache = FileCache(ds.cache_dir, ds.snapshot.filesystem) if ds.cache_dir and remote else None
        parts = set(ds.snapshot.partition_values[0]) if ds.snapshot.partition_values else set()
        self.file_columns = [c for c in ds.columns if c not in parts]
        self.part_columns = [c for c in ds.columns if c in parts]
        self.order = order
        self.plan: list[list[tuple[int, int, int]]] = []   # per window: (stream block, first row, stop row)
        self.last_use: dict[int, int] = {}
        for k, window_runs in enumerate(windows):   # per window: [lo, hi) runs of stream rows, in order
            pieces = []
            for lo, hi in window_runs:
                i = int(np.searchsorted(starts, lo, side="right")) - 1
                while lo < hi:
                    a, b = int(starts[i]), int(starts[i + 1])
                    if b > lo:
                        take = min(hi, b) - lo
                        pieces.append((i, lo - a, lo - a + take))
                        self.last_use[i] = k
                        lo += take
                    i += 1
            self.plan.append(pieces)
        self.blocks: dict[int, Future] = {}

    def _decode(self, b: int) -> pa.Table:
        f = int(self.snap.block_file[b])
        path, fs = self.snap.files[f], self.snap.filesystem
        if self.cache is not None:
            path, fs = self.cache.local(path), pafs.LocalFileSystem()
        table = pq.ParquetFile(path, filesystem=fs).read_row_group(
            int(self.snap.block_row_group[b]), columns=self.file_columns)
        for name in self.part_columns:
            field = self.snap.schema.field(name)
            table = table.append_column(field, pa.array([self.snap.partition_values[f][name]] * table.num_rows, field.type))
        return table.select(list(self.columns))

    def window(self, k: int) -> pa.Table:
        """Window ``k``'s rows, in stream order (waits for its blocks)."""
        for ahead in range(k, min(k + 1 + self.ahead, len(self.plan))):
            for i, _, _ in self.plan[ahead]:
                if i not in self.blocks:
                    self.blocks[i] = self.pool.submit(self._decode, int(self.order[i]))
        pieces = [self.blocks[i].result().slice(a, b - a) for i, a, b in self.plan[k]]
        for i in {i for i, _, _ in self.plan[k]}:
            if self.last_use[i] == k:
                del self.blocks[i]
        return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)

    def cancel(self) -> None:
        for future in self.blocks.values():
            future.cancel()
        self.blocks.clear()


class DeltaLoader(DataLoader):
    """A DataLoader over a :class:`DeltaRowDataset` that keeps its ``state_dict`` exact with workers.

    Batching is the dataset's (its ``batch_size``), so ``batch_size``, ``shuffle``, samplers and
    ``drop_last`` are refused (ValueError); order is kept (``in_order=True``). Everything else
    (``num_workers``, ``pin_memory``, ``prefetch_factor``, ``persistent_workers`` …) is torch's.
    """

    def __init__(self, dataset: DeltaRowDataset, num_workers: int = 0, **kwargs: Any):
        if not isinstance(dataset, DeltaRowDataset):
            raise TypeError(f"DeltaLoader needs a DeltaRowDataset, got {type(dataset).__name__}")
        refused = [k for k in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last", "in_order") if k in kwargs]
        if refused:
            raise ValueError(f"DeltaLoader: {refused} are set on the dataset (batch_size) or fixed; not here")
        super().__init__(dataset, batch_size=None, num_workers=num_workers, in_order=True, **kwargs)

    def __iter__(self) -> Iterator[Any]:
        ds: DeltaRowDataset = self.dataset
        if self.num_workers == 0:  # in-process: the dataset counts by itself
            return super().__iter__()
        resume, saved = int(ds._control[_RESUME_UNITS]), int(ds._control[_RESUME_WORKERS])
        if resume and saved != self.num_workers:
            raise ValueError(f"the state was saved with {saved} DataLoader worker(s); resume with the same "
                             f"number (this loader has {self.num_workers})")
        return self._counting(super().__iter__(), resume)

    def _counting(self, items: Iterator[Any], start: int) -> Iterator[Any]:
        ds: DeltaRowDataset = self.dataset
        ds._counted, ds._consumed, ds._workers = True, start, self.num_workers
        for item in items:
            ds._consumed += 1
            yield item
