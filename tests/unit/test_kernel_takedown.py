"""Which records a takedown names (pipelines.kernels.takedown), and the WARC kernel keeping them
out, on the real excerpt (no Spark)."""

from __future__ import annotations

import pickle
from collections import Counter
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from conftest import real_file

from pipelines.kernels.takedown import Selectors, TakedownList
from pipelines.kernels.warc import doc_id_for, parse_warc_file, summary_row

DOC = "0" * 31 + "1"


def one(**selectors) -> TakedownList:
    return TakedownList([("t1", Selectors.parse(**selectors))])


def test_url_matches_as_crawled_or_in_canonical_form():
    takedowns = one(urls=["http://Example.com/a?b=1&a=2"])
    assert takedowns.match("http://Example.com/a?b=1&a=2") == "t1"
    assert takedowns.match("http://example.com/a?a=2&b=1") == "t1"          # the same page, canonical
    assert takedowns.match("http://example.com/a?a=2&b=1", url_normalized="http://example.com/a?a=2&b=1") == "t1"
    assert takedowns.match("http://example.com/a") is None
    assert takedowns.match("http://example.com/a?a=2&b=1&c=3") is None


def test_prefix_matches_urls_that_start_with_it():
    takedowns = one(url_prefixes=["https://example.com/blog/"])
    assert takedowns.match("https://example.com/blog/2024/post.html") == "t1"
    assert takedowns.match("https://example.com/blog/") == "t1"
    assert takedowns.match("https://example.com/blogger") is None
    assert takedowns.match("http://example.com/blog/post") is None          # another scheme, another URL


def test_domain_matches_the_host_and_its_subdomains_only():
    takedowns = one(domains=["Example.COM."])
    assert Selectors.parse(domains=["Example.COM."]).domains == ("example.com",)
    for url in ("http://example.com/", "https://www.example.com/x", "http://a.b.EXAMPLE.com:8080/y",
                "http://example.com./z"):
        assert takedowns.match(url) == "t1", url
    for url in ("http://notexample.com/", "http://example.com.evil.org/", "http://example.org/", "dns:example.com"):
        assert takedowns.match(url) is None, url


def test_doc_id_matches_the_record_whatever_its_url():
    takedowns = one(doc_ids=[DOC])
    assert takedowns.match("http://anything.org/", DOC) == "t1"
    assert takedowns.match(None, DOC) == "t1"
    assert takedowns.match("http://anything.org/", "f" * 32) is None


def test_first_request_wins_and_columns_match_too():
    takedowns = TakedownList.from_rows([
        {"takedown_id": "later", "requested_at": datetime(2024, 6, 1, tzinfo=timezone.utc), "urls": [],
         "url_prefixes": [], "domains": ["example.com"], "doc_ids": []},
        {"takedown_id": "first", "requested_at": datetime(2024, 5, 1, tzinfo=timezone.utc), "urls": None,
         "url_prefixes": None, "domains": ["www.example.com"], "doc_ids": None},
    ])
    assert len(takedowns) == 2
    assert takedowns.match("http://www.example.com/") == "first"
    assert takedowns.match("http://shop.example.com/") == "later"
    got = takedowns.match_arrays(pa.array(["http://example.com/", None, "http://other.org/"]),
                                 pa.array([None, None, None], pa.string()))
    assert got.to_pylist() == ["later", None, None]
    assert pickle.loads(pickle.dumps(takedowns)).match("http://www.example.com/") == "first"   # sent to tasks
    assert not TakedownList() and TakedownList().match("http://example.com/") is None


@pytest.mark.parametrize("selectors,message", [
    ({}, "name what to take down"),
    ({"domains": ["https://example.com/"]}, "is not a host name"),
    ({"domains": ["example.com/path"]}, "is not a host name"),
    ({"domains": ["  "]}, "--domain needs a value"),
    ({"urls": ["example.com/page"]}, "is not a URL"),
    ({"url_prefixes": ["/blog/"]}, "is not a URL"),
    ({"doc_ids": ["abc"]}, "is not a doc_id"),
])
def test_bad_selectors_are_clear_errors(selectors, message):
    with pytest.raises(ValueError, match=message):
        Selectors.parse(**selectors)


def test_selectors_are_stored_sorted_once_each():
    s = Selectors.parse(urls=["http://b.org/", "http://a.org/", "http://b.org/"], doc_ids=[DOC])
    assert s.as_dict() == {"urls": ["http://a.org/", "http://b.org/"], "url_prefixes": [], "domains": [],
                           "doc_ids": [DOC]}


def test_the_warc_kernel_keeps_taken_down_records_out_and_counts_them():
    path = real_file("cc-main-2020-34-excerpt.warc.gz")
    before = parse_warc_file(path)
    docs = [r for r in before.rows if r["kind"] == "document"]
    by_doc_id = docs[0]
    takedowns = TakedownList([("t-domain", Selectors.parse(domains=["live-radsport.ch"])),
                              ("t-doc", Selectors.parse(doc_ids=[by_doc_id["doc_id"]]))])
    after = parse_warc_file(path, takedowns=takedowns)
    named = {r["warc_record_id"]: r for r in docs if "live-radsport.ch" in r["host"]}
    assert len(named) == 2   # 06.live-radsport.ch: a subdomain
    down = [r for r in after.rows if r["kind"] == "quarantine"]
    assert {r["warc_record_id"]: r["detail"] for r in down} == {
        **{rid: "takedown t-domain" for rid in named}, by_doc_id["warc_record_id"]: "takedown t-doc"}
    assert all(r["reason"] == "taken_down" and "text" not in r and r["url"] for r in down)
    assert doc_id_for(by_doc_id["warc_record_id"]) == by_doc_id["doc_id"]
    kept = [r for r in after.rows if r["kind"] == "document"]
    assert len(kept) == len(docs) - 3 and all("live-radsport" not in r["url"] for r in kept)
    summary = __import__("json").loads(summary_row(path, after)["detail"])
    assert summary["quarantined_by_reason"] == {"taken_down": 3} and summary["documents"] == 13
    assert summary["records"] == summary["documents"] + sum(summary["skipped"].values()) + 3
    assert Counter(r["kind"] for r in after.rows) == {"document": 13, "quarantine": 3}
