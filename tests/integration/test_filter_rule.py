"""A filter rule of one's own, defined here and nowhere in crawlake, run by the filter stage on local
Spark over the real Common Crawl excerpt (16 pages) through a preset the config lists."""

from __future__ import annotations

import sys

import pytest
from conftest import lake_config, read_lake, real_file
from pydantic import Field

from pipelines.config import RuleConfig
from pipelines.kernels.filters import Measure, Rule

pytestmark = pytest.mark.slow

LIMIT = 0.15


class DigitRatio(Rule):
    """Characters that are digits / characters: a page of numbers (listings, tables) fails."""

    name = "digit_ratio"

    class Config(RuleConfig):
        max_digit_ratio: float = Field(0.1, ge=0, le=1)

    def measures(self, doc):
        value = sum(map(str.isdigit, doc.text)) / max(len(doc.text), 1)
        return [Measure("digit_ratio", value, self.config.max_digit_ratio, value <= self.config.max_digit_ratio)]


@pytest.fixture(scope="module")
def filtered(spark, tmp_path_factory):
    """Ingest the excerpt, publish bronze as dedup, run filter with the preset ``[url, DigitRatio
    at 0.15]`` given in the config as a list."""
    from pyspark import cloudpickle

    from pipelines.lake import Lake
    from pipelines.runner import run_pipeline
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_DEDUP

    # A rule class must be importable where Spark runs it (an installed package, --py-files); a
    # class defined in a test (or a notebook) is sent to the executors by value instead.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        root = tmp_path_factory.mktemp("filter_rule_lake")
        cfg = lake_config(root, f"filter.preset=[url, {{rule: '{__name__}:DigitRatio', max_digit_ratio: {LIMIT}}}]")
        cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(
            update={"input": [real_file("cc-main-2020-34-excerpt.warc.gz")]})})
        run_pipeline(cfg, stages=("ingest",))
        lake = Lake(spark, cfg.lake)
        lake.overwrite(SILVER_DOCUMENTS_DEDUP, lake.read(BRONZE_DOCUMENTS))
        (run,) = run_pipeline(cfg, stages=("filter",))
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    docs = {r.doc_id: r.asDict() for r in read_lake(spark, cfg, "silver.documents_dedup").collect()}
    clean = {r.doc_id: r.asDict() for r in read_lake(spark, cfg, "silver.documents_clean").collect()}
    decisions = [r.asDict() for r in read_lake(spark, cfg, "silver.filter_decisions").collect()]
    return docs, clean, decisions, run.result


def test_the_rule_decides_every_document(filtered):
    docs, _, decisions, result = filtered
    rows = {d["doc_id"]: d for d in decisions if d["filter"] == "digit_ratio"}
    assert rows.keys() == docs.keys()
    for doc_id, d in rows.items():
        text = docs[doc_id]["text"]
        assert d["value"] == pytest.approx(sum(map(str.isdigit, text)) / len(text))
        assert d["threshold"] == LIMIT and d["passed"] is (d["value"] <= LIMIT)
        assert d["detail"] == next(x["detail"] for x in decisions if x["doc_id"] == doc_id and x["filter"] == "language")
    assert result.notes["steps"] == ["http_status", "language", "url", "digit_ratio"]
    assert [s["step"] for s in result.notes["funnel"]][-1] == "digit_ratio"
    assert result.notes["failed_by_filter"]["digit_ratio"] == sum(not d["passed"] for d in rows.values()) == 4


def test_the_rule_removes_the_documents_it_fails(filtered):
    docs, clean, decisions, result = filtered
    failed = {d["doc_id"] for d in decisions if not d["passed"]}
    assert set(clean) == set(docs) - failed and result.rows_out == len(clean)
    by_rule = {d["doc_id"] for d in decisions if d["filter"] == "digit_ratio" and not d["passed"]}
    # pages only this rule removes: every other decision of theirs passed
    only = {i for i in by_rule if all(d["passed"] for d in decisions if d["doc_id"] == i and d["filter"] != "digit_ratio")}
    assert {docs[i]["url"] for i in only} == {"http://041696.com/15477/list_6_4.html",
                                              "http://044545.com/topic/20200207/015849.html",
                                              "http://077678u.info/erxiaoshujinguang/list_6_2.html"}
    assert not by_rule & set(clean)
