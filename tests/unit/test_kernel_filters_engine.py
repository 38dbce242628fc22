"""Presets, the batch kernel (decisions, cleaned text, funnel) and language ID on real pages."""

from collections import Counter

import pyarrow as pa
import pytest
from _filter_texts import PROSE
from conftest import real_file

from pipelines.config import load_config
from pipelines.kernels.filters import PRESETS, FilterParams, filter_batch, filter_document, funnel
from pipelines.kernels.warc import parse_warc_file

URL = "https://sea-and-stone.example/history/lighthouse-keepers"


@pytest.mark.parametrize("preset,steps", [
    ("fineweb", ("http_status", "language", "url", "gopher_repetition", "gopher_quality", "c4", "fineweb", "pii")),
    ("gopher", ("http_status", "language", "url", "gopher_repetition", "gopher_quality")),
    ("c4", ("http_status", "language", "url", "c4")),
    ("minimal", ("http_status", "language", "url")),
])
def test_presets_from_config_and_kernel_agree(preset, steps):
    from_config = FilterParams.from_config(load_config("local", [f"filter.preset={preset}"]).filter)
    assert from_config.steps() == FilterParams.preset(preset).steps() == steps
    if "c4" in steps:
        preset_c4 = next(rule for rule in PRESETS[preset] if rule.name == "c4")
        assert from_config.rule("c4").config.filter_no_terminal_punct is preset_c4.config.filter_no_terminal_punct


def test_fineweb_is_the_default_preset_and_rules_can_be_switched():
    assert FilterParams.from_config(load_config("local").filter).steps()[-1] == "pii"
    cfg = load_config("local", ["filter.preset=minimal", "filter.pii.enabled=true", "filter.url.enabled=false",
                                "filter.c4.enabled=true", "filter.c4.filter_no_terminal_punct=false"])
    p = FilterParams.from_config(cfg.filter)
    assert p.steps() == ("http_status", "language", "c4", "pii") and p.rule("c4").config.filter_no_terminal_punct is False


def test_a_good_page_passes_every_preset():
    for preset in PRESETS:
        r = filter_document("d1", PROSE, "en", 0.95, FilterParams.preset(preset), 200, URL)
        assert r.first_failed is None, (preset, [d for d in r.decisions if not d["passed"]])


def test_english_only_rules_skip_other_languages():
    zh = "城市里的阳台小菜园。\n近年来，越来越多的城市居民开始在阳台上种菜。\n" * 1
    names = {d["filter"] for d in filter_document("z", zh, "zh", 0.99, FilterParams.preset("fineweb")).decisions}
    assert not names & {"gopher_min_doc_words", "gopher_stop_words", "fineweb_list_ratio", "gopher_rep_top_2gram_char_frac"}
    ru = "Белые ночи в Санкт-Петербурге. " * 20
    names = {d["filter"] for d in filter_document("r", ru, "ru", 0.99, FilterParams.preset("fineweb")).decisions}
    assert "gopher_min_doc_words" in names and "gopher_stop_words" not in names


def test_batch_kernel_cleans_text_keeps_columns_and_explains_removals():
    texts = [
        PROSE + "\nContact the keeper at keeper@sea-and-stone.example or 8.8.8.8 for visits.",
        PROSE + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
        "Too short.",
    ]
    batch = pa.RecordBatch.from_pylist([
        {"doc_id": f"d{i}", "url": URL, "text": t, "http_status": 200, "payload_bytes": 10 * i}
        for i, t in enumerate(texts)])
    out = filter_batch(batch, FilterParams.preset("fineweb")).to_pylist()
    assert [r["payload_bytes"] for r in out] == [0, 10, 20]
    assert [r["filter_kept"] for r in out] == [True, False, False]
    assert "keeper@" not in out[0]["text"] and "8.8.8.8" not in out[0]["text"] and "@example." in out[0]["text"]
    pii = {d["filter"]: d["value"] for d in out[0]["decisions"] if d["filter"].startswith("pii_")}
    assert pii == {"pii_emails": 1.0, "pii_ips": 1.0}
    assert out[1]["filter_first_failed"] == "c4"
    for r in out:
        names = [d["filter"] for d in r["decisions"]]
        assert len(names) == len(set(names))  # one row per rule
        assert r["filter_kept"] == all(d["passed"] for d in r["decisions"])


