"""WARC/WET file → document and quarantine rows (no Spark).

Parsing is fastwarc's (WARC 1.0/1.1 and the older 0.17/0.18, gzip-per-record or plain), main-text
extraction resiliparse's ``extract_plain_text(main_content=True)``. Every record of a file ends in
exactly one place:

* ``document``: a ``response`` with an HTML payload and non-empty extracted text, or a WET
  ``conversion`` record;
* ``quarantine``: a record that could not become a document, with ``reason`` (see ``REASONS``),
  the source file and the record's byte offset; damage to the file itself (truncated gzip, a
  non-WARC file, a length that lies) is one quarantine row at the offset where reading stopped,
  and the records before it are kept;
* skipped: ``request``, ``metadata``, ``warcinfo``, ``revisit``, ``dns:`` responses and the like,
  counted by type in the file's ``summary`` row.

:func:`parse_files_to_batches` is what the engines call: an iterator of ``pyarrow.RecordBatch``
with :data:`ROW_SCHEMA`, one row per document/quarantine record plus one ``summary`` row per file.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urlsplit

import fsspec
import pyarrow as pa
from fastwarc.warc import ArchiveIterator, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding

REASONS = {
    "empty_text": "HTML page with no extractable main text",
    "non_html_payload": "HTTP response whose content type is not HTML (image, PDF, script, ...)",
    "payload_too_large": "HTTP payload over ingest.max_payload_bytes",
    "text_too_long": "extracted text over ingest.max_text_chars",
    "no_http_headers": "response record whose HTTP header block could not be parsed",
    "record_error": "the record could not be read or decoded",
    "corrupt_file": "the file stopped being readable WARC here (truncated gzip, not WARC, bad length)",
    "empty_file": "the file holds no WARC record",
}

ROW_SCHEMA = pa.schema([
    ("kind", pa.string()),            # document | quarantine | summary
    ("doc_id", pa.string()),
    ("url", pa.string()),
    ("host", pa.string()),
    ("crawl_date", pa.timestamp("us", tz="UTC")),
    ("warc_record_id", pa.string()),
    ("warc_type", pa.string()),
    ("http_status", pa.int32()),
    ("content_type", pa.string()),
    ("charset", pa.string()),
    ("text", pa.string()),
    ("text_length", pa.int32()),
    ("payload_bytes", pa.int64()),
    ("source_file", pa.string()),
    ("record_offset", pa.int64()),
    ("reason", pa.string()),
    ("detail", pa.string()),
])


@dataclass(frozen=True)
class IngestLimits:
    """Caps from ``ingest`` config: bytes for payloads, characters for text."""
    max_payload_bytes: int = 10 * 1024 * 1024
    max_text_chars: int = 1_000_000
    min_text_chars: int = 1
    html_content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml")


@dataclass
class FileResult:
    rows: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    records: int = 0


def doc_id_for(record_id: str) -> str:
    """Stable document key: first 32 hex chars of sha256(WARC-Record-ID)."""
    return hashlib.sha256(record_id.encode("utf-8")).hexdigest()[:32]


def decode_html(payload: bytes, http_charset: str | None) -> tuple[str, str]:
    """Decode an HTML payload: HTTP charset, then ``<meta>`` charset, then detection.

    Undecodable bytes are replaced, never raised. Returns ``(text, charset_used)``.
    """
    charset = (http_charset or "").strip().lower() or None
    if charset is None:
        charset = detect_encoding(payload, from_html_meta=True)  # meta tag, then statistics
    try:
        text = bytes_to_str(payload, charset, errors="replace", fallback_encodings=("utf-8", "cp1252"))
    except LookupError:  # an unknown charset name in the header
        charset = detect_encoding(payload)
        text = bytes_to_str(payload, charset, errors="replace")
    return text, charset


def _base_row(source_file: str, offset: int, record) -> dict:
    headers = record.headers
    url = headers.get("WARC-Target-URI") or ""
    date = record.record_date
    return {
        "url": url.strip("<>") or None,
        "host": (urlsplit(url.strip("<>")).hostname or None) if url else None,
        "crawl_date": date.astimezone(timezone.utc) if isinstance(date, datetime) else None,
        "warc_record_id": record.record_id,
        "warc_type": str(record.record_type),
        "source_file": source_file,
        "record_offset": int(record.stream_pos),
    }


def _quarantine(row: dict, reason: str, detail: str | None = None) -> dict:
    return {**row, "kind": "quarantine", "reason": reason, "detail": detail}


def _response_row(row: dict, record, limits: IngestLimits) -> dict | None:
    """A response record → document/quarantine row, or None when it is skipped (dns:)."""
    if (row["url"] or "").startswith("dns:"):
        return None
    http = record.http_headers
    if http is None:
        return _quarantine(row, "no_http_headers")
    row["http_status"] = int(http.status_code) if http.status_code else None
    ctype = (record.http_content_type or "").lower() or None
    row["content_type"] = ctype
    payload = record.reader.read(limits.max_payload_bytes + 1)
    if len(payload) > limits.max_payload_bytes:
        record.reader.consume()
        return _quarantine(row, "payload_too_large", f"> {limits.max_payload_bytes} bytes")
    row["payload_bytes"] = len(payload)
    if ctype not in limits.html_content_types:
        return _quarantine(row, "non_html_payload", ctype)
    html, charset = decode_html(payload, record.http_charset)
    row["charset"] = charset
    return _text_row(row, extract_plain_text(html, main_content=True), limits)


def _text_row(row: dict, text: str, limits: IngestLimits) -> dict:
    text = text.strip()
    if len(text) < max(limits.min_text_chars, 1):
        return _quarantine(row, "empty_text", f"{len(text)} chars")
    if len(text) > limits.max_text_chars:
        return _quarantine(row, "text_too_long", f"{len(text)} chars")
    row.update(kind="document", doc_id=doc_id_for(row["warc_record_id"]), text=text, text_length=len(text))
    return row


def _conversion_row(row: dict, record, limits: IngestLimits) -> dict:
    """WET conversion record: the block is already extracted UTF-8 text."""
    payload = record.reader.read(limits.max_payload_bytes + 1)
    if len(payload) > limits.max_payload_bytes:
        record.reader.consume()
        return _quarantine(row, "payload_too_large", f"> {limits.max_payload_bytes} bytes")
    row.update(payload_bytes=len(payload), charset="utf-8",
               content_type=record.headers.get("Content-Type") or "text/plain")
    return _text_row(row, payload.decode("utf-8", errors="replace"), limits)


def parse_warc_stream(stream, source_file: str, limits: IngestLimits = IngestLimits()) -> FileResult:
    """Parse one WARC/WET byte stream (gzip or plain) into rows. Never raises on bad input."""
    result = FileResult()
    last_end = 0
    iterator = ArchiveIterator(stream, parse_http=True, record_types=WarcRecordType.any_type)
    try:
        for record in iterator:
            result.records += 1
            row = {"source_file": source_file, "record_offset": int(record.stream_pos)}
            try:
                row = _base_row(source_file, record.stream_pos, record)
                rtype = record.record_type
                if rtype == WarcRecordType.response:
                    out = _response_row(row, record, limits)
                    if out is None:
                        result.skipped["dns"] += 1
                        continue
                elif rtype == WarcRecordType.conversion:
                    out = _conversion_row(row, record, limits)
                else:
                    result.skipped[str(rtype)] += 1
                    continue
            except Exception as exc:  # one bad record must not stop the file
                out = _quarantine(row, "record_error", f"{type(exc).__name__}: {exc}"[:500])
            result.rows.append(out)
            last_end = record.stream_pos
    except Exception as exc:  # damage in the container itself: keep what came before
        result.rows.append({"kind": "quarantine", "source_file": source_file, "record_offset": last_end,
                            "reason": "corrupt_file", "detail": f"{type(exc).__name__}: {exc}"[:500]})
    return result


def _check_tail(stream_factory, source_file: str, result: FileResult) -> None:
    """fastwarc stops quietly at damage; tell a clean end from a truncated or non-WARC file."""
    with stream_factory() as raw:
        head = raw.read(8)
    if not head:
        result.rows.append({"kind": "quarantine", "source_file": source_file, "record_offset": 0,
                            "reason": "empty_file", "detail": "0 bytes"})
        return
    is_gzip = head[:2] == b"\x1f\x8b"
    if result.records == 0:
        detail = "gzip stream without WARC records" if is_gzip else f"starts with {head!r}"
        result.rows.append({"kind": "quarantine", "source_file": source_file, "record_offset": 0,
                            "reason": "corrupt_file", "detail": detail})
        return
    if is_gzip:
        import gzip
        import zlib
        try:
            with stream_factory() as raw, gzip.GzipFile(fileobj=raw) as gz:
                while gz.read(1 << 20):
                    pass
        except (EOFError, OSError, zlib.error) as exc:
            offsets = [r["record_offset"] for r in result.rows if r.get("record_offset") is not None]
            result.rows.append({"kind": "quarantine", "source_file": source_file,
                                "record_offset": max(offsets, default=0), "reason": "corrupt_file",
                                "detail": f"truncated or corrupt gzip after the last record read: {exc}"[:500]})


def parse_warc_file(path: str, limits: IngestLimits = IngestLimits()) -> FileResult:
    """Parse a local path or fsspec URL (``s3://``, ``https://``). Raises only if it cannot be opened."""
    def opener():
        return fsspec.open(path, "rb").open()

    with opener() as stream:
        result = parse_warc_stream(stream, path, limits)
    if not any(r.get("reason") == "corrupt_file" for r in result.rows):
        _check_tail(opener, path, result)
    return result


def summary_row(path: str, result: FileResult) -> dict:
    kinds = Counter(r["kind"] for r in result.rows)
    return {"kind": "summary", "source_file": path, "record_offset": -1,
            "detail": json.dumps({"records": result.records, "documents": kinds["document"],
                                  "quarantined": kinds["quarantine"], "skipped": dict(result.skipped)},
                                 sort_keys=True)}


def parse_files_to_batches(paths: Iterable[str], limits: IngestLimits = IngestLimits(),
                           batch_rows: int = 256) -> Iterator[pa.RecordBatch]:
    """Parse files one after another; yield :data:`ROW_SCHEMA` batches of at most ``batch_rows``."""
    for path in paths:
        result = parse_warc_file(path, limits)
        rows = result.rows + [summary_row(path, result)]
        for start in range(0, len(rows), batch_rows):
            yield pa.RecordBatch.from_pylist(rows[start:start + batch_rows], schema=ROW_SCHEMA)
