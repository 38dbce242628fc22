"""Packing keeps every token, in order, with correct boundaries (no Spark)."""

import pyarrow as pa

from pipelines.config import TokenizeConfig
from pipelines.kernels.tokens import count_tokens, load_tokenizer, pack_batches, separator_ids


def test_packing_conserves_tokens_and_marks_boundaries():
    texts = {f"d{i:02d}": f"Document number {i} says something. " * (i + 1) for i in range(12)}
    rows = [{"pack_group": g, "doc_id": d, "text": t} for g in (0, 1) for d, t in sorted(texts.items()) if int(d[1:]) % 2 == g]
    params = TokenizeConfig(seq_len=31)
    sep, pad = separator_ids(params)
    seqs = [r for b in pack_batches([pa.RecordBatch.from_pylist(rows)], params) for r in b.to_pylist()]
    assert all(len(s["input_ids"]) == 32 for s in seqs)
    assert sum(s["num_tokens"] for s in seqs) == sum(count_tokens(list(texts.values()))) + len(texts)  # + separators
    assert sorted(d for s in seqs for d in s["doc_ids"]) == sorted(texts)
    tok = load_tokenizer("default")
    for g in (0, 1):
        stream = [t for s in seqs if s["pack_group"] == g for t in s["input_ids"][: s["num_tokens"]]]
        expected = [t for r in rows if r["pack_group"] == g for t in tok.encode(r["text"], add_special_tokens=False).ids + [sep]]
        assert stream == expected
    for s in seqs:
        for offset in s["doc_boundaries"]:
            assert offset == 0 or s["input_ids"][offset - 1] == sep
        assert all(t == pad for t in s["input_ids"][s["num_tokens"]:])
