"""remove_documents: cutting documents out of packed sequences, and appending with first_index."""

import random

import pyarrow as pa
import pytest

from pipelines.config import TokenizeConfig
from pipelines.kernels.tokens import (
    document_rows, load_tokenizer, pack_batches, remove_documents, separator_ids)

PARAMS = TokenizeConfig(seq_len=15)
WORDS = "the lake keeps every page of the crawl packed into short training sequences".split()


def _docs(n: int, seed: int = 7) -> dict[str, str]:
    rng = random.Random(seed)
    return {f"d{k:03d}": " ".join(rng.choices(WORDS, k=rng.randint(0, 40))) for k in range(n)}


def _pack(docs: dict[str, str], groups: int = 2, first_index=None) -> pa.Table:
    rows = sorted(({"pack_group": int(d[1:]) % groups, "doc_id": d, "text": t}
                   for d, t in docs.items()), key=lambda r: (r["pack_group"], r["doc_id"]))
    batch = pa.RecordBatch.from_pylist(rows)
    return pa.Table.from_batches(list(pack_batches([batch], PARAMS, first_index)))


def _streams(seqs: list[dict]) -> dict[str, list[int]]:
    """Each document's tokens, separator included, read back by walking each group's rows."""
    out: dict[str, list[int]] = {}
    for group in {s["pack_group"] for s in seqs}:
        rows = sorted((s for s in seqs if s["pack_group"] == group), key=lambda s: s["seq_index"])
        current, left = None, 0
        for s in rows:
            ids, pos = s["input_ids"][: s["num_tokens"]], 0
            if left:
                take = min(left, len(ids))
                out[current] += ids[:take]
                pos, left = take, left - take
            for offset, doc, n in zip(s["doc_boundaries"], s["doc_ids"], s["doc_num_tokens"]):
                assert offset == pos
                take = min(n + 1, len(ids) - pos)
                out[doc] = ids[pos: pos + take]
                pos, current, left = pos + take, doc, n + 1 - take
            assert pos == len(ids)
    return out


def _expected(docs: dict[str, str]) -> dict[str, list[int]]:
    tok = load_tokenizer(PARAMS.tokenizer)
    sep, _ = separator_ids(PARAMS)
    return {d: tok.encode(t, add_special_tokens=False).ids + [sep] for d, t in docs.items()}


@pytest.mark.parametrize("seed", range(6))
def test_removal_keeps_other_documents_exactly_and_touches_only_their_rows(seed):
    docs = _docs(30, seed)
    seqs = _pack(docs)
    rng = random.Random(seed)
    removed = set(rng.sample(sorted(docs), 8))
    _, pad = separator_ids(PARAMS)
    rewritten, deleted = remove_documents(seqs, removed, pad)

    before = {s["seq_id"]: s for s in seqs.to_pylist()}
    after = dict(before)
    for sid in deleted:
        del after[sid]
    for s in rewritten.to_pylist():
        assert s["seq_id"] in before and s["seq_id"] not in deleted
        assert len(s["input_ids"]) == PARAMS.seq_len + 1 and 0 < s["num_tokens"] < before[s["seq_id"]]["num_tokens"]
        assert all(t == pad for t in s["input_ids"][s["num_tokens"]:])
        after[s["seq_id"]] = s
    touched = set(deleted) | set(rewritten.column("seq_id").to_pylist())
    # rows untouched are identical
    streams_before = _streams(list(before.values()))
    assert all(after[sid] == before[sid] for sid in after if sid not in touched)
    kept = {d: t for d, t in docs.items() if d not in removed}
    assert _streams(list(after.values())) == _expected(kept) == {d: streams_before[d] for d in kept}
    # conservation: tokens == documents' tokens + one separator each
    rows = list(after.values())
    doc_rows = pa.Table.from_batches([document_rows(pa.RecordBatch.from_pylist(rows, schema=seqs.schema))])
    assert sum(s["num_tokens"] for s in rows) == sum(doc_rows.column("num_tokens").to_pylist()) + doc_rows.num_rows
    assert sorted(doc_rows.column("doc_id").to_pylist()) == sorted(kept)


def test_removal_twice_walks_partly_filled_rows_and_nothing_removed_touches_nothing():
    docs = _docs(20, 3)
    seqs = _pack(docs)
    _, pad = separator_ids(PARAMS)

    def apply(table, removed):
        rewritten, deleted = remove_documents(table, removed, pad)
        rows = {s["seq_id"]: s for s in table.to_pylist() if s["seq_id"] not in deleted}
        rows.update({s["seq_id"]: s for s in rewritten.to_pylist()})
        return pa.Table.from_pylist(list(rows.values()), schema=table.schema)

    once = apply(seqs, {"d002", "d007"})
    twice = apply(once, {"d004", "d011", "d016"})
    kept = {d: t for d, t in docs.items() if d not in {"d002", "d007", "d004", "d011", "d016"}}
    assert _streams(twice.to_pylist()) == _expected(kept)
    rewritten, deleted = remove_documents(twice, set(), pad)
    assert rewritten.num_rows == 0 and deleted == []


def test_a_row_of_only_removed_tokens_is_deleted():
    docs = {"d000": " ".join(["lake"] * 60), "d002": "page"}   # d000 fills whole rows
    seqs = _pack(docs)
    _, pad = separator_ids(PARAMS)
    rewritten, deleted = remove_documents(seqs, {"d000"}, pad)
    full = [s["seq_id"] for s in seqs.to_pylist() if s["doc_ids"] in ([], ["d000"])]
    assert deleted == full and len(full) >= 2
    assert _streams(rewritten.to_pylist()) == _expected({"d002": "page"})


def test_appended_sequences_continue_each_groups_index():
    seqs = _pack(_docs(6), first_index={0: 5, 1: 9})
    first = {g: min(s["seq_index"] for s in seqs.to_pylist() if s["pack_group"] == g) for g in (0, 1)}
    assert first == {0: 5, 1: 9}
    assert all(s["seq_id"] == f"{s['pack_group']:05d}-{s['seq_index']:08d}" for s in seqs.to_pylist())


def test_an_inconsistent_row_is_refused():
    seqs = _pack(_docs(6)).to_pylist()
    seqs[0]["doc_boundaries"] = [b + 1 for b in seqs[0]["doc_boundaries"]]
    _, pad = separator_ids(PARAMS)
    with pytest.raises(ValueError, match="starts at"):
        remove_documents(pa.Table.from_pylist(seqs), {"d000"}, pad)