def test_funnel_follows_the_step_order():
    groups = [(None, 3, 300, 280), ("language", 2, 50, 50), ("c4", 1, 40, 10), ("fineweb", 1, 70, 60)]
    f = funnel(groups, ("http_status", "language", "url", "c4", "fineweb"))
    assert [(s["step"], s["documents"], s["words"]) for s in f] == [
        ("input", 7, 460), ("http_status", 7, 460), ("language", 5, 410), ("url", 5, 410),
        ("c4", 4, 340), ("fineweb", 3, 280)]


# The 16 pages of the excerpt (HTTP 200 text/html), their language and lid.176 score.
EXCERPT_LANGUAGES = {
    "http://003338.cn/l41/481397.html": ("zh", 0.913),
    "http://01spb.ru/company/": ("ru", 0.983),
    "http://035.psb556.com/24/i/u_1090813/article.html": ("zh", 0.990),
    "http://037426.cn/": ("en", 0.900),                  # an English "Who are we?" page
    "http://041696.com/15477/list_6_4.html": ("zh", 0.992),
    "http://044545.com/topic/20200207/015849.html": ("zh", 0.848),
    "http://0513mt.com/index.php/art/detail/id/8884.html": ("zh", 0.998),
    "http://05925.net/index.php/vod/type/id/53.html": ("zh", 0.983),
    "http://06.live-radsport.ch/fahrerstatistik_801/Anthony_Ravard.html": ("de", 0.842),
    "http://06.live-radsport.ch/tippspiel/stats_140_petzi.html": ("de", 0.956),
    "http://0615235.com/02mjqjo%7Bibotij2.btq?odmbtt=106&tdmbtt=121": ("zh", 0.580),
    "http://0755krk.com/76104/list_4_1.html": ("zh", 0.998),
    "http://0760.jxtdw.com/area/sanxiang/": ("zh", 0.997),
    "http://077678u.info/erxiaoshujinguang/list_6_2.html": ("zh", 0.953),
    "http://0900-hovenier.nl/gelderland/oosterbeek/": ("nl", 0.981),
    "http://096355.com/video/11073.html?11073-0-2": ("zh", 0.539),
}


@pytest.fixture(scope="module")
def excerpt():
    rows = [r for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows if r["kind"] == "document"]
    batch = pa.RecordBatch.from_pylist([{k: r[k] for k in ("doc_id", "url", "host", "text", "http_status")}
                                        for r in rows])
    return filter_batch(batch, FilterParams.preset("fineweb")).to_pylist()


def test_excerpt_language_of_every_page(excerpt):
    got = {r["url"]: (r["language"], r["language_score"]) for r in excerpt}
    assert got.keys() == EXCERPT_LANGUAGES.keys()
    for url, (lang, score) in EXCERPT_LANGUAGES.items():
        assert got[url][0] == lang and got[url][1] == pytest.approx(score, abs=0.01), url
    assert Counter(lang for lang, _ in got.values()) == {"zh": 11, "de": 2, "ru": 1, "en": 1, "nl": 1}


def test_excerpt_every_removed_page_is_explained(excerpt):
    for r in excerpt:
        failed = [d for d in r["decisions"] if not d["passed"]]
        assert r["filter_kept"] is not bool(failed)
        language = next(d for d in r["decisions"] if d["filter"] == "language")
        assert language["detail"] == r["language"]
        assert language["passed"] is (r["language_score"] >= 0.65)
    # the two low-confidence Chinese pages leave at the language step
    assert {r["url"] for r in excerpt if r["filter_first_failed"] == "language"} == {
        u for u, (_, s) in EXCERPT_LANGUAGES.items() if s < 0.65}
