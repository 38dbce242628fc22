"""The filter stage on local Spark over the real Common Crawl excerpt (16 pages)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from conftest import WRITERS, lake_config, read_lake, real_file

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=WRITERS)
def filtered(spark, tmp_path_factory, request):
    """Ingest the excerpt, publish bronze as dedup (dedup is not under test), run filter with the
    default (fineweb) preset and a user domain blocklist that names the Russian page's domain;
    once per writer (the tables' equality across writers: tests/integration/test_engines.py)."""
    from pipelines.runner import run_pipeline
    from pipelines.lake import Lake
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_DEDUP

    root = tmp_path_factory.mktemp(f"filter_lake_{request.param}")
    blocklist = root / "domains.txt"
    blocklist.write_text("# test list\n01spb.ru\n", encoding="utf-8")
    cfg = lake_config(root, f"filter.url.domain_blocklists=[{blocklist}]", writer=request.param)
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(
        update={"input": [real_file("cc-main-2020-34-excerpt.warc.gz")]})})
    run_pipeline(cfg, stages=("ingest",))
    lake = Lake(spark, cfg.lake)
    lake.overwrite(SILVER_DOCUMENTS_DEDUP, lake.read(BRONZE_DOCUMENTS))
    (run,) = run_pipeline(cfg, stages=("filter",))
    docs = {r.doc_id: r.asDict() for r in read_lake(spark, cfg, "silver.documents_dedup").collect()}
    clean = {r.doc_id: r.asDict() for r in read_lake(spark, cfg, "silver.documents_clean").collect()}
    decisions = [r.asDict() for r in read_lake(spark, cfg, "silver.filter_decisions").collect()]
    return docs, clean, decisions, run.result, cfg


def test_every_removed_document_has_a_failed_decision(filtered):
    docs, clean, decisions, _, _ = filtered
    failed = {d["doc_id"] for d in decisions if not d["passed"]}
    assert len(docs) == 16 and 0 < len(clean) < 16
    assert set(docs) - set(clean) == failed
    assert not failed & set(clean)
    pairs = [(d["doc_id"], d["filter"]) for d in decisions]
    assert len(pairs) == len(set(pairs))                       # one row per document and rule
    assert {d["doc_id"] for d in decisions if d["filter"] == "language"} == set(docs)


def test_user_blocklist_and_languages(filtered):
    docs, clean, decisions, _, _ = filtered
    ru = next(i for i, d in docs.items() if d["url"] == "http://01spb.ru/company/")
    row = next(d for d in decisions if d["doc_id"] == ru and d["filter"] == "url_domain_blocklist")
    assert not row["passed"] and row["detail"] == "01spb.ru" and ru not in clean
    lang = {d["doc_id"]: (d["detail"], d["value"]) for d in decisions if d["filter"] == "language"}
    assert lang[ru][0] == "ru" and lang[ru][1] > 0.95
    assert all(c["language"] == lang[i][0] and c["language_score"] == lang[i][1] for i, c in clean.items())


def test_clean_text_is_the_kernels_output(filtered):
    from pipelines.config import load_config
    from pipelines.kernels.filters import FilterParams, filter_batch

    docs, clean, _, _, _ = filtered
    batch = pa.RecordBatch.from_pylist([{k: d[k] for k in ("doc_id", "url", "host", "text", "http_status")}
                                        for d in docs.values()])
    local = filter_batch(batch, FilterParams.from_config(load_config("local").filter)).to_pylist()
    kept = {r["doc_id"]: r["text"] for r in local if r["filter_kept"]}
    kept.pop(next(i for i, d in docs.items() if d["url"] == "http://01spb.ru/company/"), None)  # blocklisted there
    assert {i: c["text"] for i, c in clean.items()} == kept


def test_notes_give_the_funnel_and_languages(filtered):
    docs, clean, _, result, _ = filtered
    notes = result.notes
    assert notes["preset"] == "fineweb" and notes["steps"][0] == "http_status"
    funnel = notes["funnel"]
    assert [s["step"] for s in funnel] == ["input", *notes["steps"]]
    assert funnel[0]["documents"] == 16 and funnel[-1]["documents"] == len(clean) == result.rows_out
    assert all(a["documents"] >= b["documents"] and a["words"] >= b["words"] for a, b in zip(funnel, funnel[1:]))
    langs = notes["languages"]
    assert sum(v["documents"] for v in langs.values()) == 16 and langs["zh"]["documents"] == 11
    assert sum(v["kept"] for v in langs.values()) == len(clean)
    assert notes["failed_by_filter"]["url_domain_blocklist"] == 1


