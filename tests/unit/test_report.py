"""crawlake report without a JVM: the numbers on a lake whose answers are known (tests/report_lake.py),
a partial and an empty lake, and the page being one offline file."""

from __future__ import annotations

import json
import re

import pytest
import report_lake as rl

from pipelines.report import NoTables, build_report
from pipelines.report.lakedata import collect, histogram, size_bucket, step_order


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    return rl.build(tmp_path_factory.mktemp("report_lake"))


@pytest.fixture(scope="module")
def data(lake):
    return collect(str(lake))


def test_funnel_counts_documents_and_words_per_step(data):
    f = data.funnel.set_index("step")
    assert f.loc["ingested", "documents"] == 40
    assert f.loc["ingested", "words"] == sum(rl.words(d) for d in rl.DOCS)
    assert f.loc["deduplicated", "documents"] == 33
    assert f.loc["deduplicated", "words"] == sum(rl.words(d) for d in rl.DEDUP)
    assert list(f.index[2:-1]) == ["filter input", *rl.STEPS], "filter steps in the order they ran"
    assert {s: f.loc[s, "documents"] for s in rl.FUNNEL} == rl.FUNNEL
    assert f.loc["fineweb_line_punct_ratio", "words"] == sum(rl.words(d) for d in rl.clean_docs())
    assert f.loc["clean (text cleaned)", "documents"] == 26
    assert data.not_yet_filtered == 0


def test_funnel_per_language(data):
    lf = data.funnel_languages
    last = lf[lf["step"] == "fineweb_line_punct_ratio"].set_index("language")["documents"].to_dict()
    assert last == {"en": sum(int(d[1:]) % 2 == 0 for d in rl.clean_docs()),
                    "fr": sum(int(d[1:]) % 2 == 1 for d in rl.clean_docs())}
    start = lf[lf["step"] == "filter input"].set_index("language")["share"].to_dict()
    assert start == {"en": 1.0, "fr": 1.0}


def test_rules_failures_thresholds_and_value_distributions(data):
    r = data.rules.set_index("filter")
    assert r.loc["gopher_min_doc_words", "failed"] == 5 and r.loc["gopher_min_doc_words", "removed"] == 2
    assert r.loc["http_status_2xx", "removed"] == 2 and r.loc["language", "removed"] == 1
    assert r.loc["fineweb_line_punct_ratio", "threshold_min"] == pytest.approx(0.12)
    assert r.loc["c4_lines_removed", "failed"] == 0
    assert set(data.rule_values) == {"gopher_min_doc_words", "http_status_2xx", "fineweb_line_punct_ratio"}
    words = data.rule_values["gopher_min_doc_words"]
    assert words["threshold"] == 10.0
    assert words["bins"].groupby("outcome")["documents"].sum().to_dict() == {"failed": 5, "passed": 28}


def test_dedup_clusters_and_largest_with_kept_url(data):
    assert data.dedup_removed.set_index("method")["documents"].to_dict() == {"exact": 5, "near": 2}
    assert data.cluster_sizes[["method", "size", "clusters"]].values.tolist() == [["near", "3", 1], ["exact", "6", 1]]
    assert data.jaccard.groupby("method")["documents"].sum().to_dict() == {"exact": 5, "near": 2}
    top = data.largest_clusters.iloc[0]
    assert (top["cluster_id"], top["size"], top["kept_url"]) == ("d29", 6, rl.url("d29"))


def test_removed_sample_explains_each_document(data):
    sample = {s["doc_id"]: s for s in data.removed_sample}
    assert len(sample) == 7 + 7   # fewer removed documents than the box shows: all of them
    assert sample["d31"]["removed_by"] == "dedup" and rl.url("d29") in sample["d31"]["reason"]
    assert "estimated Jaccard 0.90" in sample["d35"]["reason"]
    assert sample["d03"]["reason"].startswith("failed gopher_min_doc_words: value 8, threshold 10")
    assert sample["d00"]["reason"].startswith("failed http_status_2xx"), "the first failing step, not any"
    assert sample["d05"]["url"] == rl.url("d05") and sample["d05"]["snippet"].startswith("wd05x0")


