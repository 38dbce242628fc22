"""Criteo click-log lines → typed rows and quarantine rows, and the DLRM feature rules (no Spark).

The format is Criteo's Display Advertising Challenge / Criteo 1TB Click Logs: one impression per
line, no header, tab-separated ``label`` (0/1), 13 integer features ``I1..I13`` (counts, may be
empty) and 26 categorical features ``C1..C26`` (32-bit hashes written as 8 hex characters, may be
empty). The Kaggle competition's ``train.csv`` form (``fmt="kaggle_csv"``) is the same data
comma-separated with a header ``Id,Label,I1..I13,C1..C26`` and an ``Id`` column first.

Every line of a file ends in exactly one place:

* a **row** (``kind="row"``): typed columns, the source file, the 1-based line number, a row key
  ``<sha256(source_file)[:16]>-<line:010d>`` and the Criteo day parsed from the file name;
* a **quarantine** row (``kind="quarantine"``) with the raw line, the reason (see :data:`REASONS`)
  and a detail naming the column and value. The first failing rule in line order wins: field
  count, then the label, then ``I1..I13``, then ``C1..C26``;
* the Kaggle header line, counted in the file's **summary** row (``kind="summary"``, one per file,
  ``detail`` is JSON ``{"lines", "rows", "quarantined", "header_lines"}``), so that per file
  ``lines = rows + quarantined + header_lines``.

Validation is exact and strict: a label is the single character ``0`` or ``1``; an integer is
``-?[0-9]+`` fitting int64 (no spaces, no ``+``, no hex); a hash is 8 hex digits (upper case is
accepted and stored lower case). A line with a carriage return (CRLF file) fails the field it
lands in.

Speed: a file is read in blocks of ``block_bytes`` (``pyarrow`` decompresses ``.gz``/``.bz2``/
``.zst``); a block is checked with byte-level scans (``bytes.translate``/``count``, numpy), parsed
by ``pyarrow.csv`` with quoting off and the typed schema, and only the lines that fail a check are
looked at one by one in Python. :func:`parse_file` is what the engines call, one file at a time
(the click ingest stage stages its batches as Parquet files through the lake layer).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from schemas.catalog import BRONZE_CLICKS, BRONZE_CLICKS_QUARANTINE, SILVER_CLICK_FEATURES

LABEL = "label"
INT_COLUMNS: tuple[str, ...] = tuple(f"I{i}" for i in range(1, 14))
CAT_COLUMNS: tuple[str, ...] = tuple(f"C{i}" for i in range(1, 27))
FEATURE_COLUMNS: tuple[str, ...] = (LABEL, *INT_COLUMNS, *CAT_COLUMNS)
KAGGLE_HEADER: tuple[str, ...] = ("Id", "Label", *INT_COLUMNS, *CAT_COLUMNS)

REASONS = {
    "wrong_field_count": "the line does not have the format's number of fields (40 TSV, 41 Kaggle CSV)",
    "bad_label": "the label is not 0 or 1",
    "bad_integer": "an I column holds something other than a (possibly negative) int64",
    "bad_hash": "a C column holds something other than 8 hex digits",
    "bad_header": "the first line of a Kaggle CSV file is not its header",
}

#: Sparse-id conventions of silver.click_features: empty value, value below the frequency
#: threshold (out of vocabulary), first id of a vocabulary value.
EMPTY_ID, OOV_ID, FIRST_VALUE_ID = 0, 1, 2

#: What the parser yields: ``kind`` (row | quarantine | summary), then bronze.clicks' columns
#: and bronze.clicks_quarantine's own, typed as the catalog declares them (all nullable: one batch
#: holds both kinds; ``ingest_time`` is the stage's constant).
ROW_SCHEMA = pa.schema(
    [pa.field("kind", pa.string())]
    + [BRONZE_CLICKS.nullable_arrow.field(c)
       for c in ("row_key", LABEL, *INT_COLUMNS, *CAT_COLUMNS, "source_file", "line_number", "day")]
    + [BRONZE_CLICKS_QUARANTINE.nullable_arrow.field(c) for c in ("raw_line", "reason", "detail")]
)

_INT_RE = re.compile(rb"-?[0-9]+")
_HASH_RE = re.compile(rb"[0-9a-fA-F]{8}")
_LOWER_HEX = b"0123456789abcdef"
_ALLOWED = b"0123456789abcdefABCDEF-"   # every byte a valid field can hold
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


@dataclass(frozen=True)
class ClickFormat:
    """A line layout: field delimiter, fields per line, where the label is, header or not."""
    name: str
    delimiter: bytes
    fields: tuple[str, ...]          # every field in line order (Kaggle's Id included)
    header: bytes | None = None      # the exact first line, without its newline

    @property
    def n_fields(self) -> int:
        return len(self.fields)


FORMATS = {
    "tsv": ClickFormat("tsv", b"\t", FEATURE_COLUMNS),
    "kaggle_csv": ClickFormat("kaggle_csv", b",", ("Id", *FEATURE_COLUMNS),
                              header=",".join(KAGGLE_HEADER).encode()),
}


def get_format(name: str) -> ClickFormat:
    """The :class:`ClickFormat` called ``name``; ValueError for an unknown one."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown click-log format {name!r}; formats are {', '.join(FORMATS)}") from None


