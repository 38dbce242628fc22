"""Elastic resume of the token loader on real pages: a ``state_dict()`` taken at world size W,
resumed at W' (2 → 3, 4 → 2, and on again), with DataLoader workers, delivers every remaining
sequence exactly once over the new ranks, deterministically.

The table: the pages of the real WARC files in ../shared/data, tokenized and packed by crawlake's
kernel into sequences of 32 + 1 tokens (~1,500 sequences), written by deltalake as three files
with row groups of 50 rows.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
from conftest import real_file
from deltalake import WriterProperties, write_deltalake

from pipelines.loaders import DeltaLoader, TokenSequenceDataset

WARCS = ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz", "cc-main-2024-22-whirlwind.warc.gz")
KW = dict(extra_columns=["seq_id"], seed=3)


@pytest.fixture(scope="module")
def real_table(tmp_path_factory) -> tuple[str, list[str], dict]:
    from pipelines.config import TokenizeConfig
    from pipelines.kernels.tokens import pack_batches
    from pipelines.kernels.warc import parse_warc_file

    texts = [r["text"] for name in WARCS for r in parse_warc_file(real_file(name)).rows if r["kind"] == "document"]
    docs = pa.RecordBatch.from_pylist([{"pack_group": 0, "doc_id": f"{i:06d}", "text": t} for i, t in enumerate(texts)])
    seqs = pa.Table.from_batches(list(pack_batches([docs], TokenizeConfig(seq_len=32))))
    seqs = seqs.set_column(seqs.schema.get_field_index("seq_id"), "seq_id",
                           pa.array([f"s{i:06d}" for i in range(seqs.num_rows)]))
    uri = str(tmp_path_factory.mktemp("elastic") / "token_sequences")
    third = seqs.num_rows // 3
    for k, piece in enumerate((seqs.slice(0, third), seqs.slice(third, third), seqs.slice(2 * third))):
        write_deltalake(uri, piece, mode="error" if k == 0 else "append",
                        writer_properties=WriterProperties(max_row_group_size=50))
    ids = seqs.column("seq_id").to_pylist()
    rows = {sid: ids_ for sid, ids_ in zip(ids, seqs.column("input_ids").to_pylist())}
    return uri, ids, rows


def _ids(batch) -> list[str]:
    return list(batch["seq_id"]) if isinstance(batch["seq_id"], list) else [batch["seq_id"]]


def take(table: str, world: int, rank: int, workers: int, batches: int | None, state=None, **kw):
    """Run one rank: optionally load ``state``, take ``batches`` (None: to the end). Returns
    (sequence ids delivered, batches delivered, state_dict as a checkpoint holds it)."""
    ds = TokenSequenceDataset(table, rank=rank, world_size=world, **{**KW, **kw})
    if state is not None:
        ds.load_state_dict(state)
    got, n = [], 0
    if batches != 0:
        for batch in DeltaLoader(ds, num_workers=workers):
            got += _ids(batch)
            n += 1
            if batches is not None and n == batches:
                break
    return got, n, json.loads(json.dumps(ds.state_dict()))


def phase(table: str, world: int, workers: int, stops: list[int | None], states=None, **kw):
    """All ranks of one world: per rank its delivered ids; plus every rank's state."""
    out = [take(table, world, r, workers, stops[r], states, **kw) for r in range(world)]
    return [o[0] for o in out], [o[2] for o in out]