def test_lengths_clicks_runs_quality(data):
    assert data.seq_stats["sequences"] == 3 and data.seq_stats["sequence_length"] == 17
    assert data.seq_stats["padding"] == pytest.approx(1 - (17 + 17 + 9) / 51)
    assert data.doc_tokens["documents"].sum() == 26
    assert data.doc_lengths.groupby("table")["documents"].sum().to_dict() == {
        "bronze.documents": 40, "silver.documents_clean": 26}
    days = data.clicks_days.set_index("day")
    assert days["ctr"].to_dict() == {0: pytest.approx(0.1), 1: pytest.approx(0.4)}
    assert data.clicks == {"rows": 150, "quarantined": 5, "days": 2, "positives": 30}
    assert data.clicks_quarantine.set_index("reason")["lines"].to_dict() == {"wrong_field_count": 3, "bad_label": 2}
    assert data.click_vocab.values.tolist() == [["C1", 1], ["C2", 2], ["C10", 10]]
    assert set(data.runs["run_id"]) == {"r1", "r2"} and len(data.runs) == 8
    assert data.quality[["table", "passed", "failed"]].values.tolist() == [["silver.documents_clean", 2, 1]]
    assert data.quality_failures["expectation"].tolist() == ["between"]


def test_page_is_one_offline_file_with_every_section(lake, tmp_path):
    built = build_report(str(lake), tmp_path / "r.html")
    page = built.path.read_text()
    assert built.sections == ["funnel", "rules", "dedup", "lengths", "clicks", "runs", "removed"]
    assert not re.search(r"<(script|link)[^>]+(src|href)=\"(https?:)?//", page), "nothing is fetched"
    assert "window.vegaEmbed" in page
    specs = json.loads(re.search(r'<script id="crawlake-specs" type="application/json">(.*?)</script>', page, re.S)
                       .group(1).replace("<\\/", "</"))
    assert len(specs) == built.charts >= 15
    declared = dict(re.findall(r'data-section="(\w+)" data-charts="(\d+)"', page))
    assert all(int(declared[k]) > 0 for k in ("funnel", "rules", "dedup", "lengths", "clicks", "runs"))
    assert all(spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6") for spec in specs.values())


def test_partial_lake_reports_what_ran(tmp_path):
    lake = rl.build(tmp_path / "lake", partial=True)
    built = build_report(str(lake))
    assert built.path == lake / "report.html"
    assert built.sections == ["funnel", "lengths", "runs"]
    page = built.path.read_text()
    assert "No dedup results yet" in page and "No click logs in this lake" in page


def test_empty_root_is_an_error(tmp_path):
    with pytest.raises(NoTables, match="no crawlake tables"):
        build_report(str(tmp_path))


def test_step_order_from_consecutive_rows():
    # a document without http_status (a WET record) must not put language first for everyone
    seen = ["language", "http_status_2xx", "gopher", "fineweb"]
    pairs = {("language", "gopher"), ("http_status_2xx", "language"), ("gopher", "fineweb")}
    assert step_order(seen, pairs) == ["http_status_2xx", "language", "gopher", "fineweb"]
    assert step_order(["a", "b"], {("a", "b"), ("b", "a")}) == ["a", "b"], "a cycle falls back to first seen"


def test_histogram_and_size_buckets():
    h = histogram([0.5, 1.5, 2.5, 100], bins=4, lo=0, hi=4)
    assert h["count"].tolist() == [1, 1, 1, 1], "values beyond the range go to the edge bins"
    assert histogram([], log=True).empty
    assert [size_bucket(n) for n in (2, 10, 11, 50, 999, 5000)] == ["2", "10", "11–20", "21–50", "101–1000", ">1000"]