def normalize_source(path: str) -> str:
    """The one spelling of a file used in keys: ``file:`` URLs and relative paths → absolute local paths."""
    if path.startswith("file:"):
        return unquote(urlsplit(path).path)
    if "://" in path:
        return path
    return os.path.abspath(path)


def file_key(source_file: str) -> str:
    """16 hex digits of sha256(source file): the row-key prefix shared by a file's rows."""
    return hashlib.sha256(source_file.encode()).hexdigest()[:16]


def row_keys(source_file: str, line_numbers: pa.Array) -> pa.Array:
    """``<file_key>-<line:010d>`` for int64 line numbers (string array, same length)."""
    padded = pc.utf8_lpad(pc.cast(line_numbers, pa.string()), 10, "0")
    return pc.binary_join_element_wise(pa.scalar(file_key(source_file)), padded, "-")


def day_of(source_file: str, day_pattern: str | None) -> int | None:
    """The Criteo day parsed from the file name (first regex group, e.g. ``day_(\\d+)``), else None."""
    if not day_pattern:
        return None
    m = re.search(day_pattern, os.path.basename(source_file))
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------------------ line rules


def classify_line(line: bytes, fmt: ClickFormat) -> tuple[str, str] | None:
    """The first rule ``line`` (bytes, no newline) breaks as ``(reason, detail)``, or None if valid."""
    parts = line.split(fmt.delimiter)
    if len(parts) != fmt.n_fields:
        return "wrong_field_count", f"{len(parts)} fields, expected {fmt.n_fields}"
    for name, value in zip(fmt.fields, parts):
        if name == LABEL:
            if value not in (b"0", b"1"):
                return "bad_label", f"label={_show(value)}"
        elif name[0] == "I":     # I1..I13, and Kaggle's Id
            if value and not (_INT_RE.fullmatch(value) and _INT64[0] <= int(value) <= _INT64[1]):
                return "bad_integer", f"{name}={_show(value)}"
        elif value and not _HASH_RE.fullmatch(value):
            return "bad_hash", f"{name}={_show(value)}"
    return None


def _show(value: bytes) -> str:
    return repr(value.decode("utf-8", "backslashreplace"))


def _decode(line: bytes) -> str:
    return line.decode("utf-8", "backslashreplace")


# ------------------------------------------------------------------------------ blocks


@dataclass
class _Quarantined:
    line_index: list[int]
    raw: list[str]
    reason: list[str]
    detail: list[str]

    def add(self, index: int, raw: bytes, reason: str, detail: str) -> None:
        self.line_index.append(index)
        self.raw.append(_decode(raw))
        self.reason.append(reason)
        self.detail.append(detail)


