"""Synthetic Criteo click logs: files in the exact Criteo (TSV) or Kaggle CSV format, for tests and
benchmarks (no real Criteo file may be redistributed).

The distributions follow the published statistics of the Criteo Display Advertising Challenge
training set: about 25.6 % positives; per-column missing rates of the integer features (I1 45 %,
I12 77 %, I2 none, ...) and of the categorical ones (C19-C22, C25, C26 about 44 %, C22 76 %, ...);
heavy-tailed integer counts (log-normal, I2 down to -3); categorical values drawn from a
Zipf-like law (p(rank k) ∝ k^-1.1) over each column's cardinality (capped by ``max_cardinality``),
each rank written as a fixed 32-bit hash in 8 lower-case hex digits. The label depends on a few
features through a logistic model, so a model trained on the data has something to learn.

Malformed lines can be planted (``bad_lines``); :class:`GeneratedFile` returns which line of which
file is bad and the reason ingestion must give (:data:`pipelines.kernels.clicks.REASONS`). Files
are written under a temporary name and renamed, so a streaming query never sees half a file.
"""

from __future__ import annotations

import gzip as gziplib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.kernels.clicks import KAGGLE_HEADER, get_format

# Criteo Kaggle train set: share of empty values per column, and distinct values of C columns.
INT_MISSING = (0.454, 0.0, 0.215, 0.217, 0.026, 0.224, 0.043, 0.0005, 0.043, 0.454, 0.043, 0.766, 0.217)
INT_MEDIAN = (1, 3, 7, 4, 2800, 30, 3, 8, 40, 1, 1, 1, 4)
CAT_MISSING = (0, 0, 0.034, 0.034, 0, 0.121, 0, 0, 0, 0, 0, 0.034, 0, 0, 0, 0.034, 0, 0, 0.44, 0.44,
               0.034, 0.762, 0, 0.034, 0.44, 0.44)
CAT_CARDINALITY = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                   27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
ZIPF_EXPONENT = 1.1
POSITIVE_RATE = 0.256

#: The malformed-line kinds planted, each with the reason ingestion must report.
CORRUPTIONS = (
    ("drop_field", "wrong_field_count"),
    ("extra_field", "wrong_field_count"),
    ("empty_line", "wrong_field_count"),
    ("label_2", "bad_label"),
    ("label_word", "bad_label"),
    ("int_float", "bad_integer"),
    ("int_letters", "bad_integer"),
    ("int_space", "bad_integer"),
    ("hash_short", "bad_hash"),
    ("hash_not_hex", "bad_hash"),
    ("hash_long", "bad_hash"),
)


@dataclass
class GeneratedFile:
    path: str
    lines: int                      # physical lines, header included
    rows: int                       # valid data lines
    positives: int                  # valid lines with label 1
    bad: dict[int, str] = field(default_factory=dict)   # 1-based line number -> reason
    header_lines: int = 0


def _hex8(values: np.ndarray) -> pa.Array:
    """uint32[n] → string[n] of 8 lower-case hex digits, built from buffers."""
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)
    shifts = np.arange(28, -1, -4, dtype=np.uint32)
    chars = digits[(values[:, None] >> shifts) & 0xF].astype(np.uint8)
    offsets = np.arange(0, 8 * len(values) + 1, 8, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])


def _mix32(x: np.ndarray) -> np.ndarray:
    """A 32-bit integer hash (lowbias32): distinct ranks → distinct-looking hashes."""
    x = x.astype(np.uint64) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x.astype(np.uint32)


class _Sampler:
    """Draws whole rows; the same seed gives the same rows."""

    def __init__(self, seed: int, max_cardinality: int):
        self.rng = np.random.default_rng(seed)
        self.cdfs = []
        for card in CAT_CARDINALITY:
            n = max(2, min(card, max_cardinality))
            w = np.arange(1, n + 1, dtype=np.float64) ** -ZIPF_EXPONENT
            self.cdfs.append(np.cumsum(w) / w.sum())

    def rows(self, n: int) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
        rng = self.rng
        ints, cats = [], []
        for j, (miss, median) in enumerate(zip(INT_MISSING, INT_MEDIAN)):
            x = np.floor(np.exp(np.log(median + 0.5) + 1.3 * rng.standard_normal(n))).astype(np.int64)
            if j == 1:  # I2 has small negative values in the real data
                x = np.where(rng.random(n) < 0.05, -rng.integers(1, 4, n), x)
            ints.append(np.where(rng.random(n) < miss, -(1 << 62), x))   # sentinel = missing
        for j, miss in enumerate(CAT_MISSING):
            rank = np.searchsorted(self.cdfs[j], rng.random(n)).astype(np.int64)
            cats.append(np.where(rng.random(n) < miss, -1, rank))
        # logistic label: frequent values of C6 and C14 and more clicks (I1) raise the odds
        score = (0.9 * (cats[5] == 0) - 0.6 * (cats[13] % 3 == 1) + 0.25 * np.log1p(np.maximum(ints[0], 0))
                 + 0.3 * rng.standard_normal(n))
        lo, hi = -10.0, 10.0
        for _ in range(40):  # intercept giving the target positive rate
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if (1 / (1 + np.exp(-(score + mid)))).mean() < POSITIVE_RATE else (lo, mid)
        label = (rng.random(n) < 1 / (1 + np.exp(-(score + lo)))).astype(np.int64)
        return label, ints, cats