def test_a_small_input_in_many_files_is_filtered_by_one_task(spark, tmp_path):
    """16 documents in 4 files: fewer than MIN_TASK_DOCUMENTS, so one task reads all four and
    stages one file per table (each task's fixed cost is paid once), with every document decided."""
    from deltalake import DeltaTable

    from pipelines.lake import Lake
    from pipelines.runner import run_pipeline
    from pipelines.stages.filter import MIN_TASK_DOCUMENTS
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_CLEAN, SILVER_DOCUMENTS_DEDUP, SILVER_FILTER_DECISIONS

    cfg = lake_config(tmp_path)
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(
        update={"input": [real_file("cc-main-2020-34-excerpt.warc.gz")]})})
    run_pipeline(cfg, stages=("ingest",))
    lake = Lake(spark, cfg.lake)
    lake.overwrite(SILVER_DOCUMENTS_DEDUP, lake.read(BRONZE_DOCUMENTS).repartition(4))
    docs = lake.read(SILVER_DOCUMENTS_DEDUP)
    assert len(DeltaTable(lake.location(SILVER_DOCUMENTS_DEDUP)).file_uris()) == 4
    assert docs.count() < MIN_TASK_DOCUMENTS and spark.sparkContext.defaultParallelism > 1
    (run,) = run_pipeline(cfg, stages=("filter",))
    assert run.result.rows_in == docs.count()
    for spec in (SILVER_DOCUMENTS_CLEAN, SILVER_FILTER_DECISIONS):
        assert len(DeltaTable(lake.location(spec)).file_uris()) == 1, spec.qualified_name
    decided = {r.doc_id for r in lake.read(SILVER_FILTER_DECISIONS).select("doc_id").distinct().collect()}
    assert decided == {r.doc_id for r in docs.select("doc_id").collect()}


def test_an_input_compacted_since_the_last_run_is_decided_again_by_key(spark, tmp_path):
    """A's pages filtered, then B's appended to the input and the input compacted (OPTIMIZE:
    its new file holds A's decided pages too): the next run reads that file as added, decides A's
    pages again and replaces their rows by key, so both tables equal a full rebuild, each document
    once. Without the compaction the same run appends B's rows (nothing of the history is read)."""
    from pyspark.sql import functions as F

    from pipelines.lake import Lake
    from pipelines.runner import run_pipeline
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_DEDUP

    cfg = lake_config(tmp_path)
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": [
        real_file("cc-main-2020-34-excerpt.warc.gz"), real_file("ia-heritrix-2008-example.warc.gz")]})})
    run_pipeline(cfg, stages=("ingest",))
    lake = Lake(spark, cfg.lake)
    bronze = lake.read(BRONZE_DOCUMENTS).localCheckpoint()
    is_a = F.col("source_file").endswith("cc-main-2020-34-excerpt.warc.gz")
    lake.overwrite(SILVER_DOCUMENTS_DEDUP, bronze.filter(is_a).repartition(2))
    run_pipeline(cfg, stages=("filter",))
    since = lake.version(SILVER_DOCUMENTS_DEDUP)
    lake.insert_new(SILVER_DOCUMENTS_DEDUP, bronze.filter(~is_a))
    assert lake.changes_since(SILVER_DOCUMENTS_DEDUP, since) == frozenset()   # appended only
    spark.sql(f"OPTIMIZE delta.`{lake.location(SILVER_DOCUMENTS_DEDUP)}`")
    assert lake.changes_since(SILVER_DOCUMENTS_DEDUP, since) == {"rewritten"}
    (run,) = run_pipeline(cfg, stages=("filter",))
    assert run.result.notes["mode"] == "incremental"
    assert run.result.rows_in == bronze.count()   # the compacted file's pages, A's among them
    incremental = {t: _content(spark, cfg, t) for t in ("silver.documents_clean", "silver.filter_decisions")}
    run_pipeline(cfg, stages=("filter",), full=("filter",))
    assert incremental == {t: _content(spark, cfg, t) for t in ("silver.documents_clean", "silver.filter_decisions")}
    decisions = read_lake(spark, cfg, "silver.filter_decisions")
    assert decisions.count() == decisions.select("doc_id", "filter").distinct().count()


def _content(spark, cfg, table: str) -> list[tuple]:
    df = read_lake(spark, cfg, table)
    return sorted(tuple(r) for r in df.select(*sorted(df.columns)).collect())
