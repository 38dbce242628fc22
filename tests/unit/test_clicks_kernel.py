"""Criteo line parsing and the feature rules, without Spark; the generator's ledger as ground truth."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.clicks.generate import CORRUPTIONS, generate, generate_file
from pipelines.kernels.clicks import (
    CAT_COLUMNS, EMPTY_ID, FEATURE_COLUMNS, INT_COLUMNS, OOV_ID, REASONS, classify_line, dense_features,
    feature_batches, file_key, get_format, parse_file, sparse_ids,
)

TSV = get_format("tsv")


def _parse(path, fmt="tsv", **kw) -> tuple[pa.Table, pa.Table, dict]:
    table = pa.Table.from_batches(list(parse_file(str(path), fmt, **kw)))
    kind = table.column("kind")
    rows = table.filter(pc.equal(kind, "row"))
    bad = table.filter(pc.equal(kind, "quarantine"))
    (summary,) = table.filter(pc.equal(kind, "summary")).column("detail").to_pylist()
    return rows, bad, json.loads(summary)


def _line(label="1", ints=None, cats=None, sep="\t") -> str:
    ints = ints if ints is not None else ["5"] * 13
    cats = cats if cats is not None else ["68fd1e64"] * 26
    return sep.join([label, *ints, *cats])


@pytest.mark.parametrize("fmt,gz", [("tsv", False), ("tsv", True), ("kaggle_csv", False)])
def test_every_line_lands_once_and_bad_lines_match_the_ledger(tmp_path, fmt, gz):
    (made,) = generate(tmp_path, rows=3000, files=1, fmt=fmt, gzip=gz, bad_lines=len(CORRUPTIONS) * 4, seed=11)
    # small blocks: lines straddle block boundaries many times
    rows, bad, summary = _parse(made.path, fmt, block_bytes=50_000)
    assert summary == {"lines": made.lines, "rows": made.rows, "quarantined": len(made.bad),
                       "header_lines": made.header_lines}
    assert dict(zip(bad.column("line_number").to_pylist(), bad.column("reason").to_pylist())) == made.bad
    assert set(made.bad.values()) == {r for _, r in CORRUPTIONS}
    lines = rows.column("line_number").to_pylist()
    expected = [n for n in range(1 + made.header_lines, made.lines + 1) if n not in made.bad]
    assert lines == expected
    assert sum(rows.column("label").to_pylist()) == made.positives
    keys = rows.column("row_key").to_pylist()
    assert len(set(keys)) == len(keys) and keys[0] == f"{file_key(made.path)}-{lines[0]:010d}"
    # raw lines of quarantined rows are the file's lines
    opener = gzip.open if gz else open
    with opener(made.path, "rt") as f:
        text = f.read().split("\n")
    for n, raw in zip(bad.column("line_number").to_pylist(), bad.column("raw_line").to_pylist()):
        assert raw == text[n - 1]


def test_values_match_a_plain_pandas_read(tmp_path):
    (made,) = generate(tmp_path, rows=2000, files=1, bad_lines=0, seed=3)
    rows, bad, _ = _parse(made.path)
    assert bad.num_rows == 0
    ref = pd.read_csv(made.path, sep="\t", header=None, names=list(FEATURE_COLUMNS), dtype=str,
                      keep_default_na=False)
    got = rows.select(list(FEATURE_COLUMNS)).to_pandas()
    for c in INT_COLUMNS:
        want = [None if v == "" else int(v) for v in ref[c]]
        assert [None if pd.isna(v) else int(v) for v in got[c]] == want, c
    for c in CAT_COLUMNS:
        assert [None if v is None else v for v in got[c]] == [None if v == "" else v for v in ref[c]], c
    assert got["label"].tolist() == ref["label"].astype(int).tolist()
    assert rows.column("day").to_pylist() == [0] * 2000  # day_0


@pytest.mark.parametrize("line,reason", [
    (_line(label="2"), "bad_label"),
    (_line(label="00"), "bad_label"),
    (_line(label=""), "bad_label"),
    (_line(ints=["5"] * 12 + ["+5"]), "bad_integer"),
    (_line(ints=[" 5"] + ["5"] * 12), "bad_integer"),
    (_line(ints=["0x10"] + ["5"] * 12), "bad_integer"),
    (_line(ints=["1e3"] + ["5"] * 12), "bad_integer"),
    (_line(ints=["-"] + ["5"] * 12), "bad_integer"),
    (_line(ints=["99999999999999999999"] + ["5"] * 12), "bad_integer"),   # over int64
    (_line(cats=["68fd1e6"] + ["68fd1e64"] * 25), "bad_hash"),
    (_line(cats=["68fd1e6g"] + ["68fd1e64"] * 25), "bad_hash"),
    (_line(cats=["68fd1e64"] * 25 + ["-8fd1e64"]), "bad_hash"),
    (_line(cats=["68fd1e64"] * 25 + ["68fd1e64\r"]), "bad_hash"),          # a CRLF line
    (_line() + "\t", "wrong_field_count"),
    ("", "wrong_field_count"),
    (_line(label="7", ints=["x"] * 13), "bad_label"),                       # first failing field wins
    (_line(ints=["1"] * 12 + ["x"], cats=["zz"] * 26), "bad_integer"),
])
def test_line_rules_fast_path_and_classifier_agree(tmp_path, line, reason):
    good = _line(ints=["-3"] + [""] * 12, cats=["AbCdEf01"] + [""] * 25)   # negative int, upper-case hex, empties
    path = tmp_path / "day_3"
    path.write_bytes(f"{good}\n{line}\n{good}".encode())                    # no final newline
    assert classify_line(line.encode(), TSV)[0] == reason
    assert classify_line(good.encode(), TSV) is None
    rows, bad, summary = _parse(path)
    assert summary["lines"] == 3 and summary["rows"] == 2
    assert bad.column("reason").to_pylist() == [reason] and bad.column("line_number").to_pylist() == [2]
    assert reason in REASONS
    assert rows.column("I1").to_pylist() == [-3, -3] and rows.column("I2").to_pylist() == [None, None]
    assert rows.column("C1").to_pylist() == ["abcdef01"] * 2 and rows.column("C2").to_pylist() == [None, None]
    assert rows.column("day").to_pylist() == [3, 3]


def test_non_utf8_bytes_are_quarantined_with_their_escaped_text(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(_line().encode() + b"\n" + _line(cats=["68fd1e64"] * 25 + ["x"]).encode()[:-1] + b"\xff\xfe\n")
    rows, bad, summary = _parse(path)
    assert rows.num_rows == 1 and bad.column("reason").to_pylist() == ["bad_hash"]
    assert bad.column("raw_line")[0].as_py().endswith("\\xff\\xfe")
    assert rows.column("day").to_pylist() == [None]  # no day in the file name


def test_empty_file_and_kaggle_header_checks(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    rows, bad, summary = _parse(empty)
    assert (rows.num_rows, bad.num_rows, summary["lines"]) == (0, 0, 0)

    no_header = tmp_path / "train.csv"
    no_header.write_text(_line(sep=",") .replace("1,", "10,1,", 1) + "\n" + "11," + _line(sep=",") + "\n")
    rows, bad, summary = _parse(no_header, "kaggle_csv")
    assert bad.column("reason").to_pylist() == ["bad_header"] and rows.num_rows == 1
    assert summary == {"lines": 2, "rows": 1, "quarantined": 1, "header_lines": 0}


def test_generator_distributions(tmp_path):
    made = generate_file(tmp_path / "day_0", 40_000, seed=5)
    rows, _, _ = _parse(made.path)
    labels = np.asarray(rows.column("label"))
    assert 0.22 < labels.mean() < 0.29
    assert rows.column("I2").null_count == 0
    assert 0.40 < rows.column("I1").null_count / rows.num_rows < 0.50
    assert 0.70 < rows.column("C22").null_count / rows.num_rows < 0.82
    counts = rows.column("C3").value_counts().field("counts").to_numpy()
    counts = np.sort(counts)[::-1]
    # Zipf-like: a few very frequent values, a long tail of values seen once
    assert counts[0] > 50 * np.median(counts) and (counts == 1).mean() > 0.5
    assert np.asarray(rows.column("I2")).min() < 0


def test_dense_and_sparse_rules():
    ints = [pa.array([None, -4, 0, 9], pa.int64())] * 13
    dense = dense_features(ints)
    assert dense.dtype == np.float32 and dense.shape == (4, 13)
    assert np.allclose(dense[:, 0], [0, 0, 0, math.log(10)])
    values = [pa.array([None, "a", "b", "c"])] * 26
    ids = [pa.array([None, None, 7, 2], pa.int32())] * 26
    sparse = sparse_ids(values, ids)
    assert sparse.dtype == np.int32 and sparse[:, 5].tolist() == [EMPTY_ID, OOV_ID, 7, 2]

    batch = pa.RecordBatch.from_pydict({
        "row_key": ["k"], "day": pa.array([1], pa.int32()), "label": pa.array([1], pa.int32()),
        **{c: pa.array([3], pa.int64()) for c in INT_COLUMNS},
        **{c: pa.array(["abcdef01"]) for c in CAT_COLUMNS},
        **{f"{c}_id": pa.array([i + 2], pa.int32()) for i, c in enumerate(CAT_COLUMNS)},
    })
    (out,) = list(feature_batches([batch]))
    assert out.column("dense").to_pylist() == [[pytest.approx(math.log(4))] * 13]
    assert out.column("sparse").to_pylist() == [list(range(2, 28))]


def test_generator_rejects_more_bad_lines_than_rows(tmp_path):
    with pytest.raises(ValueError, match="bad_lines"):
        generate_file(tmp_path / "x", 3, bad_lines=4)
    with pytest.raises(ValueError, match="unknown click-log format"):
        generate_file(tmp_path / "x", 3, fmt="parquet")