def _line_bounds(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ends = np.flatnonzero(data == 10)
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    return starts, ends


def _suspect_lines(block: bytes, fmt: ClickFormat) -> np.ndarray | None:
    """Indices of lines that pyarrow.csv would mis-split or mis-parse (empty lines, stray bytes)."""
    stray = block.translate(None, _ALLOWED + fmt.delimiter + b"\n")
    if not stray and b"\n\n" not in block and not block.startswith(b"\n"):
        return None
    data = np.frombuffer(block, np.uint8)
    starts, ends = _line_bounds(data)
    suspect = starts == ends
    if stray:
        ok = np.zeros(256, bool)
        ok[list(_ALLOWED + fmt.delimiter + b"\n")] = True
        bad_pos = np.flatnonzero(~ok[data])
        suspect[np.searchsorted(ends, bad_pos)] = True
    return np.flatnonzero(suspect)


def _without_lines(block: bytes, drop: np.ndarray) -> bytes:
    data = np.frombuffer(block, np.uint8)
    starts, ends = _line_bounds(data)
    keep = np.ones(len(ends), bool)
    keep[drop] = False
    # Runs of kept lines are copied whole: bad lines are rare.
    edges = np.flatnonzero(np.diff(np.concatenate(([0], keep.astype(np.int8), [0]))))
    view = memoryview(block)
    return b"".join(view[starts[a]:ends[b - 1] + 1] for a, b in zip(edges[::2], edges[1::2]))


class _Lines:
    """The lines of a block by index, newline positions found once, on first use."""

    def __init__(self, block: bytes):
        self.block, self.bounds = block, None

    def __call__(self, indices: Sequence[int]) -> list[bytes]:
        if self.bounds is None:
            self.bounds = _line_bounds(np.frombuffer(self.block, np.uint8))
        starts, ends = self.bounds
        return [self.block[starts[i]:ends[i]] for i in indices]


def _byte_arrays(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int32[n+1] rebased to 0, data uint8[...]) of a binary array."""
    buffers = col.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, len(col) + 1, col.offset * 4)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets - offsets[0], data[offsets[0]:offsets[-1]]


def _check_label(col: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(bad row mask, int32 labels) of a binary label column."""
    ok = pc.fill_null(pc.is_in(col, value_set=pa.array([b"0", b"1"], pa.binary())), False)
    labels = pc.cast(pc.equal(col, pa.scalar(b"1", pa.binary())), pa.int32())
    return ~np.asarray(ok.to_numpy(zero_copy_only=False), bool), labels


def _check_hashes(col: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(bad row mask, lower-case string column) of a binary C column."""
    lengths = pc.binary_length(col)
    bad = np.asarray(pc.fill_null(pc.not_equal(lengths, 8), False).to_numpy(zero_copy_only=False), bool)
    offsets, data = _byte_arrays(col)
    if data.tobytes().translate(None, _LOWER_HEX):
        hexdigit = np.zeros(256, bool)
        hexdigit[list(_ALLOWED[:-1])] = True            # 0-9 a-f A-F
        pos = np.flatnonzero(~hexdigit[data])
        bad[np.searchsorted(offsets, pos, side="right") - 1] = True
        col = pc.ascii_lower(col.view(pa.string())).cast(pa.binary())
    return bad, col.view(pa.string())


def _check_ints(col: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(bad row mask, int64 column with bad rows null) of a binary I column (the slow path)."""
    text = col.view(pa.string()) if col.type == pa.binary() else col
    match = pc.fill_null(pc.match_substring_regex(text, r"^-?[0-9]+$"), True)
    bad = ~np.asarray(match.to_numpy(zero_copy_only=False), bool)
    long_vals = np.flatnonzero(np.asarray(pc.fill_null(pc.greater(pc.binary_length(col), 18), False)
                                          .to_numpy(zero_copy_only=False), bool) & ~bad)
    for i in long_vals:  # int64 range, checked exactly only for the rare very long digit strings
        if not _INT64[0] <= int(col[i].as_py()) <= _INT64[1]:
            bad[i] = True
    clean = pc.if_else(pa.array(bad), pa.scalar(None, pa.string()), text)
    return bad, pc.cast(clean, pa.int64())


def _csv_options(fmt: ClickFormat, int_type: pa.DataType, invalid: list):
    def on_invalid(row) -> str:
        invalid.append((row.number, row.actual_columns))
        return "skip"

    types = {name: int_type if name[0] == "I" else pa.binary() for name in fmt.fields}
    return (
        pacsv.ReadOptions(column_names=list(fmt.fields), use_threads=False, block_size=1 << 26),
        pacsv.ParseOptions(delimiter=fmt.delimiter.decode(), quote_char=False, escape_char=False,
                           double_quote=False, newlines_in_values=False, ignore_empty_lines=False,
                           invalid_row_handler=on_invalid),
        pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True,
                             quoted_strings_can_be_null=False),
    )


def _read_block(block: bytes, fmt: ClickFormat) -> tuple[pa.Table, list[tuple[int, int]], bool]:
    """Parse a block of clean lines: (table, [(1-based row number, fields) of skipped rows], typed?).

    The integer columns are parsed as int64 directly; when one fails to convert, the block is
    parsed again with them as bytes (``typed`` False) for :func:`_check_ints` to find the bad rows.
    """
    invalid: list[tuple[int, int]] = []
    try:
        return pacsv.read_csv(pa.BufferReader(block), *_csv_options(fmt, pa.int64(), invalid)), invalid, True
    except pa.ArrowInvalid:
        invalid = []
        return pacsv.read_csv(pa.BufferReader(block), *_csv_options(fmt, pa.binary(), invalid)), invalid, False


def parse_block(block: bytes, fmt: ClickFormat, source_file: str, first_line: int, day: int | None
                ) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """Parse whole lines (``block`` ends with ``\\n``) whose first is line ``first_line`` (1-based).

    Returns ``(rows, quarantine)``, two :data:`ROW_SCHEMA` batches; every line of the block is in
    exactly one of them.
    """
    bad = _Quarantined([], [], [], [])
    n_lines = block.count(b"\n")
    line_index = np.arange(n_lines, dtype=np.int64)
    lines_at = _Lines(block)
    suspects = _suspect_lines(block, fmt)
    if suspects is not None and suspects.size:
        for i, raw in zip(suspects.tolist(), lines_at(suspects)):
            bad.add(i, raw, *(classify_line(raw, fmt) or ("wrong_field_count", "empty line")))
        block = _without_lines(block, suspects)
        line_index = np.delete(line_index, suspects)

    table, invalid, fast = _read_block(block, fmt) if block else (None, [], True)
    if invalid:
        skipped = np.array([num - 1 for num, _ in invalid], np.int64)
        for i, raw in zip(line_index[skipped].tolist(), lines_at(line_index[skipped])):
            bad.add(i, raw, *(classify_line(raw, fmt) or ("wrong_field_count", "")))
        line_index = np.delete(line_index, skipped)

    if table is None or table.num_rows == 0:
        rows = _row_batch({}, np.zeros(0, np.int64), source_file, day)
        return rows, _quarantine_batch(bad, first_line, source_file, day)

    table = table.combine_chunks()
    flagged = np.zeros(table.num_rows, bool)
    columns: dict[str, pa.Array] = {}
    for name in fmt.fields:  # in line order: the first failing field names the reason
        col = table.column(name).chunk(0) if table.column(name).num_chunks else pa.array([], table.schema.field(name).type)
        if name == LABEL:
            mask, columns[name], reason = *_check_label(col), "bad_label"
        elif name[0] == "I":
            if fast:  # pyarrow already parsed every value of the block as int64
                columns[name] = col
                continue
            mask, columns[name], reason = *_check_ints(col), "bad_integer"
        else:
            mask, columns[name], reason = *_check_hashes(col), "bad_hash"
        new = np.flatnonzero(mask & ~flagged)
        if new.size:
            flagged[new] = True
            raws = lines_at(line_index[new])
            for r, i, raw in zip(new.tolist(), line_index[new].tolist(), raws):
                bad.add(i, raw, reason, f"{name}={_show(col[r].as_py() or b'')}")
    if flagged.any():
        keep = pa.array(~flagged)
        columns = {k: pc.filter(v, keep) for k, v in columns.items()}
        line_index = line_index[~flagged]
    return (_row_batch(columns, line_index + first_line, source_file, day),
            _quarantine_batch(bad, first_line, source_file, day))


def _repeat(value: str, n: int) -> pa.Array:
    """A string array holding ``value`` n times, built from buffers (no Python loop)."""
    raw = value.encode()
    offsets = np.arange(0, len(raw) * n + 1, len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _row_batch(columns: dict[str, pa.Array], line_numbers: np.ndarray, source_file: str, day: int | None
               ) -> pa.RecordBatch:
    n = len(line_numbers)
    lines = pa.array(line_numbers, pa.int64())
    arrays = {
        "kind": _repeat("row", n),
        "row_key": row_keys(source_file, lines),
        **{name: columns.get(name, pa.nulls(n, ROW_SCHEMA.field(name).type)) for name in FEATURE_COLUMNS},
        "source_file": _repeat(source_file, n),
        "line_number": lines,
        "day": pa.nulls(n, pa.int32()) if day is None else pa.array(np.full(n, day, np.int32)),
        "raw_line": pa.nulls(n, pa.string()),
        "reason": pa.nulls(n, pa.string()),
        "detail": pa.nulls(n, pa.string()),
    }
    return pa.RecordBatch.from_arrays([arrays[f.name] for f in ROW_SCHEMA], schema=ROW_SCHEMA)


def _quarantine_batch(bad: _Quarantined, first_line: int, source_file: str, day: int | None) -> pa.RecordBatch:
    n = len(bad.line_index)
    order = np.argsort(np.array(bad.line_index, np.int64), kind="stable")
    lines = pa.array(np.array(bad.line_index, np.int64)[order] + first_line, pa.int64())
    pick = lambda values: pa.array([values[i] for i in order], pa.string())  # noqa: E731
    arrays = {
        "kind": pa.array(["quarantine"] * n, pa.string()),
        "row_key": row_keys(source_file, lines),
        "source_file": pa.array([source_file] * n, pa.string()),
        "line_number": lines,
        "day": pa.array([day] * n, pa.int32()),
        "raw_line": pick(bad.raw),
        "reason": pick(bad.reason),
        "detail": pick(bad.detail),
    }
    return pa.RecordBatch.from_arrays(
        [arrays[f.name] if f.name in arrays else pa.nulls(n, f.type) for f in ROW_SCHEMA], schema=ROW_SCHEMA)


# ------------------------------------------------------------------------------ files


def _open(path: str):
    if "://" in path:
        import fsspec

        return fsspec.open(path, "rb", compression="infer").open()
    return pa.input_stream(path, compression="detect")


def iter_blocks(path: str, block_bytes: int = 16 << 20) -> Iterator[bytes]:
    """Whole-line blocks of about ``block_bytes`` bytes (decompressed), each ending with ``\\n``.

    A final line without a newline gets one. Raises OSError when the file cannot be read or
    decompressed.
    """
    carry = b""
    with _open(path) as stream:
        while True:
            chunk = stream.read(block_bytes)
            if not chunk:
                break
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
                continue
            if cut == len(buf) - 1:
                carry = b""
                yield buf
            else:
                carry = buf[cut + 1:]
                yield buf[:cut + 1]
    if carry:
        yield carry + b"\n"


def parse_file(path: str, fmt: ClickFormat | str = "tsv", *, block_bytes: int = 16 << 20,
               day_pattern: str | None = r"day_(\d+)") -> Iterator[pa.RecordBatch]:
    """Row and quarantine batches (:data:`ROW_SCHEMA`) of one file, then its summary row.

    ``path`` is a local path, a ``file:`` URL or an fsspec URL; the ``source_file`` written is
    :func:`normalize_source` of it. Raises OSError when the file cannot be read.
    """
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    source = normalize_source(path)
    day = day_of(source, day_pattern)
    counts = {"lines": 0, "rows": 0, "quarantined": 0, "header_lines": 0}
    first_line = 1
    for block in iter_blocks(path if "://" in path else source, block_bytes):
        if fmt.header is not None and first_line == 1:
            cut = block.index(b"\n")
            header = block[:cut]
            if header == fmt.header:
                counts["header_lines"] = 1
            else:
                bad = _Quarantined([], [], [], [])
                bad.add(0, header, "bad_header", f"expected {fmt.header[:40].decode()}...")
                q = _quarantine_batch(bad, 1, source, day)
                counts["quarantined"] += 1
                yield q
            block, first_line = block[cut + 1:], 2
            counts["lines"] += 1
            if not block:
                continue
        rows, bad = parse_block(block, fmt, source, first_line, day)
        n_lines = rows.num_rows + bad.num_rows   # every line of the block is in one of them
        counts["lines"] += n_lines
        counts["rows"] += rows.num_rows
        counts["quarantined"] += bad.num_rows
        first_line += n_lines
        if rows.num_rows:
            yield rows
        if bad.num_rows:
            yield bad
    yield summary_batch(source, day, counts)


def summary_batch(source_file: str, day: int | None, counts: dict[str, int]) -> pa.RecordBatch:
    """The one ``kind="summary"`` row of a file: ``detail`` is the JSON of ``counts``."""
    values = {"kind": ["summary"], "source_file": [source_file], "day": [day], "detail": [json.dumps(counts, sort_keys=True)]}
    return pa.RecordBatch.from_arrays(
        [pa.array(values[f.name], f.type) if f.name in values else pa.nulls(1, f.type) for f in ROW_SCHEMA],
        schema=ROW_SCHEMA)


def parse_files_to_batches(paths: Iterable[str], fmt: str = "tsv", block_bytes: int = 16 << 20,
                           day_pattern: str | None = r"day_(\d+)") -> Iterator[pa.RecordBatch]:
    """:func:`parse_file` over several files, in order (what a Spark task runs)."""
    for path in paths:
        yield from parse_file(path, fmt, block_bytes=block_bytes, day_pattern=day_pattern)


# ------------------------------------------------------------------------------ features (DLRM)


def dense_features(ints: Sequence[pa.Array]) -> np.ndarray:
    """float32[n, 13]: ``log(1 + max(x, 0))`` per I column, missing → 0 (DLRM / TorchRec Criteo).

    ``ints`` are the 13 int64 columns (nulls allowed). Follows the preprocessing of the DLRM
    reference (facebookresearch/dlrm ``data_utils.py``: ``X_int[X_int < 0] = 0; log(X_int + 1)``).
    """
    out = np.empty((len(ints[0]) if ints else 0, len(ints)), np.float32)
    for j, col in enumerate(ints):
        x = np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), np.float64)
        out[:, j] = np.log1p(np.maximum(x, 0.0))
    return out


