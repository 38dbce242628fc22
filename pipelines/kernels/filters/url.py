"""URL filter, after datatrove's ``URLFilter`` (used by FineWeb and, as a blocklist, by Gopher's
MassiveWeb and RefinedWeb): user-supplied domain and URL blocklists plus a built-in adult-keyword
heuristic on the URL's words.

Blocklist files (UTF-8 text, the format of the UT1 / squidGuard lists that datatrove downloads):
one entry per line; blank lines and lines starting with ``#`` are ignored; entries are
case-insensitive.

* **domain list**: ``example.com`` blocks that host and every subdomain (``www.example.com``,
  ``a.b.example.com``); a leading ``*.`` or ``.`` is accepted and means the same.
* **URL list**: ``example.com/path`` (scheme and a leading ``www.`` optional, ignored) blocks that
  URL and every URL below it at a ``/`` boundary (``example.com/path/page.html``, not
  ``example.com/pathology``).

The adult heuristic (on by default) splits the lower-cased URL on non-alphanumerics: any *hard*
word fails the document, two or more *soft* words fail it, and a *subword* anywhere in the URL
with its punctuation removed fails it. The built-in lists (:data:`ADULT_HARD_WORDS`, ...) are
short, English-centric stand-ins for datatrove's asset lists; add entries through the blocklists.

The values are ``filter.url`` (:class:`~pipelines.config.UrlFilterConfig`); the rule is
:class:`UrlFilter`, which reads the blocklist files on the driver.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipelines.config import ConfigError, RuleConfig, UrlFilterConfig
from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters.rule import Document, Rule

# Short on purpose: a soft word alone fails nothing, so only words that are rare outside adult
# sites are listed, to keep "hot-weather" or "live-cams-of-birds" pages.
ADULT_HARD_WORDS = frozenset({
    "porn", "porno", "pornography", "xxx", "hentai", "nsfw", "xvideos", "xnxx", "xhamster", "redtube",
    "youporn", "pornhub", "camgirl", "camgirls", "bdsm", "blowjob", "cumshot",
})
ADULT_SOFT_WORDS = frozenset({
    "sex", "sexy", "adult", "nude", "nudes", "naked", "milf", "fetish", "erotic", "erotica", "babes",
    "busty", "lingerie", "stripper", "webcam", "cams", "hookup", "escort", "escorts",
})
ADULT_SUBWORDS = frozenset({"porn", "xvideo", "xnxx", "xhamster", "hentai", "pornhub"})

_SPLIT = re.compile(r"[^a-z0-9]+")


class UrlFilter(Rule):
    """The URL rules as a filter rule (step and values ``url``); documents without a URL are not
    judged. ``blocked_domains`` and ``blocked_urls``: the entries of the blocklists
    (:func:`load_domain_blocklist`, :func:`load_url_blocklist`); :meth:`prepare` adds those of the
    files in ``config.domain_blocklists`` and ``config.url_blocklists``. The adult word lists are
    class attributes (:data:`ADULT_HARD_WORDS`, ...): a subclass may change them."""

    name = "url"
    section = "url"
    Config = UrlFilterConfig
    hard_words: frozenset[str] = ADULT_HARD_WORDS
    soft_words: frozenset[str] = ADULT_SOFT_WORDS
    subwords: frozenset[str] = ADULT_SUBWORDS

    def __init__(self, config: RuleConfig | Mapping[str, Any] | None = None, /, *,
                 blocked_domains: Iterable[str] = (), blocked_urls: Iterable[str] = (), **values: Any) -> None:
        super().__init__(config, **values)
        self.blocked_domains = frozenset(blocked_domains)
        self.blocked_urls = frozenset(blocked_urls)

    def measures(self, doc: Document) -> Sequence[Measure]:
        return [] if doc.url is None else url_measures(doc.url, self, doc.host)

    def prepare(self) -> "UrlFilter":
        """Reads the blocklist files; raises ConfigError naming ``filter.url.domain_blocklists`` or
        ``filter.url.url_blocklists`` for a file that cannot be read."""
        cfg = self.config
        if not cfg.domain_blocklists and not cfg.url_blocklists:
            return self
        out = self.with_config(cfg)
        out.blocked_domains = self.blocked_domains | _read_lists(
            "filter.url.domain_blocklists", cfg.domain_blocklists, load_domain_blocklist)
        out.blocked_urls = self.blocked_urls | _read_lists("filter.url.url_blocklists", cfg.url_blocklists,
                                                           load_url_blocklist)
        return out


def _read_lists(key: str, paths: list[str], loader: Callable[[str], frozenset[str]]) -> frozenset[str]:
    out: set[str] = set()
    for path in paths:
        try:
            out |= loader(path)
        except OSError as exc:
            raise ConfigError(f"bad value for config key {key!r}: cannot read {path!r}: {exc}") from None
    return frozenset(out)


def _entries(path: str | Path) -> list[str]:
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip().lower()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _url_key(url: str) -> str:
    """``host/path?query`` without scheme, leading ``www.`` and trailing ``/``, lower-cased."""
    url = url.strip().lower()
    if "://" in url:
        url = url.split("://", 1)[1]
    url = url.removeprefix("www.")
    return url.rstrip("/")


def load_domain_blocklist(path: str | Path) -> frozenset[str]:
    """Domains from a blocklist file (format in the module docstring). Raises OSError if unreadable."""
    return frozenset(e.removeprefix("*.").lstrip(".").rstrip(".") for e in _entries(path))


def load_url_blocklist(path: str | Path) -> frozenset[str]:
    """URL prefixes from a blocklist file (format in the module docstring). Raises OSError if unreadable."""
    return frozenset(_url_key(e) for e in _entries(path))


def _host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def blocked_domain(host: str, domains: frozenset[str]) -> str | None:
    """The blocklist entry that ``host`` equals or is a subdomain of, else None."""
    labels = host.lower().rstrip(".").split(".")
    for i in range(len(labels)):
        candidate = ".".join(labels[i:])
        if candidate in domains:
            return candidate
    return None


def blocked_url(url: str, urls: frozenset[str]) -> str | None:
    """The blocklist entry that ``url`` equals or lies below (at a ``/`` boundary), else None."""
    key = _url_key(url)
    path_end = len(key)
    while True:
        candidate = key[:path_end]
        if candidate in urls:
            return candidate
        path_end = candidate.rfind("/")
        if path_end <= 0:
            return None


def url_measures(url: str, p: UrlFilter, host: str | None = None) -> list[Measure]:
    """Measures for one URL by the rule ``p`` (``host`` defaults to the URL's). Values are counts of
    matches and pass at ≤ threshold: ``url_domain_blocklist`` and ``url_blocklist`` (only when that
    list is non-empty, detail = the entry), ``url_adult_words`` (hard words, ≤ 0),
    ``url_adult_soft_words`` (≤ ``soft_word_threshold`` - 1), ``url_adult_subwords`` (≤ 0). Never
    raises."""
    out: list[Measure] = []
    url = url or ""
    if p.blocked_domains:
        hit = blocked_domain(host or _host_of(url), p.blocked_domains)
        out.append(Measure("url_domain_blocklist", float(hit is not None), 0.0, hit is None, hit))
    if p.blocked_urls:
        hit = blocked_url(url, p.blocked_urls)
        out.append(Measure("url_blocklist", float(hit is not None), 0.0, hit is None, hit))
    if p.config.adult_keywords:
        lower = url.lower()
        url_words = set(_SPLIT.split(lower))
        hard = sorted(url_words & p.hard_words)
        out.append(Measure("url_adult_words", float(len(hard)), 0.0, not hard, ",".join(hard) or None))
        soft = sorted(url_words & p.soft_words)
        limit = p.config.soft_word_threshold - 1
        out.append(Measure("url_adult_soft_words", float(len(soft)), float(limit), len(soft) <= limit,
                           ",".join(soft) or None))
        squashed = _SPLIT.sub("", lower)
        sub = sorted(w for w in p.subwords if w in squashed)
        out.append(Measure("url_adult_subwords", float(len(sub)), 0.0, not sub, ",".join(sub) or None))
    return out
