"""Which records a takedown names (no Spark, no files): ``crawlake forget`` finds the documents to
remove with it, and ingest keeps the same records out of the lake with it.

A takedown request names records by any mix of four selector kinds (:data:`SELECTOR_KINDS`):

``url``
    the page itself: a record whose URL as crawled equals the value, or whose canonical form
    (w3lib's ``canonicalize_url``, as ``bronze.documents.url_normalized``) equals the value's
    (so ``http://Example.com/a?b=1&a=2`` names ``http://example.com/a?a=2&b=1``);
``url_prefix``
    every URL that starts with the value, as crawled or in canonical form (``https://example.com/blog/``);
``domain``
    a host name: the host itself and every subdomain (``example.com`` names ``example.com``,
    ``www.example.com`` and ``a.b.example.com``, not ``notexample.com``); compared in lower case,
    without a trailing dot. A URL or a path is not a domain (ValueError);
``doc_id``
    the ``doc_id`` of ``bronze.documents`` (32 hex digits): sha256 of the WARC-Record-ID, so it
    names one capture, and a record carries it from the moment it is parsed (quarantine rows
    through their ``warc_record_id``).

:class:`TakedownList` holds every request of ``ops.takedowns`` and answers, per record, the id of
the first request that names it (None: none does), in O(labels of the host) plus the prefixes.
It is small and picklable: the ingest stage reads the list once on the driver and hands it to
its tasks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from urllib.parse import urlsplit

import pyarrow as pa

#: Selector kinds as ``crawlake forget`` spells them (``--url``, ``--url-prefix``, ``--domain``,
#: ``--doc-id``) and as ``ops.takedowns`` stores them (``urls``, ``url_prefixes``, ``domains``, ``doc_ids``).
SELECTOR_KINDS = ("url", "url_prefix", "domain", "doc_id")
_DOC_ID = re.compile(r"^[0-9a-f]{32}$")
_HOST = re.compile(r"^[^\s/:?#@]+$")


@lru_cache(maxsize=65536)
def canonical_url(url: str) -> str | None:
    """w3lib's canonical form of ``url`` (what ingest stores as ``url_normalized``); None when it
    cannot be canonicalized."""
    from w3lib.url import canonicalize_url

    try:
        return canonicalize_url(url)
    except (ValueError, UnicodeError):
        return None


def url_host(url: str) -> str | None:
    """The lower-case host of ``url`` without a trailing dot; None when it has none."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    host = (host or "").rstrip(".")
    return host or None


@dataclass(frozen=True)
class Selectors:
    """What one takedown request names: values of each kind, as given (domains lower-cased,
    without a trailing dot), each tuple sorted and without repeats. Build with :meth:`parse`."""
    urls: tuple[str, ...] = ()
    url_prefixes: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    doc_ids: tuple[str, ...] = ()

    @classmethod
    def parse(cls, urls: Iterable[str] = (), url_prefixes: Iterable[str] = (), domains: Iterable[str] = (),
              doc_ids: Iterable[str] = ()) -> "Selectors":
        """Check and normalize a request's selectors. Raises ValueError naming the first bad value:
        no selector at all, an empty value, a URL or prefix without ``scheme://host``, a domain
        that is a URL or holds a path, port or spaces, a doc_id that is not 32 hex digits."""
        def clean(values: Iterable[str]) -> list[str]:
            return [v.strip() for v in values]

        urls, url_prefixes, domains, doc_ids = clean(urls), clean(url_prefixes), clean(domains), clean(doc_ids)
        for kind, values in (("--url", urls), ("--url-prefix", url_prefixes), ("--domain", domains), ("--doc-id", doc_ids)):
            if any(not v for v in values):
                raise ValueError(f"{kind} needs a value, got an empty one")
        for kind, values in (("--url", urls), ("--url-prefix", url_prefixes)):
            for v in values:
                if url_host(v) is None:
                    raise ValueError(f"{kind} {v!r} is not a URL: it needs scheme://host (e.g. https://example.com/page)")
        normalized = []
        for v in domains:
            d = v.lower().rstrip(".")
            if not _HOST.match(d) or d.startswith("."):
                raise ValueError(f"--domain {v!r} is not a host name (e.g. example.com; use --url-prefix for a path)")
            normalized.append(d)
        for v in doc_ids:
            if not _DOC_ID.match(v):
                raise ValueError(f"--doc-id {v!r} is not a doc_id (32 lower-case hex digits)")
        out = cls(*(tuple(sorted(set(values))) for values in (urls, url_prefixes, normalized, doc_ids)))
        if out.empty:
            raise ValueError("name what to take down: --url, --url-prefix, --domain or --doc-id (each repeatable)")
        return out

    @property
    def empty(self) -> bool:
        return not (self.urls or self.url_prefixes or self.domains or self.doc_ids)

    def as_dict(self) -> dict[str, list[str]]:
        """``{"urls": [...], "url_prefixes": [...], "domains": [...], "doc_ids": [...]}``: the
        ``ops.takedowns`` columns."""
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}


