"""Incremental filter on local Spark + Delta over the real WARCs: a second crawl is decided alone,
and equals a full rebuild; a config change and ``--full`` rebuild in full and say so; a document
removed upstream leaves both outputs.

One lake per writer (deltalake, and Spark's Delta writer in catalog mode). Both WARCs are ingested
once; ``silver.documents_dedup`` is then published from ``bronze.documents`` through the lake layer
(dedup is not under test, and its incremental run costs a minute here: see
test_dedup_incremental.py), first with WARC A's pages only, then with A's and B's. Runs in order:
A (full, first run) → A+B less one of A's kept pages, as a takedown would leave it (incremental:
B's pages decided, the taken-down page leaves both outputs, in one commit per table) →
``--full filter`` (equal to the incremental tables) → a threshold change (full, config changed).
"""

from __future__ import annotations

import pytest
from conftest import lake_config, read_lake, real_file

pytestmark = pytest.mark.slow

A = "cc-main-2020-34-excerpt.warc.gz"
B = "ia-heritrix-2008-example.warc.gz"
TABLES = ("silver.documents_clean", "silver.filter_decisions")


def _content(spark, cfg, table: str) -> list[tuple]:
    """The table's rows as sorted tuples of every column, columns in name order (content, not layout)."""
    df = read_lake(spark, cfg, table)
    return sorted(tuple(r) for r in df.select(*sorted(df.columns)).collect())


def _ids(spark, cfg, table: str) -> set[str]:
    return {r.doc_id for r in read_lake(spark, cfg, table).select("doc_id").collect()}


@pytest.fixture(scope="module", params=["auto", "catalog"])
def runs(spark, tmp_path_factory, request):
    from pyspark.sql import functions as F

    from pipelines.lake import Lake
    from pipelines.runner import run_pipeline
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_DEDUP

    root = tmp_path_factory.mktemp(f"filter_incremental_{request.param}")
    cfg = lake_config(root, writer=request.param)
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": [real_file(A), real_file(B)]})})
    changed = lake_config(root, "filter.gopher.min_doc_words=60", writer=request.param)
    lake = Lake(spark, cfg.lake)
    run_pipeline(cfg, stages=("ingest",))
    bronze = lake.read(BRONZE_DOCUMENTS)

    out: dict = {}
    lake.overwrite(SILVER_DOCUMENTS_DEDUP, bronze.filter(F.col("source_file").endswith(A)))
    (out["a"],) = run_pipeline(cfg, stages=("filter",))
    out["gone"] = sorted(_ids(spark, cfg, "silver.documents_clean"))[0]   # a kept page of A, taken down
    lake.overwrite(SILVER_DOCUMENTS_DEDUP, lake.read(BRONZE_DOCUMENTS))
    lake.delete_rows(SILVER_DOCUMENTS_DEDUP, "doc_id", [out["gone"]])
    out["new_documents"] = lake.read(BRONZE_DOCUMENTS).filter(F.col("source_file").endswith(B)).count()
    (out["ab"],) = run_pipeline(cfg, stages=("filter",))
    out["input"] = _ids(spark, cfg, "silver.documents_dedup")
    out["incremental"] = {t: _content(spark, cfg, t) for t in TABLES}
    (out["full"],) = run_pipeline(cfg, stages=("filter",), full=("filter",))
    out["rebuilt"] = {t: _content(spark, cfg, t) for t in TABLES}
    (out["changed"],) = run_pipeline(changed, stages=("filter",))
    out["decisions_changed"] = _content(spark, cfg, "silver.filter_decisions")
    return out


def test_first_run_is_full(runs):
    notes = runs["a"].result.notes
    assert (notes["mode"], notes["full_because"]) == ("full", "first run")
    assert len(notes["stage_config_hash"]) == 16


def test_second_crawl_is_decided_alone_and_a_takedown_leaves_both_outputs(runs):
    result = runs["ab"].result
    assert (result.notes["mode"], result.notes["full_because"]) == ("incremental", None)
    assert runs["new_documents"] > 0
    assert result.rows_in == result.notes["funnel"][0]["documents"] == runs["new_documents"]
    assert result.notes["removed_by_table"] == {"silver.documents_clean": 1, "silver.filter_decisions": 1}
    clean, decisions = ({row[_column(t, "doc_id")] for row in runs["incremental"][t]} for t in TABLES)
    assert runs["gone"] not in clean | decisions
    assert decisions == runs["input"] and clean < decisions


def test_incremental_tables_equal_a_full_rebuild(runs):
    full = runs["full"].result
    assert (full.notes["mode"], full.notes["full_because"]) == ("full", "--full")
    assert full.rows_in == len(runs["input"])
    for table, rows in runs["incremental"].items():
        assert rows, table
        assert rows == runs["rebuilt"][table], table


def test_a_threshold_change_rebuilds_in_full(runs):
    notes = runs["changed"].result.notes
    assert (notes["mode"], notes["full_because"]) == ("full", "filter config changed")
    assert notes["stage_config_hash"] != runs["full"].result.notes["stage_config_hash"]
    assert runs["changed"].result.rows_in == len(runs["input"])
    # the new threshold is in the decisions of every document
    thresholds = {row[_column("silver.filter_decisions", "threshold")] for row in runs["decisions_changed"]
                  if row[_column("silver.filter_decisions", "filter")] == "gopher_min_doc_words"}
    assert thresholds == {60.0}


def _column(table: str, name: str) -> int:
    """Where column ``name`` is in :func:`_content`'s tuples (columns in name order)."""
    from schemas.catalog import TABLES as CATALOG

    return sorted(CATALOG[table].columns).index(name)
