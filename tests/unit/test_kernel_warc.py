"""The WARC kernel on real archives and on damaged input (no Spark)."""

import gzip
from collections import Counter

from conftest import real_file

from pipelines.kernels.warc import parse_warc_file


def kinds(result):
    return Counter(r["kind"] for r in result.rows)


def test_common_crawl_excerpt_every_html_page_becomes_a_document():
    result = parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz"))
    docs = [r for r in result.rows if r["kind"] == "document"]
    assert len(docs) == 16 and result.records == 50
    assert all(d["text"] and d["http_status"] == 200 for d in docs)
    assert result.skipped == {"request": 17, "metadata": 16, "warcinfo": 1}
    assert len({d["doc_id"] for d in docs}) == 16


def test_heritrix_2008_warc_017_html_kept_dns_and_images_not():
    result = parse_warc_file(real_file("ia-heritrix-2008-example.warc.gz"))
    docs = [r for r in result.rows if r["kind"] == "document"]
    quarantined = Counter(r["reason"] for r in result.rows if r["kind"] == "quarantine")
    # 140 text/html responses: 134 with main text, 6 with none (quarantined as empty_text).
    assert len(docs) == 134 and quarantined["empty_text"] == 6
    assert all(d["content_type"] == "text/html" and d["text"] for d in docs)
    assert not any(d["url"].startswith("dns:") for d in docs)
    assert result.skipped["dns"] == 38
    non_html = [r for r in result.rows if r.get("reason") == "non_html_payload"]
    assert sum(1 for r in non_html if r["detail"].startswith("image/")) == 29 + 18 + 8
    # nothing lost: every record is a document, a quarantine row or a counted skip
    assert len(result.rows) + sum(result.skipped.values()) == result.records == 822


def test_wet_conversion_record_is_a_document():
    result = parse_warc_file(real_file("cc-main-2024-22-whirlwind.warc.wet.gz"))
    (doc,) = [r for r in result.rows if r["kind"] == "document"]
    assert doc["warc_type"] == "conversion" and "Escopete" in doc["text"] and doc.get("http_status") is None


