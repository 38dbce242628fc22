"""``silver.click_features`` as DLRM training samples."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from pipelines.loaders.base import DEFAULT_SHUFFLE_BUFFER, DeltaRowDataset, Snapshot, shared_empty

NUM_DENSE, NUM_SPARSE = 13, 26


def _only_days(snapshot: Snapshot, days: frozenset[int]) -> Snapshot:
    """The snapshot restricted to the files of the ``day`` partitions in ``days``."""
    keep_files = np.array([p.get("day") in days for p in snapshot.partition_values], bool)
    keep = keep_files[snapshot.block_file] if len(snapshot.block_file) else np.zeros(0, bool)
    return dataclasses.replace(snapshot, block_file=snapshot.block_file[keep],
                               block_row_group=snapshot.block_row_group[keep], block_rows=snapshot.block_rows[keep])


class ClickFeaturesDataset(DeltaRowDataset):
    """DLRM inputs from a ``silver.click_features`` table version: ``(dense, sparse, label)``.

    A sample is ``dense`` float32[13] (``log(1 + max(I, 0))``, missing → 0), ``sparse``
    int64[26] (``silver.click_vocab`` ids: 0 empty, 1 out of vocabulary) and ``label`` float32
    (0. or 1., the target of ``BCEWithLogitsLoss``); with ``batch_size`` set, one tuple of
    ``[batch_size, 13]``, ``[batch_size, 26]`` and ``[batch_size]`` tensors (the inputs of the
    DLRM reference, facebookresearch/dlrm, with one id per sparse feature).

    ``days`` keeps only those Criteo days (the table's ``day`` partitions), e.g. days 0-22 to
    train and day 23 to test as in the Criteo 1TB benchmark. Sharding over ranks and DataLoader
    workers, the (seed, epoch) block-then-buffer shuffle, ``set_epoch``, ``state_dict`` and
    ``load_state_dict`` are :class:`~pipelines.loaders.base.DeltaRowDataset`'s; with workers,
    iterate through :class:`~pipelines.loaders.base.DeltaLoader` to resume exactly. Raises
    ValueError (at iteration) if a row's ``dense`` or ``sparse`` has the wrong length or a null.
    """

    def __init__(self, table_uri: str, *, days: Sequence[int] | None = None, version: int | None = None,
                 rank: int | None = None, world_size: int | None = None, shuffle: bool = True, seed: int = 0,
                 shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, batch_size: int | None = None,
                 storage_options: dict | None = None):
        self.days = None if days is None else frozenset(int(d) for d in days)
        super().__init__(table_uri, columns=("dense", "sparse", "label"), version=version, rank=rank,
                         world_size=world_size, shuffle=shuffle, seed=seed, shuffle_buffer=shuffle_buffer,
                         batch_size=batch_size, storage_options=storage_options)
        if self.days is not None:
            self.snapshot = _only_days(self.snapshot, self.days)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "days": None if self.days is None else sorted(self.days)}

    def load_state_dict(self, state: dict, *, repin: bool = False) -> None:
        """As the base class's (``repin`` too); also refuses a state saved with other ``days``."""
        days = state.get("days")
        if (None if days is None else frozenset(days)) != self.days:
            raise ValueError(f"state has days={days!r}, this dataset days={None if self.days is None else sorted(self.days)!r}")
        version = self.version
        super().load_state_dict(state, repin=repin)
        if self.version != version and self.days is not None:   # the base class re-read the snapshot
            self.snapshot = _only_days(self.snapshot, self.days)

    def decode(self, table: pa.Table) -> dict[str, Any]:
        return {"dense": self._matrix(table, "dense", NUM_DENSE, np.float32),
                "sparse": self._matrix(table, "sparse", NUM_SPARSE, np.int64),
                "label": table.column("label").to_numpy().astype(np.float32)}

    def _matrix(self, table: pa.Table, name: str, width: int, dtype) -> np.ndarray:
        col = table.column(name).combine_chunks()
        n = len(col)
        values = col.flatten()
        if col.null_count or values.null_count or len(values) != n * width or \
                (n and pa.compute.max(pa.compute.list_value_length(col)).as_py() != width):
            raise ValueError(f"{self.table_uri} v{self.version}: every {name} must hold {width} non-null values")
        return values.to_numpy(zero_copy_only=False).astype(dtype, copy=False).reshape(n, width)

    def make_batch(self, arrays: dict[str, Any], index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = len(index)
        # one shared-memory segment per batch when built in a DataLoader worker
        dense, sparse, label = shared_empty(((n, NUM_DENSE), torch.float32), ((n, NUM_SPARSE), torch.int64),
                                            ((n,), torch.float32))
        dense.numpy()[...] = arrays["dense"][index]
        sparse.numpy()[...] = arrays["sparse"][index]
        label.numpy()[...] = arrays["label"][index]
        return dense, sparse, label

    def make_sample(self, arrays: dict[str, Any], i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dense, sparse, label = self.make_batch(arrays, np.arange(i, i + 1))
        return dense[0], sparse[0], label[0]
