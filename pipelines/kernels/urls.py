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


@lru_cache(maxsize=65536)
def _host_columns(scheme: str, netloc: str, host: str) -> tuple[str | None, str | None]:
    """``(registered_domain, surt_host)``; both depend on the URL's authority only, and a crawl
    file holds many URLs per host, so they are cached per (scheme, netloc)."""
    try:
        surt_host = surt.surt(f"{scheme}://{netloc}/").split(")", 1)[0]
    except Exception:  # surt raises assorted errors on junk URLs
        surt_host = None
    parts = _extractor()(host)
    registered = ".".join((parts.domain, parts.suffix)) if parts.domain and parts.suffix else None
    return registered, surt_host


def url_columns(url: str) -> dict[str, str | None]:
    """``url_normalized``, ``host``, ``registered_domain``, ``surt_host`` for an http(s) URL.

    Unparseable URLs give None values rather than raising.
    """
    try:
        split = urlsplit(url)
        host = split.hostname
    except ValueError:
        return {"url_normalized": None, "host": None, "registered_domain": None, "surt_host": None}
    try:
        normalized = canonicalize_url(url)
    except (ValueError, UnicodeError):
        normalized = None
    registered, surt_host = _host_columns(split.scheme, split.netloc, host or "")
    return {"url_normalized": normalized, "host": host, "registered_domain": registered, "surt_host": surt_host}