def test_truncated_gzip_keeps_records_before_the_damage(tmp_path):
    data = open(real_file("cc-main-2020-34-excerpt.warc.gz"), "rb").read()
    cut = tmp_path / "truncated.warc.gz"
    cut.write_bytes(data[: len(data) // 2])
    result = parse_warc_file(str(cut))
    assert 0 < kinds(result)["document"] < 16
    (bad,) = [r for r in result.rows if r["kind"] == "quarantine"]
    # the record the cut falls in (its block is shorter than declared)
    assert bad["reason"] == "declared_length_mismatch" and bad["source_file"] == str(cut)
    original = parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz"))
    assert _docs_before(original, bad["record_offset"]) == {r["doc_id"] for r in result.rows if r["kind"] == "document"}


def test_non_warc_zero_byte_and_gzipped_junk_are_quarantined(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("this is not a web archive\n" * 10)
    empty = tmp_path / "empty.warc.gz"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.warc.gz"
    junk.write_bytes(gzip.compress(bytes(range(256)) * 50))
    reasons = {p.name: [r["reason"] for r in parse_warc_file(str(p)).rows] for p in (text, empty, junk)}
    assert reasons == {"notes.txt": ["corrupt_file"], "empty.warc.gz": ["empty_file"], "junk.warc.gz": ["corrupt_file"]}


def test_binary_junk_in_html_payload_is_decoded_not_raised(tmp_path):
    body = b"<html><body><p>" + b"Readable words come first here. " * 5 + bytes(range(128, 256)) + b"</p></body></html>"
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + body
    record = (b"WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000001>\r\n"
              b"WARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Target-URI: https://junk.example/\r\n"
              b"Content-Type: application/http; msgtype=response\r\nContent-Length: "
              + str(len(http)).encode() + b"\r\n\r\n" + http + b"\r\n\r\n")
    path = tmp_path / "junk-payload.warc.gz"
    path.write_bytes(gzip.compress(record))
    (doc,) = parse_warc_file(str(path)).rows
    assert doc["kind"] == "document" and doc["text"].startswith("Readable words") and "\ufffd" in doc["text"]


def test_oversize_payload_is_quarantined_not_truncated():
    from pipelines.config import IngestConfig

    result = parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz"), IngestConfig(max_payload_bytes=20_000))
    too_large = [r for r in result.rows if r.get("reason") == "payload_too_large"]
    assert too_large and kinds(result)["document"] + len(too_large) == 16


def test_columns_from_warcinfo_url_and_headers():
    docs = [r for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows if r["kind"] == "document"]
    assert {d["crawl_id"] for d in docs} == {"CC-MAIN-2020-34"}          # warcinfo isPartOf
    d = next(d for d in docs if d["url"] == "http://003338.cn/l41/481397.html")
    assert (d["registered_domain"], d["surt_host"], d["warc_filename"]) == ("003338.cn", "cn,003338",
                                                                            "cc-main-2020-34-excerpt.warc.gz")
    assert d["payload_digest"].startswith("sha1:") and d["extraction"].startswith("resiliparse ")
    ia = [r for r in parse_warc_file(real_file("ia-heritrix-2008-example.warc.gz")).rows if r["kind"] == "document"]
    assert {r["registered_domain"] for r in ia} >= {"archive.org"} and {r["crawl_id"] for r in ia} == {"archive.org-shallow"}


def test_wat_and_whirlwind_warc():
    wat = parse_warc_file(real_file("cc-main-2024-22-whirlwind.warc.wat.gz"))
    assert wat.rows == [] and wat.skipped == {"warcinfo": 1, "metadata": 1}
    warc = parse_warc_file(real_file("cc-main-2024-22-whirlwind.warc.gz"))
    (doc,) = [r for r in warc.rows if r["kind"] == "document"]
    assert doc["url"] == "https://an.wikipedia.org/wiki/Escopete" and doc["crawl_id"] == "CC-MAIN-2024-22"
    assert doc["registered_domain"] == "wikipedia.org" and doc["surt_host"] == "org,wikipedia,an"


def test_file_checksum_is_computed_while_parsing():
    import hashlib

    path = real_file("cc-main-2020-34-excerpt.warc.gz")
    result = parse_warc_file(path)
    assert result.sha256 == hashlib.sha256(open(path, "rb").read()).hexdigest() and result.bytes_read == 135896


def _docs_before(result, offset):
    return {r["doc_id"] for r in result.rows if r["kind"] == "document" and r["record_offset"] < offset}


def test_flipped_bytes_keep_records_before_the_damage(tmp_path):
    original = parse_warc_file(real_file("ia-heritrix-2008-example.warc.gz"))
    data = bytearray(open(real_file("ia-heritrix-2008-example.warc.gz"), "rb").read())
    at = len(data) // 3
    for i in range(at, at + 64):
        data[i] ^= 0xFF
    damaged = tmp_path / "flipped.warc.gz"
    damaged.write_bytes(bytes(data))
    result = parse_warc_file(str(damaged))
    bad = [r for r in result.rows if r["kind"] == "quarantine" and r["reason"] in ("corrupt_file", "record_error")]
    assert bad and all(r["source_file"] == str(damaged) for r in bad)
    kept = {r["doc_id"] for r in result.rows if r["kind"] == "document"}
    assert _docs_before(original, bad[0]["record_offset"]) <= kept  # nothing before the damage is lost
    assert len(kept) < 134


def test_appended_junk_keeps_every_record(tmp_path):
    data = open(real_file("cc-main-2020-34-excerpt.warc.gz"), "rb").read()
    damaged = tmp_path / "junk-tail.warc.gz"
    damaged.write_bytes(data + b"\x00garbage that is neither gzip nor WARC" * 100)
    result = parse_warc_file(str(damaged))
    assert kinds(result)["document"] == 16
    assert [r["reason"] for r in result.rows if r["kind"] == "quarantine"] == ["corrupt_file"]


def test_declared_length_that_lies(tmp_path):
    def record(uri: str, body: bytes, declared: int | None = None) -> bytes:
        http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + body
        n = len(http) if declared is None else declared
        return gzip.compress(b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:" + uri.encode()
                             + b">\r\nWARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Target-URI: https://" + uri.encode()
                             + b".example/\r\nContent-Type: application/http; msgtype=response\r\nContent-Length: "
                             + str(n).encode() + b"\r\n\r\n" + http + b"\r\n\r\n")

    page = b"<html><body><p>" + b"A perfectly ordinary paragraph of text. " * 10 + b"</p></body></html>"
    path = tmp_path / "lying.warc.gz"
    path.write_bytes(record("first", page) + record("liar", page, declared=len(page) * 50) + record("after", page))
    result = parse_warc_file(str(path))
    docs = [r for r in result.rows if r["kind"] == "document"]
    assert docs[0]["url"] == "https://first.example/"            # the record before the lie is kept
    (bad,) = [r for r in result.rows if r["kind"] == "quarantine"]   # the lie is reported, not swallowed
    assert bad["reason"] == "declared_length_mismatch" and bad["url"] == "https://liar.example/"
    short = tmp_path / "short.warc.gz"
    short.write_bytes(record("first", page) + record("liar", page, declared=20) + record("after", page))
    reasons = [r.get("reason") for r in parse_warc_file(str(short)).rows]
    assert reasons[0] is None and "corrupt_file" in reasons


def test_trafilatura_extraction_depends_on_the_page_alone():
    """trafilatura's ``deduplicate`` keeps a process-wide cache of text it has seen and drops it the
    next time: a page re-crawled, or a Spark worker that extracted a similar page earlier, would get
    less text or none, depending on which task ran where. crawlake deduplicates documents in its
    dedup stage; extraction must be a function of the page."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    from pipelines.kernels.warc import extract_text

    with open(real_file("cc-main-2020-34-excerpt.warc.gz"), "rb") as f:
        pages = [r.reader.read().decode("utf-8", "replace")
                 for r in ArchiveIterator(f, record_types=WarcRecordType.response)][:8]
    first = [extract_text(html, "trafilatura") for html in pages]
    assert sum(len(t) for t in first) > 1000
    for _ in range(3):
        assert [extract_text(html, "trafilatura") for html in pages] == first