def _exactly_once(parts: list[list[str]], everything: list[str]) -> None:
    seen = Counter(s for part in parts for s in part)
    assert sorted(seen) == sorted(everything), "some sequence is missing or unknown"
    assert set(seen.values()) == {1}, [s for s, c in seen.items() if c > 1][:5]


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize("old_world,new_world,old_workers,new_workers,batch,new_batch", [
    (2, 3, 2, 2, 16, 16),   # 2 -> 3 ranks, 2 workers each
    (4, 2, 2, 3, 8, 16),    # 4 -> 2 ranks, 2 -> 3 workers, the global batch kept (4 x 8 = 2 x 16)
])
def test_elastic_resume_delivers_every_remaining_sequence_once(real_table, old_world, new_world, old_workers,
                                                              new_workers, batch, new_batch):
    table, everything, rows = real_table
    assert len(everything) > 1000
    # ranks stopped at different points (a lockstep run stops them at the same one)
    stops = [5 + 3 * r for r in range(old_world)]
    before, states = phase(table, old_world, old_workers, stops, batch_size=batch, shuffle_buffer=40)
    assert [s["consumed"] for s in states] == stops
    assert [len(b) for b in before] == [n * batch for n in stops]

    after, new_states = phase(table, new_world, new_workers, [None] * new_world, states,
                              batch_size=new_batch, shuffle_buffer=64)
    _exactly_once(before + after, everything)
    sizes = [len(a) for a in after]
    assert max(sizes) - min(sizes) <= 1          # the remainder is split evenly
    for s in new_states:   # each new rank went to the end of its share; len() is that share's batches
        assert s["consumed"] == len(_loaded(table, s, new_world, new_batch)) == -(-len(after[s["rank"]]) // new_batch)

    # deterministic: the same states on the same new layout give the same order, rank by rank
    again, _ = phase(table, new_world, new_workers, [None] * new_world, list(reversed(states)),
                     batch_size=new_batch, shuffle_buffer=64)
    assert again == after

    # the samples are the table's rows: input_ids / labels of a delivered batch
    ds = TokenSequenceDataset(table, rank=0, world_size=new_world, batch_size=new_batch, shuffle_buffer=64, **KW)
    ds.load_state_dict(states)
    first = next(iter(DeltaLoader(ds, num_workers=new_workers)))
    for k, sid in enumerate(first["seq_id"]):
        assert first["input_ids"][k].tolist() == rows[sid][:-1]


def _loaded(table, state, world, batch):
    ds = TokenSequenceDataset(table, rank=state["rank"], world_size=world, batch_size=batch, shuffle_buffer=64, **KW)
    ds.load_state_dict(state)
    return ds


def test_elastic_resume_chains_and_resumes_in_place(real_table):
    """4 ranks → 2 (stopped mid-way, checkpointed) → 3, and a same-layout resume in the middle:
    still every sequence exactly once."""
    table, everything, _ = real_table
    kw = dict(batch_size=8, shuffle_buffer=24)
    a, states_a = phase(table, 4, 2, [3, 4, 5, 6], **kw)
    # part two at 2 ranks: rank 0 stops after 7 batches, is restarted in place and stops again
    b0, _, st0 = take(table, 2, 0, 2, 7, states_a, **kw)
    b0_more, _, st0 = take(table, 2, 0, 2, 4, st0, **kw)
    b1, _, st1 = take(table, 2, 1, 0, 9, states_a, **kw)     # rank 1 iterates in process
    assert st0["consumed"] == 11 and len(st0["history"]) == 1
    c, _ = phase(table, 3, 2, [None] * 3, [st0, st1], batch_size=4, shuffle_buffer=16)
    _exactly_once(a + [b0 + b0_more, b1] + c, everything)
    # resuming rank 0 in place gave what an uninterrupted part two would have
    whole, _, _ = take(table, 2, 0, 2, 11, states_a, **kw)
    assert b0 + b0_more == whole


def test_elastic_states_must_be_one_moment_of_one_world(real_table):
    table, _, _ = real_table
    _, states = phase(table, 2, 0, [2, 2], batch_size=8)
    ds = TokenSequenceDataset(table, rank=0, world_size=3, batch_size=8, **KW)
    with pytest.raises(ValueError, match="one state per rank"):
        ds.load_state_dict(states[:1])
    with pytest.raises(ValueError, match="differ in epoch"):
        ds.load_state_dict([states[0], {**states[1], "epoch": 1}])
    with pytest.raises(ValueError, match="seed"):
        TokenSequenceDataset(table, rank=0, world_size=3, batch_size=8, extra_columns=["seq_id"], seed=4) \
            .load_state_dict(states)
    with pytest.raises(ValueError, match="list"):   # one rank's state on another layout: say how
        ds.load_state_dict(states[0])
