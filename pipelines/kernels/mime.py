"""Is a payload HTML? What its ``Content-Type`` declares, or, when that is absent or generic, what
its bytes say (no Spark, no files).

Sniffing follows the WHATWG MIME Sniffing Standard, §7.1 "Identifying a resource with an unknown
MIME type" (https://mimesniff.spec.whatwg.org/), as implemented by Scrapy's ``xtractmime``: the
first 1445 bytes, leading whitespace skipped, must open with one of the HTML patterns
(``<!DOCTYPE HTML``, ``<HTML``, ``<HEAD``, ``<SCRIPT``, ``<BODY``, ``<P``, ``<!--`` …) followed by a
space or ``>``; images, PDF, archives, media, JSON and plain text never are. Two extensions for
archived pages, where browsers would decode first: a UTF-8 byte-order mark before the markup is
skipped, and an XML document whose root is ``<html`` (XHTML served without a type) is HTML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xtractmime import RESOURCE_HEADER_BUFFER_LENGTH, extract_mime

#: Declared types that say nothing about the payload: sniffed like an absent header.
GENERIC_CONTENT_TYPES = ("application/octet-stream", "binary/octet-stream", "application/unknown",
                         "unknown/unknown", "text/plain", "*/*", "application/x-unknown-content-type")
#: Declared types that are HTML.
HTML_CONTENT_TYPES = ("text/html", "application/xhtml+xml")

_UTF8_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b"\t\n\x0c\r "
_XHTML_ROOT = re.compile(rb"<(?:!doctype\s+html|html)[\s>]", re.IGNORECASE)


@dataclass(frozen=True)
class PayloadType:
    """``mime``: the type the payload is taken as (lower case, no parameters; None when neither
    declared nor recognizable); ``source``: ``"declared"`` (the header said it) or ``"sniffed"``
    (from the payload's first bytes); ``is_html``: whether it is extracted as a page."""
    mime: str | None
    source: str
    is_html: bool


def essence(content_type: str | None) -> str | None:
    """``type/subtype`` of a Content-Type header value, lower case, without parameters; None for
    an absent or empty value."""
    value = (content_type or "").split(";", 1)[0].strip().lower()
    return value or None


def sniff(payload: bytes) -> str:
    """The WHATWG "unknown MIME type" of ``payload`` (its first 1445 bytes count), with the two
    archive extensions of this module's docstring; ``application/octet-stream`` or ``text/plain``
    when nothing more specific matches."""
    head = payload[:RESOURCE_HEADER_BUFFER_LENGTH + len(_UTF8_BOM)]
    if head.startswith(_UTF8_BOM):
        head = head[len(_UTF8_BOM):]
    head = head[:RESOURCE_HEADER_BUFFER_LENGTH]
    try:
        found = extract_mime(head, content_types=None, http_origin=True)
    except IndexError:
        # xtractmime 0.2.1 indexes past the end when whitespace is followed by fewer bytes than a
        # pattern; what follows the whitespace is then what the patterns are matched against
        found = extract_mime(head.lstrip(_WHITESPACE), content_types=None, http_origin=True)
    mime = found.decode("ascii") if found else "application/octet-stream"
    if mime == "text/xml" and _XHTML_ROOT.search(head):
        return "application/xhtml+xml"
    return mime


def payload_type(declared: str | None, payload: bytes, html_types=HTML_CONTENT_TYPES,
                 generic_types=GENERIC_CONTENT_TYPES) -> PayloadType:
    """Decide whether ``payload`` is HTML. ``declared`` is the raw Content-Type header (None when
    absent); a declared type in ``html_types`` is HTML, any other specific type is not, and an
    absent one or one in ``generic_types`` is decided by :func:`sniff`."""
    mime = essence(declared)
    if mime is not None and mime not in generic_types:
        return PayloadType(mime, "declared", mime in html_types)
    found = sniff(payload)
    return PayloadType(found, "sniffed", found in html_types)
