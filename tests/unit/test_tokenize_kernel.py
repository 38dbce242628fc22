"""The tokenize kernel alone (no Spark): packing across Arrow batches, and BPE training from counts."""

from __future__ import annotations

import pyarrow as pa
import pytest
from conftest import real_file

from pipelines.config import TokenizeConfig
from pipelines.kernels.tokens import (
    TRAINED_SPECIAL_TOKENS,
    count_pretokens,
    count_tokens,
    load_tokenizer,
    pack_batches,
    separator_ids,
    train_bpe,
)
from pipelines.kernels.warc import parse_warc_file


@pytest.fixture(scope="module")
def real_texts() -> list[str]:
    rows = parse_warc_file(real_file("ia-heritrix-2008-example.warc.gz")).rows
    return [r["text"] for r in rows if r["kind"] == "document"][:60]


def packed(rows: list[dict], params: TokenizeConfig, batch_rows: int) -> list[dict]:
    batches = [pa.RecordBatch.from_pylist(rows[i:i + batch_rows]) for i in range(0, len(rows), batch_rows)]
    return [r for b in pack_batches(batches, params) for r in b.to_pylist()]


@pytest.mark.parametrize("batch_rows", [1, 7, 1000])
def test_packing_is_the_same_whatever_the_arrow_batches(real_texts, batch_rows):
    rows = [{"pack_group": g, "doc_id": f"d{i:03d}", "text": t}
            for g in (0, 1, 2) for i, t in enumerate(real_texts) if i % 3 == g]
    rows.append({"pack_group": 3, "doc_id": "empty", "text": ""})  # no tokens: still one separator
    params = TokenizeConfig(seq_len=127)
    sep, pad = separator_ids(params)
    seqs = packed(rows, params, batch_rows)
    assert seqs == packed(rows, params, 10_000)
    assert sum(s["num_tokens"] for s in seqs) == sum(count_tokens(real_texts)) + len(real_texts) + 1
    lengths = dict(zip((r["doc_id"] for r in rows), count_tokens([r["text"] for r in rows])))
    starts = {d: n for s in seqs for d, n in zip(s["doc_ids"], s["doc_num_tokens"])}
    assert starts == lengths
    for g in (0, 1, 2, 3):
        group = [s for s in seqs if s["pack_group"] == g]
        assert [s["seq_index"] for s in group] == list(range(len(group)))
        assert all(s["num_tokens"] == 128 for s in group[:-1]) and 0 < group[-1]["num_tokens"] <= 128
        assert all(t == pad for t in group[-1]["input_ids"][group[-1]["num_tokens"]:])
    assert [s for s in seqs if s["pack_group"] == 3] == [{
        "seq_id": "00003-00000000", "pack_group": 3, "seq_index": 0, "input_ids": [sep] + [pad] * 127,
        "num_tokens": 1, "doc_boundaries": [0], "doc_ids": ["empty"], "doc_num_tokens": [0], "tokenizer": "default"}]


def test_unsorted_input_is_refused():
    rows = [{"pack_group": 0, "doc_id": "b", "text": "x"}, {"pack_group": 0, "doc_id": "a", "text": "y"}]
    with pytest.raises(ValueError, match="sorted"):
        list(pack_batches([pa.RecordBatch.from_pylist(rows)], TokenizeConfig(seq_len=8)))
    with pytest.raises(ValueError, match="sorted"):  # across batches too
        list(pack_batches([pa.RecordBatch.from_pylist(rows[:1]), pa.RecordBatch.from_pylist(rows[1:])], TokenizeConfig(seq_len=8)))


def test_a_tokenizer_without_separator_is_refused(tmp_path, real_texts):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(real_texts[:5], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="separator"):
        separator_ids(TokenizeConfig(tokenizer=str(tmp_path)))
    assert separator_ids(TokenizeConfig(tokenizer=str(tmp_path), separator_token="[UNK]"))[0] == tok.token_to_id("[UNK]")
    with pytest.raises(ValueError, match="not found"):
        load_tokenizer(str(tmp_path / "missing" / "tokenizer.json"))


def test_bpe_from_counts_equals_bpe_trained_on_the_texts(real_texts):
    """train_bpe sees only (pre-token, count) pairs; HF's trainer on the raw texts must agree."""
    from tokenizers import Tokenizer, decoders, models, trainers

    batches = [pa.RecordBatch.from_pydict({"text": real_texts[i:i + 9]}) for i in range(0, len(real_texts), 9)]
    counts: dict[str, int] = {}
    for b in count_pretokens(batches):  # per-batch counts, summed as the engine's groupBy does
        for word, n in zip(b.column("word").to_pylist(), b.column("count").to_pylist()):
            counts[word] = counts.get(word, 0) + n
    ours = train_bpe(sorted(counts.items()), vocab_size=700, min_frequency=2)

    from pipelines.kernels.tokens import _byte_level_pretokenizer

    ref = Tokenizer(models.BPE())
    ref.pre_tokenizer = _byte_level_pretokenizer()
    ref.decoder = decoders.ByteLevel()
    ref.train_from_iterator(real_texts, trainers.BpeTrainer(
        vocab_size=700, min_frequency=2, special_tokens=list(TRAINED_SPECIAL_TOKENS),
        initial_alphabet=_byte_level_pretokenizer().alphabet(), show_progress=False))
    assert ours.get_vocab() == ref.get_vocab()
    assert ours.get_vocab_size() == 700
    for text in real_texts[:10]:
        assert ours.encode(text).ids == ref.encode(text).ids
        assert ours.decode(ours.encode(text).ids) == text
    assert separator_ids(TokenizeConfig(tokenizer="default"))  # unchanged default
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe([("a", 1)], vocab_size=100)