class TakedownList:
    """Every takedown request in force: ``[(takedown_id, Selectors)]``, oldest first.
    :meth:`match` gives the id of the first request naming a record."""

    def __init__(self, requests: Sequence[tuple[str, Selectors]] = ()):
        self.requests = tuple(requests)
        self._urls: dict[str, str] = {}        # URL as given and its canonical form -> takedown id
        self._prefixes: list[tuple[str, str]] = []
        self._domains: dict[str, str] = {}
        self._doc_ids: dict[str, str] = {}
        for takedown_id, s in self.requests:
            for url in s.urls:
                self._urls.setdefault(url, takedown_id)
                if (canon := canonical_url(url)) is not None:
                    self._urls.setdefault(canon, takedown_id)
            self._prefixes += [(p, takedown_id) for p in s.url_prefixes]
            for d in s.domains:
                self._domains.setdefault(d, takedown_id)
            for d in s.doc_ids:
                self._doc_ids.setdefault(d, takedown_id)

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping]) -> "TakedownList":
        """From ``ops.takedowns`` rows (``takedown_id``, ``requested_at``, ``urls``,
        ``url_prefixes``, ``domains``, ``doc_ids``), oldest request first."""
        rows = sorted(rows, key=lambda r: (r["requested_at"], r["takedown_id"]))
        return cls([(r["takedown_id"], Selectors(*(tuple(r[f.name] or ()) for f in fields(Selectors))))
                    for r in rows])

    def __bool__(self) -> bool:
        return bool(self.requests)

    def __len__(self) -> int:
        return len(self.requests)

    def match(self, url: str | None, doc_id: str | None = None, url_normalized: str | None = None) -> str | None:
        """The id of the first request naming the record with this ``url`` (as crawled; its
        canonical form is ``url_normalized`` when the caller has it, else computed when a url
        selector needs it) and ``doc_id``; None when none does."""
        if doc_id is not None and doc_id in self._doc_ids:
            return self._doc_ids[doc_id]
        if not url:
            return None
        if self._urls or self._prefixes:
            canon = url_normalized or canonical_url(url)
            forms = (url,) if canon is None or canon == url else (url, canon)
            for form in forms:
                if form in self._urls:
                    return self._urls[form]
            for prefix, takedown_id in self._prefixes:
                if any(form.startswith(prefix) for form in forms):
                    return takedown_id
        if self._domains and (host := url_host(url)) is not None:
            labels = host.split(".")
            for i in range(len(labels)):   # the host, then each parent domain
                if (found := self._domains.get(".".join(labels[i:]))) is not None:
                    return found
        return None

    def match_arrays(self, urls: pa.Array | pa.ChunkedArray, doc_ids: pa.Array | pa.ChunkedArray | None = None) -> pa.Array:
        """:meth:`match` over columns: a string array of takedown ids, null where no request names
        the row (``pyarrow.compute.is_valid`` of it is the mask)."""
        url_list = urls.to_pylist()
        id_list = doc_ids.to_pylist() if doc_ids is not None else [None] * len(url_list)
        return pa.array([self.match(u, d) for u, d in zip(url_list, id_list)], pa.string())