def sparse_ids(values: Sequence[pa.Array], ids: Sequence[pa.Array]) -> np.ndarray:
    """int32[n, 26]: per C column, the vocabulary id; :data:`EMPTY_ID` where the value is empty,
    :data:`OOV_ID` where it has no vocabulary id (rarer than the frequency threshold).

    ``values`` are the raw C columns (only their nulls are used), ``ids`` the looked-up ids (null =
    not in the vocabulary), both of length n.
    """
    out = np.empty((len(values[0]) if values else 0, len(values)), np.int32)
    for j, (value, vid) in enumerate(zip(values, ids)):
        resolved = pc.if_else(pc.is_null(value), EMPTY_ID, pc.fill_null(vid, OOV_ID))
        out[:, j] = np.asarray(resolved.to_numpy(zero_copy_only=False), np.int32)
    return out


#: silver.click_features' columns, every one nullable (the catalog's ``nullable_arrow``).
FEATURE_SCHEMA = SILVER_CLICK_FEATURES.nullable_arrow


def feature_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Bronze rows with looked-up ids → :data:`FEATURE_SCHEMA` rows (``dense`` float32[13],
    ``sparse`` int32[26]).

    Each input batch holds ``row_key``, ``day``, ``label``, ``I1..I13``, ``C1..C26`` (raw values)
    and ``C1_id..C26_id`` (vocabulary id or null).
    """
    for batch in batches:
        n = batch.num_rows
        dense = dense_features([batch.column(c) for c in INT_COLUMNS])
        sparse = sparse_ids([batch.column(c) for c in CAT_COLUMNS], [batch.column(f"{c}_id") for c in CAT_COLUMNS])
        step = np.arange(0, n + 1, dtype=np.int32)
        yield pa.RecordBatch.from_arrays([
            batch.column("row_key"), batch.column("day"), batch.column(LABEL),
            pa.ListArray.from_arrays(step * len(INT_COLUMNS), pa.array(dense.reshape(-1))),
            pa.ListArray.from_arrays(step * len(CAT_COLUMNS), pa.array(sparse.reshape(-1))),
        ], schema=FEATURE_SCHEMA)
