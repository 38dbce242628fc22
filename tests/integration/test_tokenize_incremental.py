"""Incremental tokenize on local Spark + Delta over a real WARC: documents removed from and added
to ``silver.documents_clean`` touch only the sequences that held them; a run with nothing changed
commits nothing; ``--full`` packs the same documents into the same tokens; a seq_len change
rebuilds in full and says so.

One lake (the default writer): the CC 2020 excerpt ingested, its documents published as clean
through the lake layer (filter is not under test) less a few held back. Runs in order: full
(first run) → clean less 5 packed documents plus the held-back ones (incremental) → unchanged
(incremental, no commit) → ``--full tokenize`` → ``tokenize.seq_len`` changed (full).
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import lake_config, read_lake, real_file

from pipelines.config import TokenizeConfig
from pipelines.kernels.tokens import encode_ids, load_tokenizer, separator_ids

pytestmark = pytest.mark.slow
SEQ_LEN, GROUPS = 128, 2
SETTINGS = (f"tokenize.seq_len={SEQ_LEN}", f"tokenize.pack_groups={GROUPS}")
TABLES = ("gold.token_sequences", "gold.document_tokens")


def _rows(spark, cfg, table: str) -> list[dict]:
    return [r.asDict() for r in read_lake(spark, cfg, table).collect()]


def _streams(seqs: list[dict], seq_len: int = SEQ_LEN) -> dict[str, list[int]]:
    """Each document's tokens (separator included) read back by walking each group's sequences in
    seq_index order; fails when a row's boundaries disagree with the walk or a row is not
    ``seq_len + 1`` tokens long."""
    out: dict[str, list[int]] = {}
    by_group = defaultdict(list)
    for s in seqs:
        by_group[s["pack_group"]].append(s)
    for rows in by_group.values():
        current, left = None, 0
        for s in sorted(rows, key=lambda s: s["seq_index"]):
            ids, pos = list(s["input_ids"][: s["num_tokens"]]), 0
            if left:
                take = min(left, len(ids))
                out[current] += ids[:take]
                pos, left = take, left - take
            for offset, doc, n in zip(s["doc_boundaries"], s["doc_ids"], s["doc_num_tokens"]):
                assert offset == pos and doc not in out, (s["seq_id"], doc)
                take = min(n + 1, len(ids) - pos)
                out[doc] = ids[pos: pos + take]
                pos, current, left = pos + take, doc, n + 1 - take
            assert pos == len(ids) and len(s["input_ids"]) == seq_len + 1
    return out


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    from pyspark.sql import functions as F

    from pipelines.lake import Lake
    from pipelines.runner import run_pipeline
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_CLEAN, TABLES as CATALOG

    root = tmp_path_factory.mktemp("tokenize_incremental")
    cfg = lake_config(root, *SETTINGS)
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(
        update={"input": [real_file("cc-main-2020-34-excerpt.warc.gz")]})})
    lake = Lake(spark, cfg.lake)
    run_pipeline(cfg, stages=("ingest",))
    bronze = lake.read(BRONZE_DOCUMENTS).select(
        "*", F.lit(None).cast("string").alias("language"), F.lit(None).cast("double").alias("language_score"))
    ids = sorted(r.doc_id for r in bronze.select("doc_id").collect())
    held, gone = set(ids[::15][:6]), set(ids[1::15][:5])   # added later; removed later

    def snapshot():
        return {t: _rows(spark, cfg, t) for t in TABLES}

    def versions():
        return {t: lake.version(CATALOG[t]) for t in TABLES}

    out = {"held": held, "gone": gone}
    lake.overwrite(SILVER_DOCUMENTS_CLEAN, bronze.filter(~F.col("doc_id").isin(sorted(held))))
    (out["first"],) = run_pipeline(cfg, stages=("tokenize",))
    out["before"] = snapshot()
    lake.overwrite(SILVER_DOCUMENTS_CLEAN, bronze.filter(~F.col("doc_id").isin(sorted(gone))))
    out["clean"] = {r.doc_id: r.text for r in lake.read(SILVER_DOCUMENTS_CLEAN).select("doc_id", "text").collect()}
    (out["incremental"],) = run_pipeline(cfg, stages=("tokenize",))
    out["after"] = snapshot()
    out["versions"] = versions()
    (out["unchanged"],) = run_pipeline(cfg, stages=("tokenize",))
    out["versions_unchanged"] = versions()
    (out["full"],) = run_pipeline(cfg, stages=("tokenize",), full=("tokenize",))
    out["rebuilt"] = snapshot()
    (out["changed"],) = run_pipeline(lake_config(root, "tokenize.seq_len=64", f"tokenize.pack_groups={GROUPS}"),
                                     stages=("tokenize",))
    return out


def _check_conserved(tables: dict, clean: dict[str, str]) -> dict[str, list[int]]:
    seqs, docs = tables["gold.token_sequences"], tables["gold.document_tokens"]
    assert sum(s["num_tokens"] for s in seqs) == sum(d["num_tokens"] for d in docs) + len(docs)
    assert len(docs) == len(clean)
    streams = _streams(seqs)
    sep, _ = separator_ids(TokenizeConfig(seq_len=SEQ_LEN))
    ids = sorted(clean)
    expected = dict(zip(ids, (t + [sep] for t in encode_ids(load_tokenizer("default"), [clean[d] for d in ids]))))
    assert streams == expected   # every document exactly once, with its tokens in order
    # document_tokens says where each starts
    start = {(s["seq_id"], o): d for s in seqs for o, d in zip(s["doc_boundaries"], s["doc_ids"])}
    assert {(d["seq_id"], d["offset"]): d["doc_id"] for d in docs} == start
    return streams


def test_first_run_is_full(runs):
    notes = runs["first"].result.notes
    assert (notes["mode"], notes["full_because"]) == ("full", "first run")


def test_incremental_run_touches_only_the_sequences_of_removed_documents(runs):
    notes = runs["incremental"].result.notes
    assert (notes["mode"], notes["full_because"]) == ("incremental", None)
    assert (notes["documents_added"], notes["documents_removed"]) == (len(runs["held"]), len(runs["gone"]))
    assert notes["sequences_added"] > 0 and notes["sequences_rewritten"] + notes["sequences_deleted"] > 0
    before = {s["seq_id"]: s for s in runs["before"]["gold.token_sequences"]}
    after = {s["seq_id"]: s for s in runs["after"]["gold.token_sequences"]}
    holding = {sid for sid, s in before.items() if set(s["doc_ids"]) & runs["gone"]}
    changed = {sid for sid in before if after.get(sid) != before[sid]}
    assert holding <= changed   # where a removed document starts, at least
    assert len(changed) == notes["sequences_rewritten"] + notes["sequences_deleted"]
    assert len(set(before) - set(after)) == notes["sequences_deleted"]
    added = set(after) - set(before)
    assert len(added) == notes["sequences_added"]
    last = {g: max(s["seq_index"] for s in before.values() if s["pack_group"] == g) for g in range(GROUPS)}
    assert all(after[sid]["seq_index"] > last[after[sid]["pack_group"]] for sid in added)
    streams = _check_conserved(runs["after"], runs["clean"])
    assert not runs["gone"] & set(streams) and runs["held"] <= set(streams)
    old = _streams(list(before.values()))
    assert all(streams[d] == old[d] for d in streams if d not in runs["held"])


def test_nothing_changed_commits_nothing(runs):
    notes = runs["unchanged"].result.notes
    assert notes["mode"] == "incremental"
    assert [notes[k] for k in ("documents_added", "documents_removed", "sequences_added",
                               "sequences_rewritten", "sequences_deleted")] == [0] * 5
    assert runs["versions_unchanged"] == runs["versions"]


def test_full_rebuild_packs_the_same_documents_into_the_same_tokens(runs):
    notes = runs["full"].result.notes
    assert (notes["mode"], notes["full_because"]) == ("full", "--full")
    assert _check_conserved(runs["rebuilt"], runs["clean"]) == _streams(runs["after"]["gold.token_sequences"])
    assert ({d["doc_id"]: d["num_tokens"] for d in runs["rebuilt"]["gold.document_tokens"]}
            == {d["doc_id"]: d["num_tokens"] for d in runs["after"]["gold.document_tokens"]})


def test_a_seq_len_change_rebuilds_in_full(runs):
    notes = runs["changed"].result.notes
    assert (notes["mode"], notes["full_because"]) == ("full", "tokenize config changed")
    assert notes["seq_len"] == 64 and runs["changed"].result.rows_in == len(runs["clean"])
