"""URL-derived columns: canonical URL (w3lib), registered domain (tldextract with its bundled
Public Suffix List snapshot, no network) and SURT host key (the Internet Archive's ``surt``)."""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

import surt
import tldextract
from w3lib.url import canonicalize_url


@lru_cache(maxsize=1)
def _extractor() -> tldextract.TLDExtract:
    # suffix_list_urls=() keeps tldextract on the snapshot shipped in the package: no fetch.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def url_columns(url: str) -> dict[str, str | None]:
    """``url_normalized``, ``host``, ``registered_domain``, ``surt_host`` for an http(s) URL.

    Unparseable URLs give None values rather than raising.
    """
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return {"url_normalized": None, "host": None, "registered_domain": None, "surt_host": None}
    try:
        normalized = canonicalize_url(url)
    except (ValueError, UnicodeError):
        normalized = None
    try:
        surt_host = surt.surt(url).split(")", 1)[0]
    except Exception:  # surt raises assorted errors on junk URLs
        surt_host = None
    parts = _extractor()(host or "")
    registered = ".".join(p for p in (parts.domain, parts.suffix) if p) if parts.domain and parts.suffix else None
    return {"url_normalized": normalized, "host": host, "registered_domain": registered, "surt_host": surt_host}
