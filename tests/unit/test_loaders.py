"""pipelines.loaders over small Delta tables written with deltalake (no Spark, no JVM).

The table holds ROWS sequences of WIDTH = seq_len + 1 tokens in three files (two commits plus a
third), with row groups of 7 rows, so blocks are many and uneven; row i's tokens are
``i * 100 + position`` and every 9th row is padded after ``num_tokens``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from deltalake import WriterProperties, write_deltalake
from torch.utils.data import DataLoader

from pipelines.loaders import IGNORE_INDEX, DeltaLoader, DeltaRowDataset, TokenSequenceDataset
from pipelines.loaders.base import delivered_per_worker

from conftest import REPO
ROWS, WIDTH, PAD = 101, 9, 0


def _num_tokens(i: int) -> int:
    return 1 + i % WIDTH if i % 9 == 4 else WIDTH


def sequences(start: int, stop: int) -> pa.Table:
    rows = range(start, stop)
    ids = [[i * 100 + p if p < _num_tokens(i) else PAD for p in range(WIDTH)] for i in rows]
    return pa.table({
        "seq_id": pa.array([f"s{i:04d}" for i in rows]),
        "input_ids": pa.array(ids, pa.list_(pa.int32())),
        "num_tokens": pa.array([_num_tokens(i) for i in rows], pa.int32()),
        "pack_group": pa.array([i % 3 for i in rows], pa.int32()),
    })


def write(uri: Path, table: pa.Table, mode: str = "append") -> None:
    write_deltalake(str(uri), table, mode=mode, writer_properties=WriterProperties(max_row_group_size=7))


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    uri = tmp_path_factory.mktemp("loaders") / "token_sequences"
    write(uri, sequences(0, 40), mode="error")
    write(uri, sequences(40, 77))
    write(uri, sequences(77, ROWS))
    return str(uri)


ALL_IDS = [f"s{i:04d}" for i in range(ROWS)]


def seq_ids(items) -> list[str]:
    out = []
    for item in items:
        out.extend(item["seq_id"] if isinstance(item["seq_id"], list) else [item["seq_id"]])
    return out


def epoch_ids(table: str, *, num_workers: int = 0, **kwargs) -> list[str]:
    ds = TokenSequenceDataset(table, extra_columns=["seq_id"], **kwargs)
    return seq_ids(DeltaLoader(ds, num_workers=num_workers))


def test_importable_without_pyspark(table):
    code = textwrap.dedent(f"""
        import sys
        sys.modules["pyspark"] = None  # any import of pyspark now raises ImportError
        from pipelines.loaders import TokenSequenceDataset
        ds = TokenSequenceDataset({table!r}, batch_size=8)
        print(sum(b["input_ids"].shape[0] for b in ds))
        assert not any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules if sys.modules[m] is not None)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(ROWS)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_sequence_exactly_once(table, world_size, num_workers):
    per_rank = [epoch_ids(table, rank=r, world_size=world_size, batch_size=4, shuffle_buffer=10, seed=3,
                          num_workers=num_workers) for r in range(world_size)]
    union = Counter(s for ids in per_rank for s in ids)
    assert sorted(union) == ALL_IDS and set(union.values()) == {1}
    sizes = [len(ids) for ids in per_rank]
    assert max(sizes) - min(sizes) <= 1
    for r, ids in enumerate(per_rank):  # len() is what a DataLoader reports: batches of this rank
        assert len(TokenSequenceDataset(table, rank=r, world_size=world_size, batch_size=4)) == -(-len(ids) // 4)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_exactly_once_one_sample_at_a_time(table, num_workers):
    per_rank = [epoch_ids(table, rank=r, world_size=2, shuffle_buffer=16, num_workers=num_workers) for r in range(2)]
    assert sorted(per_rank[0] + per_rank[1]) == ALL_IDS


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator")  # CPU-only CI
@pytest.mark.parametrize("how", ["in_process", "deltaloader_workers", "pinned_workers", "plain_dataloader_workers"])
def test_inputs_and_labels_match_the_table(table, how):
    """The same samples however they are delivered: in process, or built by DataLoader workers
    (DeltaLoader, pinned, plain DataLoader) and sent through shared memory."""
    expected = {r["seq_id"]: r for r in sequences(0, ROWS).to_pylist()}
    ds = TokenSequenceDataset(table, extra_columns=["seq_id", "num_tokens"], batch_size=5, shuffle_buffer=12)
    batches = {"in_process": lambda: ds,
               "deltaloader_workers": lambda: DeltaLoader(ds, num_workers=2),
               "pinned_workers": lambda: DeltaLoader(ds, num_workers=2, pin_memory=True),
               "plain_dataloader_workers": lambda: DataLoader(ds, batch_size=None, num_workers=2)}[how]()
    seen = 0
    for batch in batches:
        assert set(batch) == {"input_ids", "labels", "seq_id", "num_tokens"}
        assert batch["input_ids"].dtype == batch["labels"].dtype == torch.int64
        assert batch["input_ids"].shape == batch["labels"].shape == (len(batch["seq_id"]), WIDTH - 1)
        for k, sid in enumerate(batch["seq_id"]):
            row = expected[sid]
            ids, n = row["input_ids"], row["num_tokens"]
            assert batch["num_tokens"][k].item() == n
            assert batch["input_ids"][k].tolist() == ids[:-1]
            assert batch["labels"][k].tolist() == [t if p + 1 < n else IGNORE_INDEX for p, t in enumerate(ids[1:])]
            seen += 1
    assert seen == ROWS
    padded = [r for r in expected.values() if r["num_tokens"] < WIDTH]
    assert padded, "the fixture must contain padded sequences"


def test_same_seed_same_order_other_seed_or_epoch_other_order(table):
    a = epoch_ids(table, seed=7, batch_size=4, shuffle_buffer=10)
    assert a == epoch_ids(table, seed=7, batch_size=4, shuffle_buffer=10)
    assert a != epoch_ids(table, seed=8, batch_size=4, shuffle_buffer=10)
    assert sorted(a) == ALL_IDS
    ds = TokenSequenceDataset(table, extra_columns=["seq_id"], seed=7, batch_size=4, shuffle_buffer=10)
    ds.set_epoch(1)
    b = seq_ids(ds)
    assert b != a and sorted(b) == ALL_IDS
    ds.set_epoch(0)
    assert seq_ids(ds) == a
    assert epoch_ids(table, seed=7, batch_size=4, shuffle_buffer=10, num_workers=2) == \
        epoch_ids(table, seed=7, batch_size=4, shuffle_buffer=10, num_workers=2)
    # read-ahead threads change nothing but speed
    assert epoch_ids(table, seed=7, batch_size=4, shuffle_buffer=10, num_threads=3) == a
    assert epoch_ids(table, seed=7, shuffle_buffer=10, num_threads=3, num_workers=2) == \
        epoch_ids(table, seed=7, shuffle_buffer=10, num_threads=1, num_workers=2)


def test_no_shuffle_reads_in_file_order_split_over_ranks(table):
    ds = TokenSequenceDataset(table, shuffle=False)
    files = [str(Path(f)) for f in ds.snapshot.files]
    assert files == sorted(files)
    order = [r for f in files for r in pa.parquet.read_table(f, columns=["seq_id"]).column(0).to_pylist()]
    halves = [epoch_ids(table, shuffle=False, rank=r, world_size=2, batch_size=3) for r in range(2)]
    assert halves[0] + halves[1] == order


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize("num_workers,batch_size,stop_after", [
    (2, 4, 1), (2, 4, 5), (2, 4, 12), (2, 4, 26), (2, None, 37), (0, 4, 7), (3, 3, 11)])
def test_resume_mid_epoch_equals_an_uninterrupted_epoch(table, num_workers, batch_size, stop_after):
    kwargs = dict(extra_columns=["seq_id"], batch_size=batch_size, shuffle_buffer=10, seed=11)
    full = seq_ids(DeltaLoader(TokenSequenceDataset(table, **kwargs), num_workers=num_workers))

    first = TokenSequenceDataset(table, **kwargs)
    first.set_epoch(0)
    head = []
    for item in DeltaLoader(first, num_workers=num_workers):
        head.extend(seq_ids([item]))
        if len(head) >= stop_after * (batch_size or 1) or len(head) == ROWS:
            break
    state = json.loads(json.dumps(first.state_dict()))  # a checkpoint holds plain data
    assert state["consumed"] == -(-len(head) // (batch_size or 1))

    second = TokenSequenceDataset(table, **kwargs)
    second.load_state_dict(state)
    tail = seq_ids(DeltaLoader(second, num_workers=num_workers))
    assert head + tail == full
    assert second.state_dict()["consumed"] == len(second)


def test_resume_needs_the_same_worker_count_and_setup(table):
    ds = TokenSequenceDataset(table, batch_size=4)
    loader = iter(DeltaLoader(ds, num_workers=2))
    next(loader), next(loader), next(loader)
    state = ds.state_dict()
    del loader
    other = TokenSequenceDataset(table, batch_size=4)
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="2 DataLoader worker"):
        next(iter(DeltaLoader(other, num_workers=1)))
    with pytest.raises(ValueError, match="batch_size"):
        TokenSequenceDataset(table, batch_size=8).load_state_dict(state)
    with pytest.raises(ValueError, match="rank"):
        TokenSequenceDataset(table, batch_size=4, rank=1, world_size=2).load_state_dict(state)


def test_state_dict_refuses_to_guess_behind_plain_dataloader_workers(table):
    ds = TokenSequenceDataset(table, batch_size=4)
    for _ in DataLoader(ds, batch_size=None, num_workers=2):
        break
    with pytest.raises(RuntimeError, match="DeltaLoader"):
        ds.state_dict()


def test_set_epoch_reaches_persistent_workers(table):
    ds = TokenSequenceDataset(table, extra_columns=["seq_id"], batch_size=4, seed=5)
    loader = DeltaLoader(ds, num_workers=2, persistent_workers=True)
    got = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got.append(seq_ids(loader))
    fresh = []
    for epoch in (0, 1):
        other = TokenSequenceDataset(table, extra_columns=["seq_id"], batch_size=4, seed=5)
        other.set_epoch(epoch)
        fresh.append(seq_ids(DeltaLoader(other, num_workers=2)))
    assert got == fresh and got[0] != got[1]


def test_a_pinned_version_ignores_later_writes(tmp_path):
    uri = tmp_path / "t"
    write(uri, sequences(0, 30), mode="error")
    pinned = TokenSequenceDataset(str(uri), extra_columns=["seq_id"], batch_size=4)
    assert pinned.version == 0
    state = pinned.state_dict()
    write(uri, sequences(30, 50))
    write(uri, sequences(0, 10), mode="overwrite")
    assert sorted(seq_ids(pinned)) == ALL_IDS[:30]
    assert sorted(seq_ids(TokenSequenceDataset(str(uri), extra_columns=["seq_id"], version=1))) == ALL_IDS[:50]
    latest = TokenSequenceDataset(str(uri), extra_columns=["seq_id"], batch_size=4)
    assert latest.version == 2 and sorted(seq_ids(latest)) == ALL_IDS[:10]
    # resuming across versions is an error naming both (never a silent switch of snapshot) ...
    with pytest.raises(ValueError, match=r"state is for version 0 of .*, this dataset reads version 2.*repin=True"):
        latest.load_state_dict(state)
    assert latest.version == 2
    # ... unless the caller asks to re-pin: the dataset then reads the state's version
    latest.load_state_dict(state, repin=True)
    assert latest.version == 0 and sorted(seq_ids(latest)) == ALL_IDS[:30]
    with pytest.raises(ValueError, match="version 0 .* reads version 2"):
        TokenSequenceDataset(str(uri), version=2, batch_size=4).load_state_dict(state)
    assert TokenSequenceDataset(str(uri), version=2, batch_size=4).state_dict()["config_hash"] is None  # no lineage


def test_the_state_holds_the_lakes_config_hash_of_its_version(tmp_path):
    """A crawlake commit records the config hash (pipelines.lake.commits.Lineage); the state
    carries it, and a table re-created at the same path under another config is refused."""
    from deltalake import CommitProperties

    from pipelines.lake.commits import LINEAGE_FIELD, Lineage

    def commit(table, mode, config_hash):
        meta = {LINEAGE_FIELD: Lineage("r", "tokenize", config_hash, {"silver.documents_clean": 3}).to_json()}
        write_deltalake(str(uri), table, mode=mode, commit_properties=CommitProperties(custom_metadata=meta))

    uri = tmp_path / "t"
    commit(sequences(0, 30), "error", "aaaaaaaaaaaaaaaa")
    ds = TokenSequenceDataset(str(uri), batch_size=4)
    state = json.loads(json.dumps(ds.state_dict()))
    assert (state["version"], state["config_hash"]) == (0, "aaaaaaaaaaaaaaaa") == (ds.version, ds.config_hash)
    commit(sequences(30, 40), "append", "bbbbbbbbbbbbbbbb")
    newer = TokenSequenceDataset(str(uri), batch_size=4)
    assert newer.config_hash == "bbbbbbbbbbbbbbbb"
    with pytest.raises(ValueError, match="version 0 .* version 1"):
        newer.load_state_dict(state)
    newer.load_state_dict(state, repin=True)
    assert newer.version == 0 and newer.state_dict()["config_hash"] == "aaaaaaaaaaaaaaaa"

    shutil.rmtree(uri)   # the same path, re-created under another config
    commit(sequences(0, 30), "error", "cccccccccccccccc")
    with pytest.raises(ValueError, match="config hash aaaaaaaaaaaaaaaa .* config hash cccccccccccccccc"):
        TokenSequenceDataset(str(uri), batch_size=4).load_state_dict(state)


def test_rank_from_environment_and_bad_arguments(table, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = TokenSequenceDataset(table)
    assert (ds.rank, ds.world_size) == (1, 3)
    assert ds.rank_rows() == (ROWS // 3, 2 * ROWS // 3)
    with pytest.raises(ValueError, match="both"):
        TokenSequenceDataset(table, rank=0)
    with pytest.raises(ValueError, match="rank 3"):
        TokenSequenceDataset(table, rank=3, world_size=3)
    with pytest.raises(ValueError, match="no column"):
        TokenSequenceDataset(table, extra_columns=["nope"])
    with pytest.raises(ValueError, match="shuffle_buffer"):
        TokenSequenceDataset(table, shuffle_buffer=0)


def test_an_empty_table_is_an_empty_epoch_and_loader_batching_is_the_datasets(tmp_path, table):
    uri = tmp_path / "empty"
    write(uri, sequences(0, 0), mode="error")
    ds = TokenSequenceDataset(str(uri), batch_size=4)
    assert len(ds) == 0 and list(DeltaLoader(ds, num_workers=2)) == [] and ds.state_dict()["consumed"] == 0
    with pytest.raises(ValueError, match="batch_size"):
        DeltaLoader(TokenSequenceDataset(table), batch_size=8)
    with pytest.raises(TypeError):
        DeltaLoader(list(range(3)))


def test_ragged_input_ids_are_an_error(tmp_path):
    uri = tmp_path / "ragged"
    write(uri, pa.table({"input_ids": pa.array([[1, 2, 3], [4, 5]], pa.list_(pa.int32())),
                         "num_tokens": pa.array([3, 2], pa.int32())}), mode="error")
    with pytest.raises(ValueError, match="lengths 2..3"):
        list(TokenSequenceDataset(str(uri)))


def test_input_ids_of_another_length_in_another_block_are_an_error(tmp_path):
    # each row group is uniform; a window holding both still has two lengths
    uri = tmp_path / "two_lengths"
    write(uri, pa.table({"input_ids": pa.array([[1, 2, 3]] * 3, pa.list_(pa.int32())),
                         "num_tokens": pa.array([3] * 3, pa.int32())}), mode="error")
    write(uri, pa.table({"input_ids": pa.array([[4, 5]] * 3, pa.list_(pa.int32())),
                         "num_tokens": pa.array([2] * 3, pa.int32())}))
    with pytest.raises(ValueError, match="lengths 2..3"):
        list(TokenSequenceDataset(str(uri), shuffle=False, shuffle_buffer=6))


def test_base_dataset_reads_any_table_with_partition_columns(tmp_path):
    uri = tmp_path / "clicks"
    rows = pa.table({"row_key": pa.array(range(50), pa.int64()), "label": pa.array([i % 2 for i in range(50)], pa.int8()),
                     "dense": pa.array([[float(i), 2.0 * i] for i in range(50)], pa.list_(pa.float32())),
                     "day": pa.array([f"d{i % 3}" for i in range(50)])})
    write_deltalake(str(uri), rows, partition_by=["day"])
    per_rank = [list(DeltaLoader(DeltaRowDataset(str(uri), rank=r, world_size=2, batch_size=8), num_workers=2))
                for r in range(2)]
    keys = [k for batches in per_rank for b in batches for k in b["row_key"].tolist()]
    assert sorted(keys) == list(range(50))
    for batches in per_rank:
        for b in batches:
            assert b["dense"].shape == (len(b["row_key"]), 2) and b["dense"].dtype == torch.float32
            assert b["dense"][:, 0].tolist() == [float(k) for k in b["row_key"].tolist()]
            assert b["day"] == [f"d{k % 3}" for k in b["row_key"].tolist()]


def test_delivered_per_worker_follows_the_dataloader_round_robin():
    assert delivered_per_worker(0, [3, 3]) == ([0, 0], 0)
    assert delivered_per_worker(3, [3, 3]) == ([2, 1], 1)
    assert delivered_per_worker(1, [3, 3]) == ([1, 0], 1)
    assert delivered_per_worker(5, [2, 3]) == ([2, 3], 0)
    assert delivered_per_worker(4, [1, 3, 2]) == ([1, 2, 1], 2)
    with pytest.raises(ValueError):
        delivered_per_worker(7, [3, 3])
    # by brute force: a DataLoader takes from each worker in turn, skipping finished ones; after
    # resuming, a fresh DataLoader (starting at its worker 0) with worker j acting as worker
    # (next + j) % n must give exactly the rest of the order.
    def turns(counts):
        return [w for r in range(max(counts, default=0)) for w in range(len(counts)) if counts[w] > r]

    rng = np.random.default_rng(0)
    for _ in range(200):
        counts = rng.integers(0, 6, size=rng.integers(1, 5)).tolist()
        order = turns(counts)
        for k in range(len(order) + 1):
            done, nxt = delivered_per_worker(k, counts)
            assert done == [order[:k].count(w) for w in range(len(counts))]
            n = len(counts)
            acting = [(nxt + j) % n for j in range(n)]
            rest = turns([counts[w] - done[w] for w in acting])
            assert [acting[j] for j in rest] == order[k:], (counts, k)


TORCHRUN_SCRIPT = """
import json, sys
import torch.distributed as dist
from pipelines.loaders import DeltaLoader, TokenSequenceDataset

dist.init_process_group("gloo")
ds = TokenSequenceDataset(sys.argv[1], extra_columns=["seq_id"], batch_size=4, seed=1)
mine = [s for batch in DeltaLoader(ds, num_workers=2) for s in batch["seq_id"]]
everyone = [None] * dist.get_world_size()
dist.all_gather_object(everyone, {"rank": ds.rank, "world_size": ds.world_size, "ids": mine})
if dist.get_rank() == 0:
    with open(sys.argv[2], "w") as f:
        json.dump(everyone, f)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_torchrun_two_processes_read_disjoint_halves(table, tmp_path):
    script, out = tmp_path / "read.py", tmp_path / "ranks.json"
    script.write_text(TORCHRUN_SCRIPT)
    torchrun = Path(sys.executable).parent / "torchrun"
    # TMPDIR: torchrun's own scratch folder (torchelastic_*) goes with the test's, not left in /tmp
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", str(script), table, str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ranks = json.loads(out.read_text())
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    a, b = (set(r["ids"]) for r in ranks)
    assert not a & b
    assert sorted(a | b) == ALL_IDS
    assert {len(r["ids"]) for r in ranks} == {ROWS // 2, ROWS - ROWS // 2}