def _lines(label, ints, cats, sep: str, ids: np.ndarray | None) -> pa.Array:
    cols = [] if ids is None else [pc.cast(pa.array(ids), pa.string())]
    cols.append(pc.cast(pa.array(label), pa.string()))
    for x in ints:
        cols.append(pc.cast(pa.array(x, mask=x == -(1 << 62)), pa.string()))
    for j, rank in enumerate(cats):
        hashed = _hex8(_mix32(rank * 40 + j + 1))
        cols.append(pc.if_else(pa.array(rank < 0), pa.scalar(None, pa.string()), hashed))
    return pc.binary_join_element_wise(*cols, sep, null_handling="replace", null_replacement="")


def _corrupt(line: str, kind: str, sep: str, rng: np.random.Generator, first_field: int) -> str:
    fields = line.split(sep)
    i_col = first_field + 1 + int(rng.integers(0, 13))
    c_col = first_field + 14 + int(rng.integers(0, 26))
    if kind == "drop_field":
        fields.pop(int(rng.integers(0, len(fields))))
    elif kind == "extra_field":
        fields.append("0")
    elif kind == "empty_line":
        return ""
    elif kind == "label_2":
        fields[first_field] = "2"
    elif kind == "label_word":
        fields[first_field] = "yes"
    elif kind == "int_float":
        fields[i_col] = "3.5"
    elif kind == "int_letters":
        fields[i_col] = "12ab"
    elif kind == "int_space":
        fields[i_col] = " 7"
    elif kind == "hash_short":
        fields[c_col] = "a3f9e1"
    elif kind == "hash_not_hex":
        fields[c_col] = "zz3f9e10"
    elif kind == "hash_long":
        fields[c_col] = "a3f9e1b7c"
    return sep.join(fields)


def generate_file(path: str | os.PathLike, rows: int, *, fmt: str = "tsv", seed: int = 0, bad_lines: int = 0,
                  max_cardinality: int = 200_000, chunk_rows: int = 200_000, first_id: int = 10_000_000,
                  compresslevel: int = 1) -> GeneratedFile:
    """Write ``rows`` data lines (``bad_lines`` of them malformed) to ``path``; ``.gz`` → gzip.

    ``rows`` counts every data line, good or bad (the Kaggle header comes on top). Raises
    ValueError for an unknown format or ``bad_lines > rows``.
    """
    spec = get_format(fmt)
    if not 0 <= bad_lines <= rows:
        raise ValueError(f"bad_lines must be between 0 and rows ({rows}), got {bad_lines}")
    path = Path(path)
    sep = spec.delimiter.decode()
    rng = np.random.default_rng(seed + 7919)
    bad_at = np.sort(rng.choice(rows, size=bad_lines, replace=False)) if bad_lines else np.zeros(0, np.int64)
    kinds = [CORRUPTIONS[i % len(CORRUPTIONS)] for i in rng.permutation(bad_lines)]
    sampler = _Sampler(seed, max_cardinality)
    header = spec.header is not None
    out = GeneratedFile(str(path), lines=rows + header, rows=rows - bad_lines, positives=0,
                        header_lines=int(header))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    opener = (lambda p: gziplib.open(p, "wb", compresslevel=compresslevel)) if path.suffix == ".gz" else (lambda p: open(p, "wb"))
    with opener(tmp) as f:
        if header:
            f.write(",".join(KAGGLE_HEADER).encode() + b"\n")
        k = 0
        for start in range(0, rows, chunk_rows):
            n = min(chunk_rows, rows - start)
            label, ints, cats = sampler.rows(n)
            ids = np.arange(first_id + start, first_id + start + n) if header else None
            lines = _lines(label, ints, cats, sep, ids)
            here = bad_at[(bad_at >= start) & (bad_at < start + n)] - start
            good = np.ones(n, bool)
            good[here] = False
            out.positives += int(label[good].sum())
            if here.size:
                mask = np.zeros(n, bool)
                mask[here] = True
                fixed = []
                for i in here.tolist():
                    kind, reason = kinds[k]
                    k += 1
                    fixed.append(_corrupt(lines[i].as_py(), kind, sep, rng, int(header)))
                    out.bad[start + i + 1 + int(header)] = reason
                lines = pc.replace_with_mask(lines, pa.array(mask), pa.array(fixed, pa.string()))
            text = pc.binary_join_element_wise(lines, pa.scalar("\n"), "")
            buffers = text.buffers()
            offsets = np.frombuffer(buffers[1], np.int32, len(text) + 1, text.offset * 4)
            f.write(memoryview(buffers[2])[offsets[0]:offsets[-1]])
    os.replace(tmp, path)
    return out


def generate(out_dir: str | os.PathLike, *, rows: int, files: int = 1, fmt: str = "tsv", gzip: bool = False,
             bad_lines: int = 0, seed: int = 0, first_day: int = 0, max_cardinality: int = 200_000
             ) -> list[GeneratedFile]:
    """Write ``files`` files of ``rows`` data lines each into ``out_dir``.

    TSV files are named like Criteo's 1TB logs, ``day_<n>`` (``.gz`` with ``gzip``) from
    ``first_day``; Kaggle files ``train_<n>.csv``. Each file gets ``bad_lines`` malformed lines
    and its own seed (``seed`` + file index).
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(files):
        day = first_day + i
        name = f"day_{day}" if fmt == "tsv" else f"train_{day}.csv"
        out.append(generate_file(folder / (name + (".gz" if gzip else "")), rows, fmt=fmt, seed=seed + day,
                                 bad_lines=bad_lines, max_cardinality=max_cardinality))
    return out
