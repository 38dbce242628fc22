"""Deciding HTML from headers and bytes; repeated and resource records in the WARC kernel (no Spark)."""

import gzip

import pytest

from pipelines.kernels.mime import payload_type, sniff
from pipelines.kernels.warc import parse_warc_file

PAGE = b"<html><body><p>" + b"A perfectly ordinary paragraph of text. " * 10 + b"</p></body></html>"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64)


@pytest.mark.parametrize("declared, payload, mime, source, is_html", [
    ("text/html; charset=utf-8", b"", "text/html", "declared", True),
    ("application/xhtml+xml", b"<?xml version='1.0'?>", "application/xhtml+xml", "declared", True),
    ("image/png", PAGE, "image/png", "declared", False),            # a specific type is believed
    (None, b"\n\t <!DOCTYPE html><html>", "text/html", "sniffed", True),
    ("application/octet-stream", b"<TABLE border=1>", "text/html", "sniffed", True),
    ("text/plain", b"<!-- generated --><p>hello", "text/html", "sniffed", True),
    (None, b"\xef\xbb\xbf<html lang=en>", "text/html", "sniffed", True),                     # BOM skipped
    (None, b"<?xml version='1.0'?>\n<!DOCTYPE html PUBLIC '-//W3C//DTD XHTML 1.0//EN'>", "application/xhtml+xml",
     "sniffed", True),
    (None, b"<?xml version='1.0'?><rss version='2.0'>", "text/xml", "sniffed", False),
    (None, PNG, "image/png", "sniffed", False),
    (None, b"%PDF-1.7\n%\xe2\xe3\xcf\xd3", "application/pdf", "sniffed", False),
    (None, b'{"html": "<p>not a page</p>"}', "text/plain", "sniffed", False),
    ("", b"GIF89a\x01\x00", "image/gif", "sniffed", False),
    (None, b"<attach event='x'/>", "text/plain", "sniffed", False),    # not one of the HTML tags
    (None, b"<bold>", "text/plain", "sniffed", False),                 # <b must end at a space or '>'
    (None, b"", "text/plain", "sniffed", False),
])
def test_payload_type(declared, payload, mime, source, is_html):
    found = payload_type(declared, payload)
    assert (found.mime, found.source, found.is_html) == (mime, source, is_html)


def test_only_the_resource_header_is_sniffed():
    assert sniff(b" " * 1500 + b"<html>") == "text/plain"
    assert sniff(b" " * 1000 + b"<html>") == "text/html"
    assert sniff(b"   <ht") == "text/plain"   # whitespace, then less than a pattern


def _record(kind: str, record_id: str, uri: str, block: bytes, content_type: str) -> bytes:
    return gzip.compress(b"WARC/1.0\r\nWARC-Type: " + kind.encode() + b"\r\nWARC-Record-ID: <urn:uuid:" + record_id.encode()
                         + b">\r\nWARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Target-URI: " + uri.encode()
                         + b"\r\nContent-Type: " + content_type.encode() + b"\r\nContent-Length: "
                         + str(len(block)).encode() + b"\r\n\r\n" + block + b"\r\n\r\n")


def _response(record_id: str, uri: str, body: bytes, header: bytes = b"") -> bytes:
    return _record("response", record_id, uri, b"HTTP/1.1 200 OK\r\n" + header + b"\r\n" + body,
                   "application/http; msgtype=response")


def test_a_record_twice_in_one_file_is_kept_once(tmp_path):
    path = tmp_path / "twice.warc.gz"
    first = _response("a", "https://a.example/", PAGE)
    path.write_bytes(first + _response("b", "https://b.example/", PAGE) + first)
    result = parse_warc_file(str(path))
    docs = [r for r in result.rows if r["kind"] == "document"]
    (dup,) = [r for r in result.rows if r["kind"] == "quarantine"]
    assert [d["url"] for d in docs] == ["https://a.example/", "https://b.example/"]
    assert dup["reason"] == "duplicate_record" and dup["url"] == "https://a.example/"
    assert dup["detail"] == f"kept copy: {path} at offset 0" and dup["record_offset"] > docs[1]["record_offset"]
    assert len(result.rows) == result.records == 3


def test_resource_records_carry_html_too(tmp_path):
    path = tmp_path / "resources.warc.gz"
    path.write_bytes(_record("resource", "r1", "file:///site/index.html", PAGE, "text/html; charset=iso-8859-1")
                     + _record("resource", "r2", "file:///site/page", PAGE, "application/octet-stream")
                     + _record("resource", "r3", "file:///site/logo.png", PNG, "application/octet-stream")
                     + _response("h", "https://no-type.example/", PAGE))
    rows = parse_warc_file(str(path)).rows
    docs = {r["url"]: r for r in rows if r["kind"] == "document"}
    assert {u: (d["warc_type"], d["content_type"], d["content_type_source"]) for u, d in docs.items()} == {
        "file:///site/index.html": ("resource", "text/html", "declared"),
        "file:///site/page": ("resource", "application/octet-stream", "sniffed"),
        "https://no-type.example/": ("response", None, "sniffed")}
    assert docs["file:///site/index.html"]["charset"] == "iso-8859-1"
    (png,) = [r for r in rows if r["kind"] == "quarantine"]
    assert png["reason"] == "non_html_payload" and png["detail"] == "image/png (sniffed; declared application/octet-stream)"
