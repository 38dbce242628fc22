"""ClickFeaturesDataset over a small click_features table written with deltalake (no Spark, no JVM).

Row i has dense = [i, i + 0.5, ...] (13 values), sparse = [i, i + 1, ..., i + 25], label = i % 2,
day = i % 3 (the partition); files of a few row groups, so blocks are many.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from deltalake import WriterProperties, write_deltalake

from pipelines.loaders import DeltaLoader
from pipelines.loaders.clicks import ClickFeaturesDataset

ROWS = 203


def _features(start: int, stop: int) -> pa.Table:
    rows = np.arange(start, stop)
    return pa.table({
        "row_key": pa.array([f"k{i:05d}" for i in rows]),
        "day": pa.array(rows % 3, pa.int32()),
        "label": pa.array(rows % 2, pa.int32()),
        "dense": pa.array([[float(i) + 0.5 * j for j in range(13)] for i in rows], pa.list_(pa.float32())),
        "sparse": pa.array([[int(i) + j for j in range(26)] for i in rows], pa.list_(pa.int32())),
    })


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("click_loader") / "click_features")
    props = WriterProperties(max_row_group_size=9)
    write_deltalake(uri, _features(0, 120), mode="error", partition_by=["day"], writer_properties=props)
    write_deltalake(uri, _features(120, ROWS), mode="append", partition_by=["day"], writer_properties=props)
    return uri


def _ids(batches) -> list[int]:
    return [int(v) for dense, _, _ in batches for v in dense[:, 0].tolist()]


def test_samples_and_batches_have_dlrm_shapes(table):
    ds = ClickFeaturesDataset(table, shuffle=False)
    dense, sparse, label = next(iter(ds))
    assert dense.shape == (13,) and dense.dtype == torch.float32
    assert sparse.shape == (26,) and sparse.dtype == torch.int64
    assert label.shape == () and label.dtype == torch.float32
    i = int(dense[0])
    assert dense.tolist() == [i + 0.5 * j for j in range(13)] and sparse.tolist() == list(range(i, i + 26))
    assert float(label) == i % 2
    batches = list(ClickFeaturesDataset(table, batch_size=16, shuffle=False))
    assert [b[0].shape for b in batches[:-1]] == [(16, 13)] * (len(batches) - 1)
    assert sorted(_ids(batches)) == list(range(ROWS))
    for dense, sparse, label in batches:
        assert torch.equal(sparse[:, 0].float(), dense[:, 0]) and torch.equal(label, dense[:, 0] % 2)


def test_ranks_and_workers_read_every_row_once_in_a_seeded_order(table):
    def epoch(seed: int, epoch: int) -> list[list[int]]:
        out = []
        for rank in range(2):
            ds = ClickFeaturesDataset(table, rank=rank, world_size=2, batch_size=8, seed=seed, shuffle_buffer=32)
            ds.set_epoch(epoch)
            out.append(_ids(DeltaLoader(ds, num_workers=2)))
        return out

    first = epoch(7, 0)
    assert sorted(first[0] + first[1]) == list(range(ROWS))
    assert abs(len(first[0]) - len(first[1])) <= 1
    assert epoch(7, 0) == first                     # same seed and epoch: same order
    assert epoch(7, 1) != first and epoch(8, 0) != first
    assert first[0] + first[1] != sorted(first[0] + first[1])


def test_state_dict_resumes_exactly(table):
    ds = ClickFeaturesDataset(table, batch_size=10, seed=3, shuffle_buffer=40)
    full = _ids(DeltaLoader(ds, num_workers=2))
    ds = ClickFeaturesDataset(table, batch_size=10, seed=3, shuffle_buffer=40)
    loader = DeltaLoader(ds, num_workers=2)
    taken = []
    for k, batch in enumerate(loader):
        taken += _ids([batch])
        if k == 6:
            break
    state = ds.state_dict()
    again = ClickFeaturesDataset(table, batch_size=10, seed=3, shuffle_buffer=40)
    again.load_state_dict(state)
    rest = _ids(DeltaLoader(again, num_workers=2))
    assert taken + rest == full


def test_days_select_partitions(table):
    ds = ClickFeaturesDataset(table, days=[0, 2], batch_size=32, seed=1)
    ids = _ids(ds)
    assert sorted(ids) == [i for i in range(ROWS) if i % 3 in (0, 2)]
    assert ds.num_rows == len(ids) and ds.state_dict()["days"] == [0, 2]
    other = ClickFeaturesDataset(table, days=[1], batch_size=32, seed=1)
    with pytest.raises(ValueError, match="days"):
        other.load_state_dict(ds.state_dict())
