"""RowChunks: a loader window's rows gathered from its decoded pieces, without concatenating them."""

import numpy as np
import pytest

from pipelines.loaders.tokens import RowChunks


def _pieces(sizes, width=5, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, size=(n, width), dtype=np.int32) for n in sizes]


@pytest.mark.parametrize("sizes", [[7], [3, 11, 2], [1, 1, 1, 1], [806, 2451, 839]])
def test_take_equals_take_from_the_concatenation(sizes):
    pieces = _pieces(sizes)
    whole = np.concatenate(pieces)
    rows = RowChunks(pieces, 5)
    assert len(rows) == len(whole)
    rng = np.random.default_rng(1)
    for index in (rng.permutation(len(whole))[:64], np.arange(len(whole))[::-1], np.array([0, 0, len(whole) - 1])):
        got = rows.take(index)
        assert got.dtype == np.int32 and got.shape == (len(index), 5)
        np.testing.assert_array_equal(got, whole[index])


def test_empty_index_and_no_chunks():
    assert RowChunks(_pieces([3, 4]), 5).take(np.array([], dtype=np.int64)).shape == (0, 5)
    assert RowChunks([], 5).take(np.array([], dtype=np.int64)).shape == (0, 5)


@pytest.mark.parametrize("sizes", [[7], [3, 4]])
@pytest.mark.parametrize("bad", [-1, 7])
def test_out_of_range_is_an_index_error(sizes, bad):
    # -1 too: numpy would read the last row
    with pytest.raises(IndexError):
        RowChunks(_pieces(sizes), 5).take(np.array([0, bad]))
