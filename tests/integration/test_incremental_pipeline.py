"""The living lake, whole pipeline (issue 20): a crawl added later, and a file that changes.

One lake on the real WARCs, every stage run three times:

A. the built-in sample and the Common Crawl whirlwind WARC and WET: a full (first) run;
B. plus the Common Crawl excerpt (a copy in a folder of its own): every stage incremental, and the
   tables equal, by content, the one full run over all four files of ``conftest.engine_lakes``
   (its deltalake lake) — with one file per commit and three shuffle partitions here against
   sixteen files per commit and two partitions there;
C. the excerpt changes (cut to its first record, its warcinfo) and the next run re-ingests it:
   its documents leave every table, which are again A's.

What may differ, as README's "Incremental runs" says: token sequences' layout (which sequence
holds a document's tokens; the documents and their tokens are the same), index shards' segments
(which segment of a shard holds a vector; each shard holds the same vectors) and
``gold.index_manifest.embeddings_version`` (a Delta version of ``gold.embeddings``, whose history
differs); times, run ids and file paths always do.
"""

from __future__ import annotations

import os
import shutil
import time
import zlib
from pathlib import Path

import pytest
from conftest import ENGINE_SETTINGS, ENGINE_WARCS, lake_config, real_file
from test_cluster import rows
from test_tokenize_incremental import _streams

from pipelines.lake import read as lake_read
from schemas.catalog import TABLES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

#: Beyond the columns that differ between any two runs (test_cluster.VOLATILE; input files are
#: compared by name there too): a Delta version of gold.embeddings, whose history differs.
HISTORY = ("embeddings_version",)
#: The WARC flow's tables whose rows equal whatever the history (the token tables and the index
#: manifest's rows: see LAYOUT; the manifest is compared by shard, whatever its segments).
SAME_ROWS = ("bronze.documents", "bronze.quarantine", "ops.ingest_log", "silver.documents_dedup",
             "silver.duplicate_clusters", "silver.dedup_index", "silver.documents_clean",
             "silver.filter_decisions", "gold.index_manifest", "gold.embeddings")
LAYOUT = ("gold.token_sequences", "gold.document_tokens", "gold.index_manifest")
EXCERPT = ENGINE_WARCS[0]


def _index_shards(root: str) -> list[tuple]:
    """Each index shard's model, revision, shard, dim, rows and row-hash sum, over its segments."""
    from pipelines.stages.index import hash_sum

    shards: dict[tuple, list[dict]] = {}
    for r in lake_read.read_spec(TABLES["gold.index_manifest"], root).to_pylist():
        shards.setdefault((r["model"], r["model_revision"], r["shard"], r["dim"]), []).append(r)
    return sorted((*k, sum(r["rows"] for r in v), hash_sum(r["row_hash_sum"] for r in v)) for k, v in shards.items())


def _snapshot(root: str) -> dict:
    out = {t: rows(root, t, skip=HISTORY) for t in SAME_ROWS}
    out["gold.index_manifest"] = _index_shards(root)
    seq_len = lake_config(Path(root)).tokenize.seq_len
    out["streams"] = _streams(lake_read.read_spec(TABLES["gold.token_sequences"], root).to_pylist(), seq_len)
    out["document_tokens"] = sorted((r["doc_id"], r["num_tokens"]) for r in
                                    lake_read.read_spec(TABLES["gold.document_tokens"], root).to_pylist())
    out["layout"] = {t: rows(root, t, skip=HISTORY) for t in LAYOUT}
    return out


def _first_record_only(path: Path) -> None:
    """Cut a gzip-per-record WARC to its first record and move its mtime on: a changed file."""
    data = path.read_bytes()
    member = zlib.decompressobj(wbits=31)
    member.decompress(data)
    path.write_bytes(data[: len(data) - len(member.unused_data)])
    later = time.time() + 10
    os.utime(path, (later, later))


@pytest.fixture(scope="module")
def history(spark, engine_lakes, tmp_path_factory):
    from pipelines.runner import run_pipeline

    reference = engine_lakes["deltalake"][0]
    sample = reference.ingest.input[0]   # the built-in sample as the engine lakes wrote it
    excerpt = tmp_path_factory.mktemp("later_crawl") / EXCERPT
    shutil.copyfile(real_file(EXCERPT), excerpt)
    root = tmp_path_factory.mktemp("incremental_pipeline") / "lake"
    first = [sample, *(real_file(n) for n in ENGINE_WARCS[1:])]

    def run(inputs):
        cfg = lake_config(root, *ENGINE_SETTINGS, "ingest.files_per_commit=1", writer="deltalake")
        cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": inputs})})
        return {r.stage: r.result for r in run_pipeline(cfg)}

    out = {"reference": _snapshot(reference.lake.root)}
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        out["run_a"] = run(first)
        out["a"] = _snapshot(str(root))
        out["run_b"] = run([*first, str(excerpt)])
        out["b"] = _snapshot(str(root))
        _first_record_only(excerpt)
        out["run_c"] = run([*first, str(excerpt)])
        out["c"] = _snapshot(str(root))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    return out


def test_the_later_crawl_runs_every_stage_incrementally_on_its_documents_only(history):
    a, b = history["run_a"], history["run_b"]
    assert {s: r.notes["mode"] for s, r in b.items()} == dict.fromkeys(b, "incremental")
    assert b["ingest"].notes["files_skipped"] == 3
    new = len(history["b"]["bronze.documents"]) - len(history["a"]["bronze.documents"])
    assert new > 0 and b["dedup"].notes["new_documents"] == b["ingest"].rows_out == new
    clean = len(history["b"]["streams"]) - len(history["a"]["streams"])
    assert clean > 0 and b["filter"].rows_out == b["tokenize"].notes["documents_added"] == clean
    assert b["embed"].notes["documents_embedded"] == clean and b["embed"].notes["documents_unchanged"] == a["filter"].rows_out


@pytest.mark.parametrize("table", SAME_ROWS)
def test_a_full_run_then_an_incremental_one_equal_one_full_run(history, table):
    reference = history["reference"][table]
    assert reference, f"{table} is empty: nothing compared"
    assert history["b"][table] == reference   # vectors bit for bit


def test_the_documents_and_their_tokens_equal_one_full_runs(history):
    assert history["b"]["streams"] == history["reference"]["streams"]   # every document once, its tokens in order
    assert history["b"]["document_tokens"] == history["reference"]["document_tokens"]


def test_a_changed_file_takes_its_documents_out_of_every_table(history):
    c, a = history["run_c"], history["a"]
    assert {s: r.notes["mode"] for s, r in c.items()} == dict.fromkeys(c, "incremental")
    gone = len(history["b"]["bronze.documents"]) - len(a["bronze.documents"])
    assert c["dedup"].notes["documents_removed"] == gone and c["dedup"].notes["new_documents"] == 0
    assert c["tokenize"].notes["documents_removed"] == c["embed"].notes["documents_removed"] > 0
    for table in SAME_ROWS:
        if table != "ops.ingest_log":
            assert history["c"][table] == a[table], table
    log, log_a = history["c"]["ops.ingest_log"], a["ops.ingest_log"]   # plus the excerpt's new size and checksum
    assert set(log_a) < set(log) and [EXCERPT in row for row in set(log) - set(log_a)] == [True]
    # the sequences that held the excerpt's documents went whole; the others never changed
    assert history["c"]["layout"] == a["layout"]
