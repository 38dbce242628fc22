"""Filter rules at each side of their thresholds, and language ID on real pages."""

from collections import Counter

import pyarrow as pa
import pytest
from conftest import real_file

from pipelines.config import GopherConfig
from pipelines.kernels.filters import FilterParams, decide_batch, gopher_measures
from pipelines.kernels.warc import parse_warc_file

P = GopherConfig()
GOOD = ("The history of the lighthouse is a story of people and of light that had to be kept burning "
        "with care through every night of the year. ") * 5


def outcome(text, lang="en"):
    return {name: passed for name, _, _, passed in gopher_measures(text, lang, P)}


def test_good_english_text_passes_every_rule():
    assert all(outcome(GOOD).values())


def test_word_count_bounds():
    words = GOOD.split()
    assert outcome(" ".join(words[:50]))["gopher_min_doc_words"]
    assert not outcome(" ".join(words[:49]))["gopher_min_doc_words"]


def test_mean_word_length_bounds():
    assert not outcome("a be to of an " * 20)["gopher_min_avg_word_length"]
    assert not outcome("incomprehensibilities " * 60)["gopher_max_avg_word_length"]


def test_symbol_ratio_and_ellipsis_and_bullets():
    assert not outcome(GOOD + " #tag" * 20)["gopher_symbol_word_ratio"]
    assert outcome(GOOD + " #tag" * 5)["gopher_symbol_word_ratio"]
    assert outcome("\n".join(["the line goes on..."] * 3 + ["plain line of the text"] * 7))["gopher_ellipsis_lines_ratio"]
    assert not outcome("\n".join(["the line goes on..."] * 4 + ["plain line of the text"] * 6))["gopher_ellipsis_lines_ratio"]
    bullets = "\n".join(["• the item with the text"] * 10)
    assert not outcome(bullets)["gopher_bullet_lines_ratio"]


def test_hash_and_ellipsis_ratios_are_separate_limits():
    # 60 words + 4 hashes + 4 ellipses: each ratio ~0.06, their sum ~0.12 (Gopher tests each alone)
    words = " ".join(GOOD.split()[:60])
    assert outcome(words + " #a #b #c #d" + " wait..." * 4)["gopher_symbol_word_ratio"]
    assert not outcome(words + " #a" * 8)["gopher_symbol_word_ratio"]


def test_stop_words_are_counted_distinct():
    base = "Lighthouse keepers trimmed wicks, polished lenses, logged weather, wound clockwork. " * 10
    assert not outcome(base + " the the the")["gopher_stop_words"]     # one distinct stop word
    assert outcome(base + " the of")["gopher_stop_words"]              # two


def test_stop_words_only_for_languages_that_have_a_list():
    no_stop = ("Lighthouse keepers trimmed wicks, polished lenses, logged weather, wound clockwork. ") * 10
    assert not outcome(no_stop, "en")["gopher_stop_words"]
    assert "gopher_stop_words" not in outcome(no_stop, "ru")


def test_unsegmented_languages_skip_word_rules():
    assert set(outcome("这是一个没有空格的中文句子。" * 20, "zh")) == {"gopher_bullet_lines_ratio", "gopher_ellipsis_lines_ratio"}


def test_real_pages_language_and_decisions():
    rows = [r for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows if r["kind"] == "document"]
    batch = pa.RecordBatch.from_pylist([{k: r[k] for k in ("doc_id", "text", "http_status")} for r in rows])
    decisions = decide_batch(batch, FilterParams()).to_pylist()
    langs = Counter(d["detail"] for d in decisions if d["filter"] == "language")
    assert langs["zh"] >= 10 and langs["ru"] == 1
    # one language decision and one status decision per document
    assert Counter(d["filter"] for d in decisions)["language"] == 16
    assert Counter(d["filter"] for d in decisions)["http_status_2xx"] == 16


# fastText lid.176 on each page of the CC-MAIN-2020-34 excerpt (scores rounded to 2 places)
EXCERPT_LANGUAGES = {
    "http://003338.cn/l41/481397.html": ("zh", 0.91),
    "http://01spb.ru/company/": ("ru", 0.98),
    "http://035.psb556.com/24/i/u_1090813/article.html": ("zh", 0.99),
    "http://037426.cn/": ("en", 0.90),  # a Chinese domain whose extracted main text is English
    "http://041696.com/15477/list_6_4.html": ("zh", 0.99),
    "http://044545.com/topic/20200207/015849.html": ("zh", 0.85),
    "http://0513mt.com/index.php/art/detail/id/8884.html": ("zh", 1.00),
    "http://05925.net/index.php/vod/type/id/53.html": ("zh", 0.98),
    "http://06.live-radsport.ch/fahrerstatistik_801/Anthony_Ravard.html": ("de", 0.84),
    "http://06.live-radsport.ch/tippspiel/stats_140_petzi.html": ("de", 0.96),
    "http://0615235.com/02mjqjo%7Bibotij2.btq?odmbtt=106&tdmbtt=121": ("zh", 0.58),
    "http://0755krk.com/76104/list_4_1.html": ("zh", 1.00),
    "http://0760.jxtdw.com/area/sanxiang/": ("zh", 1.00),
    "http://077678u.info/erxiaoshujinguang/list_6_2.html": ("zh", 0.95),
    "http://0900-hovenier.nl/gelderland/oosterbeek/": ("nl", 0.98),
    "http://096355.com/video/11073.html?11073-0-2": ("zh", 0.54),
}


def test_language_of_every_excerpt_page():
    rows = [r for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows if r["kind"] == "document"]
    batch = pa.RecordBatch.from_pylist([{k: r[k] for k in ("doc_id", "text", "http_status")} for r in rows])
    url = {r["doc_id"]: r["url"] for r in rows}
    found = {url[d["doc_id"]]: (d["detail"], d["value"])
             for d in decide_batch(batch, FilterParams()).to_pylist() if d["filter"] == "language"}
    assert {u: lang for u, (lang, _) in found.items()} == {u: lang for u, (lang, _) in EXCERPT_LANGUAGES.items()}
    for u, (_, score) in EXCERPT_LANGUAGES.items():
        assert found[u][1] == pytest.approx(score, abs=0.006), u
