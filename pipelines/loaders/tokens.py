"""``gold.token_sequences`` as causal-LM training samples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from pipelines.loaders.base import DEFAULT_SHUFFLE_BUFFER, DEFAULT_THREADS, DeltaRowDataset, column_to_numpy, shared_empty

IGNORE_INDEX = -100  # what torch.nn.CrossEntropyLoss (ignore_index) and Hugging Face models skip


class TokenSequenceDataset(DeltaRowDataset):
    """Packed token sequences from a ``gold.token_sequences`` table version, for next-token training.

    Each row holds ``seq_len + 1`` token ids of which the first ``num_tokens`` are real (the
    rest padding). A sample is ``input_ids = ids[:-1]`` and ``labels = ids[1:]`` (both
    int64[seq_len]; ``[batch_size, seq_len]`` when batched) with ``labels`` set to ``-100``
    (:data:`IGNORE_INDEX`) where the target is padding. ``extra_columns`` (e.g. ``seq_id``,
    ``doc_boundaries``) are passed along: numbers as tensors, strings and ragged lists as lists.

    Sharding, the (seed, epoch) block/buffer shuffle, ``set_epoch``, ``state_dict`` and
    ``load_state_dict`` are :class:`~pipelines.loaders.base.DeltaRowDataset`'s; with DataLoader
    workers iterate through :class:`~pipelines.loaders.base.DeltaLoader` to resume exactly.
    Raises ValueError (at iteration) if the table's ``input_ids`` rows differ in length.
    """

    def __init__(self, table_uri: str, *, version: int | None = None, rank: int | None = None,
                 world_size: int | None = None, shuffle: bool = True, seed: int = 0,
                 shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, batch_size: int | None = None,
                 extra_columns: Sequence[str] = (), num_threads: int = DEFAULT_THREADS,
                 storage_options: dict | None = None, cache_dir: str | None = None):
        self.extra_columns = tuple(c for c in dict.fromkeys(extra_columns) if c not in ("input_ids", "labels"))
        super().__init__(table_uri, columns=("input_ids", "num_tokens", *self.extra_columns), version=version,
                         rank=rank, world_size=world_size, shuffle=shuffle, seed=seed,
                         shuffle_buffer=shuffle_buffer, batch_size=batch_size, num_threads=num_threads,
                         storage_options=storage_options, cache_dir=cache_dir)

    def decode(self, table: pa.Table) -> dict[str, Any]:
        # The window's ids stay in the row-group pieces pyarrow decoded them into (numpy views, no
        # copy); each batch gathers its rows from them. Combining them first copied the whole
        # window before its first batch could go out.
        column = table.column("input_ids")
        if not pa.types.is_integer(column.type.value_type):
            raise ValueError(f"{self.table_uri}: input_ids must be lists of integers, got {column.type}")
        chunks = [chunk for chunk in column.chunks if len(chunk)]
        lengths = [pa.compute.list_value_length(chunk).to_numpy(zero_copy_only=False) for chunk in chunks]
        lo = min((int(n.min()) for n in lengths), default=2)
        hi = max((int(n.max()) for n in lengths), default=2)
        if lo != hi or lo < 2:
            raise ValueError(f"{self.table_uri} v{self.version}: input_ids rows have lengths "
                             f"{lo}..{hi}; expected one length >= 2 (seq_len + 1)")
        views = [chunk.flatten().to_numpy(zero_copy_only=False).reshape(len(chunk), lo) for chunk in chunks]
        arrays = {"input_ids": RowChunks(views, lo),
                  "num_tokens": table.column("num_tokens").to_numpy().astype(np.int64, copy=False)}
        for name in self.extra_columns:
            arrays[name] = column_to_numpy(table.column(name))
        return arrays

    def make_batch(self, arrays: dict[str, Any], index: np.ndarray) -> dict[str, Any]:
        rows, num_tokens = arrays["input_ids"].take(index), arrays["num_tokens"][index]
        n, width = rows.shape
        extras = {name: arrays[name][index] for name in self.extra_columns}
        numeric = [k for k, v in extras.items() if v.dtype != object]
        # one buffer for everything numeric: a batch from a worker is one shared-memory segment
        inputs, labels, *tensors = shared_empty(
            ((n, width - 1), torch.int64), ((n, width - 1), torch.int64),
            *[(extras[k].shape, torch.from_numpy(np.empty(0, extras[k].dtype)).dtype) for k in numeric])
        inputs.numpy()[...] = rows[:, :-1]
        lab = labels.numpy()
        lab[...] = rows[:, 1:]
        for i in np.flatnonzero(num_tokens < width):  # only a group's last sequence is padded
            lab[i, max(int(num_tokens[i]) - 1, 0):] = IGNORE_INDEX
        out = {"input_ids": inputs, "labels": labels}
        for name in self.extra_columns:
            if name in numeric:
                tensor = tensors[numeric.index(name)]
                tensor.numpy()[...] = extras[name]
                out[name] = tensor
            else:
                out[name] = extras[name].tolist()
        return out


class RowChunks:
    """Rows of equal width held as consecutive 2-d numpy chunks (``[rows_k, width]`` each, one
    dtype): a window's pieces as decoded, read without concatenating them."""

    def __init__(self, chunks: Sequence[np.ndarray], width: int):
        self.chunks, self.width = list(chunks), width
        self.starts = np.cumsum([0, *(len(c) for c in self.chunks)])
        self.dtype = self.chunks[0].dtype if self.chunks else np.dtype(np.int32)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def take(self, index: np.ndarray) -> np.ndarray:
        """Rows ``index`` (int[n], in ``[0, len)``) as one ``[n, width]`` array, in that order.
        Raises IndexError for an index out of range."""
        index = np.asarray(index, dtype=np.int64)
        if len(index) and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"row index out of range [0, {len(self)})")
        if len(self.chunks) == 1:
            return self.chunks[0][index]
        out = np.empty((len(index), self.width), dtype=self.dtype)
        chunk = np.searchsorted(self.starts, index, side="right") - 1
        for k in np.unique(chunk):
            mine = chunk == k
            out[mine] = self.chunks[k][index[mine] - self.starts[k]]
        return out
