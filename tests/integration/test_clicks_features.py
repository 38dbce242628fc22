"""DLRM features on local Spark against a pandas computation of the same rules; stable vocabulary ids."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipelines.clicks import features
from pipelines.clicks.generate import generate_file
from pipelines.clicks.ingest import ingest_files, resolve_inputs
from pipelines.kernels.clicks import CAT_COLUMNS, FEATURE_COLUMNS, INT_COLUMNS, file_key
from pipelines.ledger import new_run_id
from pipelines.loaders.clicks import ClickFeaturesDataset
from pipelines.stage import QualityGateError, StageContext
from pipelines.lake import Lake
from tests.conftest import lake_config, read_table

MIN_FREQ = 3


def _ctx(spark, root):
    cfg = lake_config(root, f"clicks.vocab_min_frequency={MIN_FREQ}")
    return StageContext(spark, cfg, Lake(spark, cfg.lake), new_run_id())


def _valid_lines(made) -> pd.DataFrame:
    """The valid lines of generated files as strings, with their row keys (read without crawlake)."""
    records = []
    for f in made:
        with open(f.path) as fh:
            for n, line in enumerate(fh.read().split("\n")[: f.lines], start=1):
                if n not in f.bad:
                    records.append([f"{file_key(f.path)}-{n:010d}", *line.split("\t")])
    return pd.DataFrame(records, columns=["row_key", *FEATURE_COLUMNS])


def pandas_vocab(lines: pd.DataFrame, previous: dict[str, dict[str, int]]) -> tuple[dict, dict]:
    """The rules, in pandas: counts >= MIN_FREQ; old ids kept; new ids after the column's last id,
    by count descending then value."""
    vocab, counts = {}, {}
    for c in CAT_COLUMNS:
        vc = lines.loc[lines[c] != "", c].value_counts()
        counts[c] = vc.to_dict()
        ids = dict(previous.get(c, {}))
        fresh = sorted((v for v, n in vc.items() if n >= MIN_FREQ and v not in ids), key=lambda v: (-vc[v], v))
        start = max(ids.values(), default=1) + 1
        ids.update({v: start + i for i, v in enumerate(fresh)})
        vocab[c] = ids
    return vocab, counts


def pandas_features(lines: pd.DataFrame, vocab: dict) -> dict[str, tuple]:
    ints = lines[list(INT_COLUMNS)].replace("", "0").astype(np.int64).to_numpy()
    dense = np.log1p(np.maximum(ints, 0).astype(np.float64)).astype(np.float32)
    sparse = np.stack([lines[c].map(lambda v, c=c: 0 if v == "" else vocab[c].get(v, 1)).to_numpy()
                       for c in CAT_COLUMNS], axis=1)
    return {k: (int(lab), d, s) for k, lab, d, s in zip(lines["row_key"], lines["label"], dense, sparse)}


def _check(spark, root, lines, vocab, counts):
    got_vocab = read_table(spark, root, "silver.click_vocab").collect()
    assert {(r.column, r.value): r.id for r in got_vocab} == {(c, v): i for c, ids in vocab.items() for v, i in ids.items()}
    assert all(r["count"] == counts[r.column].get(r.value, 0) for r in got_vocab)
    want = pandas_features(lines, vocab)
    got = {r.row_key: (r.label, np.array(r.dense, np.float32), np.array(r.sparse))
           for r in read_table(spark, root, "silver.click_features").collect()}
    assert set(got) == set(want)
    for key, (label, dense, sparse) in want.items():
        g_label, g_dense, g_sparse = got[key]
        assert g_label == label and np.array_equal(g_dense, dense) and np.array_equal(g_sparse, sparse), key


@pytest.fixture(scope="module")
def two_days(tmp_path_factory):
    base = tmp_path_factory.mktemp("clicks_features")
    # small cardinalities: many values reach the threshold, many stay below it
    first = generate_file(base / "logs" / "day_0", 1500, seed=31, bad_lines=6, max_cardinality=400)
    second = generate_file(base / "logs" / "day_1", 1500, seed=32, bad_lines=6, max_cardinality=400)
    return base / "lake", first, second


def test_features_match_pandas_and_ids_stay_stable(spark, two_days):
    root, first, second = two_days
    ingest_files(_ctx(spark, root), resolve_inputs([first.path]))
    result = features.run(_ctx(spark, root))
    lines = _valid_lines([first])
    vocab1, counts1 = pandas_vocab(lines, {})
    assert result.rows_out == first.rows
    assert any(v == 1 for row in pandas_features(lines, vocab1).values() for v in row[2]), "no OOV in the test data"
    _check(spark, root, lines, vocab1, counts1)

    # a second day arrives: old ids keep their meaning, values now frequent enough are appended
    ingest_files(_ctx(spark, root), resolve_inputs([second.path]))
    result = features.run(_ctx(spark, root))
    lines = _valid_lines([first, second])
    vocab2, counts2 = pandas_vocab(lines, vocab1)
    assert sum(map(len, vocab2.values())) > sum(map(len, vocab1.values()))
    assert result.notes["vocab_entries_added"] == sum(map(len, vocab2.values())) - sum(map(len, vocab1.values()))
    _check(spark, root, lines, vocab2, counts2)
    for c in CAT_COLUMNS:  # contiguous ids
        assert sorted(vocab2[c].values()) == list(range(2, 2 + len(vocab2[c])))

    # the training side reads the same samples, without Spark
    want = pandas_features(lines, vocab2).values()
    ds = ClickFeaturesDataset(str(root / "silver" / "click_features"), batch_size=256, seed=5)
    got = sorted((float(lab), tuple(s.tolist()), tuple(d.tolist())) for dense, sparse, label in ds
                 for d, s, lab in zip(dense, sparse, label))
    assert got == sorted((float(lab), tuple(int(x) for x in s), tuple(float(x) for x in d)) for lab, d, s in want)


def test_features_gate_catches_ids_beyond_the_vocabulary(spark, two_days, tmp_path):
    from pipelines import quality
    from schemas.catalog import SILVER_CLICK_FEATURES

    root, _, _ = two_days
    feats = read_table(spark, root, "silver.click_features")
    ctx = _ctx(spark, tmp_path / "gate_lake")
    sizes = features.vocab_sizes(read_table(spark, root, "silver.click_vocab"))
    quality.audit(ctx, "clicks_features", SILVER_CLICK_FEATURES, features.audit_view(feats, sizes))  # passes
    with pytest.raises(QualityGateError, match="sparse_headroom"):
        quality.audit(ctx, "clicks_features", SILVER_CLICK_FEATURES,
                      features.audit_view(feats, {c: 2 for c in CAT_COLUMNS}))


def test_features_need_bronze(spark, tmp_path):
    with pytest.raises(ValueError, match="bronze.clicks does not exist"):
        features.run(_ctx(spark, tmp_path / "empty_lake"))
