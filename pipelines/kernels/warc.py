"""WARC/WET file → document and quarantine rows (no Spark).

Parsing is fastwarc's (WARC 1.0/1.1 and the older 0.17/0.18, gzip-per-record or plain), main-text
extraction resiliparse's ``extract_plain_text(main_content=True)``. Every record of a file ends in
exactly one place:

* ``document``: a ``response`` or ``resource`` with an HTML payload and non-empty extracted text,
  or a WET ``conversion`` record. HTML is what ``Content-Type`` declares, or, when it is absent or
  generic (``application/octet-stream``, ``text/plain``, ...), what the payload's first bytes say
  (:mod:`pipelines.kernels.mime`, WHATWG MIME sniffing); ``content_type_source`` records which;
* ``quarantine``: a record that could not become a document, with ``reason`` (see ``REASONS``),
  the source file and the record's byte offset; damage to the file itself (truncated gzip, a
  non-WARC file, a length that lies) is one quarantine row at the offset where reading stopped,
  and the records before it are kept; a record whose ``doc_id`` appeared earlier in the same file
  is a ``duplicate_record`` naming the offset of the kept (first) copy; a record a takedown
  names (``ops.takedowns``, :mod:`pipelines.kernels.takedown`) is a ``taken_down`` row without
  its text, whatever it would have been, its ``detail`` naming the takedown;
* skipped: ``request``, ``metadata``, ``warcinfo``, ``revisit``, ``dns:`` responses and the like,
  counted by type in the file's ``summary`` row.

:func:`parse_files_to_batches` is what the engines call: an iterator of ``pyarrow.RecordBatch``
with :data:`ROW_SCHEMA`, one row per document/quarantine record plus one ``summary`` row per file.
Its ``limits`` is the ``ingest`` config section as it is (:class:`~pipelines.config.IngestConfig`:
``max_payload_bytes``, ``max_text_chars``, ``min_text_chars``, ``html_content_types``,
``generic_content_types``, ``extractor``; the other keys are the stage's); its ``takedowns`` the
requests in force (:class:`~pipelines.kernels.takedown.TakedownList`; None or empty: none).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from datetime import datetime, timezone

import fsspec
import pyarrow as pa
from fastwarc.warc import ArchiveIterator, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding

from pipelines.config import IngestConfig
from pipelines.kernels import mime, urls
from pipelines.kernels.takedown import TakedownList

REASONS = {
    "empty_text": "HTML page with no extractable main text",
    "non_html_payload": "response or resource whose payload is not HTML (image, PDF, script, ...), declared or sniffed",
    "duplicate_record": "a record whose doc_id another file (or an earlier offset) already holds: the kept copy is named",
    "taken_down": "a record a takedown names (crawlake forget, ops.takedowns): kept out, its text not stored",
    "payload_too_large": "HTTP payload over ingest.max_payload_bytes",
    "text_too_long": "extracted text over ingest.max_text_chars",
    "no_http_headers": "response record whose HTTP header block could not be parsed",
    "record_error": "the record could not be read or decoded",
    "corrupt_file": "the file stopped being readable WARC here (truncated gzip, not WARC, bad length)",
    "declared_length_mismatch": "the record's Content-Length is longer than its block: the file ends or the next records were read as its payload",
    "empty_file": "the file holds no WARC record",
    "unreadable_file": "the file could not be opened or read (missing object, permissions, network)",
}

ROW_SCHEMA = pa.schema([
    ("kind", pa.string()),            # document | quarantine | summary
    ("doc_id", pa.string()),
    ("url", pa.string()),
    ("url_normalized", pa.string()),
    ("host", pa.string()),
    ("registered_domain", pa.string()),
    ("surt_host", pa.string()),
    ("crawl_date", pa.timestamp("us", tz="UTC")),
    ("crawl_id", pa.string()),
    ("warc_record_id", pa.string()),
    ("warc_type", pa.string()),
    ("http_status", pa.int32()),
    ("content_type", pa.string()),
    ("content_type_source", pa.string()),
    ("content_language", pa.string()),
    ("last_modified", pa.string()),
    ("payload_digest", pa.string()),
    ("charset", pa.string()),
    ("extraction", pa.string()),
    ("text", pa.string()),
    ("text_length", pa.int32()),
    ("payload_bytes", pa.int64()),
    ("source_file", pa.string()),
    ("warc_filename", pa.string()),
    ("record_offset", pa.int64()),
    ("reason", pa.string()),
    ("detail", pa.string()),
])


@dataclass
class FileResult:
    rows: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    records: int = 0
    bytes_read: int = 0          # compressed bytes of the file
    sha256: str | None = None    # of the file's bytes, computed while parsing
    crawl_id: str | None = None


_CC_CRAWL = re.compile(r"(CC-MAIN-\d{4}-\d{2})")


@lru_cache(maxsize=None)
def _extractor_version(name: str) -> str:
    # cached: importlib.metadata parses the package's METADATA file on every call
    from importlib.metadata import version

    return f"{name} {version(name)}"


def extract_text(html: str, extractor: str = "resiliparse") -> str:
    """Main text of an HTML page: resiliparse main-content (default) or trafilatura (FineWeb's
    choice: higher precision, slower). Returns "" when nothing is found. Raises ValueError for an
    unknown extractor name."""
    if extractor == "resiliparse":
        return extract_plain_text(html, main_content=True)
    if extractor == "trafilatura":
        import trafilatura

        # deduplicate=False: trafilatura's deduplication drops text its process has seen before, so a
        # page's text would depend on which pages the same worker extracted earlier; crawlake's dedup
        # stage removes duplicate documents instead
        return trafilatura.extract(html, favor_precision=True, include_comments=False, deduplicate=False) or ""
    raise ValueError(f"unknown extractor {extractor!r} (resiliparse | trafilatura)")


class _HashingReader:
    """File wrapper that hashes and counts the bytes fastwarc reads (one pass over the file)."""

    def __init__(self, raw):
        self.raw, self.sha, self.count = raw, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        self.count += len(data)
        return data

    def tell(self) -> int:  # fastwarc asks where it is; bytes handed out so far
        return self.count

    def readable(self) -> bool:
        return True


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


def _base_row(source_file: str, record, crawl_id: str | None) -> dict:
    """Columns every record has; the URL-derived ones are added by :func:`_with_url_columns` only
    for records that become rows (most of a WARC's records are skipped requests and metadata)."""
    headers = record.headers
    url = (headers.get("WARC-Target-URI") or "").strip("<>")
    date = record.record_date
    return {
        "url": url or None,
        "crawl_date": date.astimezone(timezone.utc) if isinstance(date, datetime) else None,
        "crawl_id": crawl_id,
        "warc_record_id": record.record_id,
        "warc_type": str(record.record_type),
        "payload_digest": headers.get("WARC-Payload-Digest"),
        "source_file": source_file,
        "warc_filename": os.path.basename(source_file.rstrip("/")),
        "record_offset": int(record.stream_pos),
    }


def _with_url_columns(row: dict) -> dict:
    url = row["url"]
    if url and not url.startswith("dns:"):
        row.update(urls.url_columns(url))
    return row


#: Columns a quarantine row keeps of a document row (``bronze.quarantine``'s).
_QUARANTINE_KEYS = ("source_file", "warc_filename", "record_offset", "warc_record_id", "url")
#: Quarantine reasons that stand for damage to a file, not for one of its records: a file's
#: records add up to its documents, skipped records and its other quarantine rows.
FILE_DAMAGE_REASONS = ("corrupt_file", "empty_file", "unreadable_file")


def duplicate_detail(kept_file: str, kept_offset: int) -> str:
    """The ``detail`` of a ``duplicate_record`` quarantine row: where the kept copy is."""
    return f"kept copy: {kept_file} at offset {kept_offset}"


def _quarantine(row: dict, reason: str, detail: str | None = None) -> dict:
    return {**row, "kind": "quarantine", "reason": reason, "detail": detail}


def _read_payload(record, limits: IngestConfig) -> tuple[bytes | None, dict | None]:
    """``(payload, None)``, or ``(None, (reason, detail))`` when it is over the cap or shorter than declared."""
    payload = record.reader.read(limits.max_payload_bytes + 1)
    if len(payload) > limits.max_payload_bytes:
        record.reader.consume()
        return None, ("payload_too_large", f"> {limits.max_payload_bytes} bytes")
    if record.reader.tell() < record.content_length:
        # fastwarc reads on into the following gzip members: what follows is lost with this record.
        return None, ("declared_length_mismatch", f"declared {record.content_length} bytes, found {record.reader.tell()}")
    return payload, None


def _response_row(row: dict, record, limits: IngestConfig) -> dict | None:
    """A response record → document/quarantine row, or None when it is skipped (dns:)."""
    if (row["url"] or "").startswith("dns:"):
        return None
    _with_url_columns(row)
    http = record.http_headers
    if http is None:
        return _quarantine(row, "no_http_headers")
    row["http_status"] = int(http.status_code) if http.status_code else None
    row["content_type"] = mime.essence(record.http_content_type)
    row["content_language"] = http.get("Content-Language")
    row["last_modified"] = http.get("Last-Modified")
    return _html_row(row, record, record.http_charset, limits)


def _html_row(row: dict, record, charset: str | None, limits: IngestConfig) -> dict:
    """Read the payload; HTML (declared or sniffed) becomes a document, anything else is quarantined."""
    payload, problem = _read_payload(record, limits)
    if problem:
        return _quarantine(row, *problem)
    row["payload_bytes"] = len(payload)
    found = mime.payload_type(row["content_type"], payload, limits.html_content_types, limits.generic_content_types)
    row["content_type_source"] = found.source
    if not found.is_html:
        detail = found.mime if found.source == "declared" else f"{found.mime} (sniffed; declared {row['content_type'] or 'none'})"
        return _quarantine(row, "non_html_payload", detail)
    html, charset = decode_html(payload, charset)
    row["charset"] = charset
    row["extraction"] = _extractor_version(limits.extractor)
    return _text_row(row, extract_text(html, limits.extractor), limits)


def _resource_row(row: dict, record, limits: IngestConfig) -> dict:
    """A WARC ``resource`` record (no HTTP header; the WARC ``Content-Type`` describes the block):
    HTML becomes a document as a response's would."""
    _with_url_columns(row)
    declared = record.headers.get("Content-Type")
    row["content_type"] = mime.essence(declared)
    charset = re.search(r"charset\s*=\s*\"?([^\s;\"]+)", declared or "", re.IGNORECASE)
    return _html_row(row, record, charset.group(1) if charset else None, limits)


def _text_row(row: dict, text: str, limits: IngestConfig) -> dict:
    text = text.strip()
    if len(text) < max(limits.min_text_chars, 1):
        return _quarantine(row, "empty_text", f"{len(text)} chars")
    if len(text) > limits.max_text_chars:
        return _quarantine(row, "text_too_long", f"{len(text)} chars")
    row.update(kind="document", doc_id=doc_id_for(row["warc_record_id"]), text=text, text_length=len(text))
    return row


def _conversion_row(row: dict, record, limits: IngestConfig) -> dict:
    """WET conversion record: the block is already extracted UTF-8 text."""
    _with_url_columns(row)
    payload, problem = _read_payload(record, limits)
    if problem:
        return _quarantine(row, *problem)
    row.update(payload_bytes=len(payload), charset="utf-8", extraction="wet",
               content_type=mime.essence(record.headers.get("Content-Type")) or "text/plain",
               content_type_source="declared")
    return _text_row(row, payload.decode("utf-8", errors="replace"), limits)


def _taken_down(out: dict, takedowns: TakedownList | None) -> dict:
    """``out`` as a ``taken_down`` quarantine row (no text) when a takedown names its record."""
    if not takedowns:
        return out
    doc_id = out.get("doc_id") or (doc_id_for(out["warc_record_id"]) if out.get("warc_record_id") else None)
    found = takedowns.match(out.get("url"), doc_id, out.get("url_normalized"))
    if found is None:
        return out
    return _quarantine({k: v for k, v in out.items() if k in _QUARANTINE_KEYS}, "taken_down", f"takedown {found}")


def parse_warc_stream(stream, source_file: str, limits: IngestConfig = IngestConfig(),
                      takedowns: TakedownList | None = None) -> FileResult:
    """Parse one WARC/WET byte stream (gzip or plain) into rows; records ``takedowns`` names
    become ``taken_down`` rows. Never raises on bad input."""
    result = FileResult()
    seen: dict[str, int] = {}   # doc_id -> offset of its first record in this file
    last_end = 0
    name = os.path.basename(source_file.rstrip("/"))
    found = _CC_CRAWL.search(name)
    result.crawl_id = found.group(1) if found else None  # warcinfo's isPartOf wins when present
    iterator = ArchiveIterator(stream, parse_http=True, record_types=WarcRecordType.any_type)
    try:
        for record in iterator:
            result.records += 1
            row = {"source_file": source_file, "warc_filename": name, "record_offset": int(record.stream_pos)}
            try:
                row = _base_row(source_file, record, result.crawl_id)
                rtype = record.record_type
                if rtype == WarcRecordType.warcinfo:
                    result.crawl_id = _warcinfo_part_of(record) or result.crawl_id
                    result.skipped[str(rtype)] += 1
                    continue
                if rtype == WarcRecordType.response:
                    out = _response_row(row, record, limits)
                    if out is None:
                        result.skipped["dns"] += 1
                        continue
                elif rtype == WarcRecordType.conversion:
                    out = _conversion_row(row, record, limits)
                elif rtype == WarcRecordType.resource:
                    out = _resource_row(row, record, limits)
                else:
                    result.skipped[str(rtype)] += 1
                    continue
            except Exception as exc:  # one bad record must not stop the file
                out = _quarantine(row, "record_error", f"{type(exc).__name__}: {exc}"[:500])
            out = _taken_down(out, takedowns)
            if out["kind"] == "document":
                first = seen.setdefault(out["doc_id"], out["record_offset"])
                if first != out["record_offset"]:   # the same record id twice in one file
                    out = _quarantine({k: v for k, v in out.items() if k in _QUARANTINE_KEYS}, "duplicate_record",
                                      duplicate_detail(source_file, first))
            result.rows.append(out)
            last_end = record.stream_pos
    except Exception as exc:  # damage in the container itself: keep what came before
        result.rows.append({"kind": "quarantine", "source_file": source_file, "warc_filename": name,
                            "record_offset": last_end, "reason": "corrupt_file",
                            "detail": f"{type(exc).__name__}: {exc}"[:500]})
    return result


def _warcinfo_part_of(record) -> str | None:
    """``isPartOf`` of a warcinfo record (Common Crawl: the crawl id, e.g. CC-MAIN-2020-34)."""
    for line in record.reader.read(65536).decode("utf-8", errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "ispartof" and value.strip():
            return value.strip()
    return None


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
        offsets = [r["record_offset"] for r in result.rows if r.get("record_offset") is not None]
        last = max(offsets, default=0)
        try:
            _decompress_to_end(stream_factory, last)
        except (EOFError, OSError, zlib.error) as exc:
            result.rows.append({"kind": "quarantine", "source_file": source_file,
                                "record_offset": last, "reason": "corrupt_file",
                                "detail": f"truncated or corrupt gzip after the last record read: {exc}"[:500]})


def _decompress_to_end(stream_factory, offset: int) -> None:
    """Inflate every gzip member from ``offset`` to the end of the file; raise on damage.

    In a gzip-per-record file (Common Crawl's layout) ``offset`` is the last record's member, so
    only the tail is read again, not the whole file. Where no member starts there (one gzip
    stream around the whole file), the whole file is inflated.
    """
    with stream_factory() as raw:
        raw.seek(offset)
        if raw.read(2) != b"\x1f\x8b":
            offset = 0
    with stream_factory() as raw:
        raw.seek(offset)
        with gzip.GzipFile(fileobj=raw) as gz:
            while gz.read(1 << 20):
                pass


def parse_warc_file(path: str, limits: IngestConfig = IngestConfig(), takedowns: TakedownList | None = None) -> FileResult:
    """Parse a local path or fsspec URL (``s3://``, ``https://``). Raises only if it cannot be opened."""
    def opener():
        return fsspec.open(path, "rb").open()

    with opener() as raw:
        stream = _HashingReader(raw)
        result = parse_warc_stream(stream, path, limits, takedowns)
        while stream.read(1 << 20):  # finish the digest if fastwarc stopped early
            pass
        result.bytes_read, result.sha256 = stream.count, stream.sha.hexdigest()
    # One row per damage: a record cut short already says where the file broke.
    if not any(r.get("reason") in ("corrupt_file", "declared_length_mismatch") for r in result.rows):
        _check_tail(opener, path, result)
    return result


def summary_row(path: str, result: FileResult) -> dict:
    """The file's ``summary`` row; its ``detail`` (JSON) accounts for every record:
    ``records == documents + sum(skipped.values()) + sum(quarantined_by_reason.values())``, where
    ``quarantined_by_reason`` counts record quarantine rows and ``damage`` the file's
    :data:`FILE_DAMAGE_REASONS` rows (``quarantined`` = both); ``content_type_source`` counts
    documents by ``declared``/``sniffed``."""
    kinds = Counter(r["kind"] for r in result.rows)
    reasons = Counter(r["reason"] for r in result.rows if r["kind"] == "quarantine")
    damage = {reason: reasons.pop(reason) for reason in FILE_DAMAGE_REASONS if reason in reasons}
    sources = Counter(r.get("content_type_source") for r in result.rows if r["kind"] == "document")
    return {"kind": "summary", "source_file": path, "record_offset": -1,
            "detail": json.dumps({"records": result.records, "documents": kinds["document"],
                                  "quarantined": kinds["quarantine"], "skipped": dict(result.skipped),
                                  "quarantined_by_reason": dict(reasons), "damage": damage,
                                  "duplicates": reasons.get("duplicate_record", 0),
                                  "content_type_source": dict(sources),
                                  "bytes": result.bytes_read, "sha256": result.sha256}, sort_keys=True)}


def parse_files_to_batches(paths: Iterable[str], limits: IngestConfig = IngestConfig(),
                           batch_rows: int = 256, takedowns: TakedownList | None = None) -> Iterator[pa.RecordBatch]:
    """Parse files one after another; yield :data:`ROW_SCHEMA` batches of at most ``batch_rows``."""
    for path in paths:
        try:
            result = parse_warc_file(path, limits, takedowns)
        except (OSError, ValueError) as exc:  # e.g. a listed object that is gone: a row, not a crash
            result = FileResult(rows=[{"kind": "quarantine", "source_file": path, "record_offset": 0,
                                       "warc_filename": os.path.basename(path.rstrip("/")),
                                       "reason": "unreadable_file", "detail": f"{type(exc).__name__}: {exc}"[:500]}])
        rows = result.rows + [summary_row(path, result)]
        for start in range(0, len(rows), batch_rows):
            yield pa.RecordBatch.from_pylist(rows[start:start + batch_rows], schema=ROW_SCHEMA)
