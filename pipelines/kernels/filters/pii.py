"""PII replacement, as datatrove's ``PIIFormatter`` (used by FineWeb): e-mail addresses and public
IP addresses are replaced with placeholders; private, loopback, link-local and reserved addresses
(``ipaddress`` ``is_global`` false) are left, they identify nobody.

Differences from datatrove, on purpose: e-mails match case-insensitively (datatrove's pattern is
lower-case only); IPv6 addresses are replaced too; the placeholder for a match is chosen by a hash
of the matched text instead of a per-process round robin, so a re-run gives the same text.

The values, placeholders included, are ``filter.pii`` (:class:`~pipelines.config.PiiConfig`);
the rule is :class:`PiiFormatter`, which changes the text and counts the replacements in the
decision rows ``pii_emails`` and ``pii_ips`` (threshold inf, always passed).
"""

from __future__ import annotations

import ipaddress
import math
import re
import zlib
from collections.abc import Sequence

from pipelines.config import PiiConfig
from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters.rule import Document, Rule

EMAIL = re.compile(
    r"\b[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+"
    r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?|\[(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|"
    r"[01]?[0-9][0-9]?|[a-z0-9-]*[a-z0-9]:)])", re.IGNORECASE)
IPV4 = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)(?![\d])")
# Candidates only (hex groups and colons, at least two colons); ipaddress decides what is an address.
IPV6 = re.compile(r"(?<![\w:.])(?:[0-9a-f]{0,4}:){2,7}(?:[0-9a-f]{1,4}|:)(?![\w:])", re.IGNORECASE)

# The patterns above open with a lookbehind or a word boundary, which stops Python's re from
# skipping ahead to a possible first character, so run on a whole page they test every position
# (~1 ms per 8 KB page for IPV4). Every match lies inside a span found fast below, and the spans'
# edges are what the lookarounds already demand, so running the patterns on the spans alone gives
# exactly the matches of the whole text:
#   IPv4: a maximal run of digits and dots (the run's neighbours pass (?<![\d.]) and (?!\d));
#   e-mail: a whitespace-free token holding "@" (a match has no whitespace; the token's start is
#   a word boundary exactly when the text's is, whitespace and the string start both being non-word);
#   IPv6: a maximal run of word characters, colons and dots holding a colon (the run's neighbours
#   pass (?<![\w:.]) and (?![\w:])); a valid address has "::" or seven colons.
_DIGIT_DOT_RUN = re.compile(r"[\d.]*")
_TOKEN = re.compile(r"\S+")
_WORD_COLON_DOT_RUN = re.compile(r"[\w:.]*")

class PiiFormatter(Rule):
    """PII replacement as a filter rule (step and values ``pii``); it changes the text."""

    name = "pii"
    section = "pii"
    Config = PiiConfig

    def transform(self, doc: Document) -> tuple[str, Sequence[Measure]]:
        text, n_email, n_ip = replace_pii(doc.text, self.config)
        return text, [Measure("pii_emails", float(n_email), math.inf, True),
                      Measure("pii_ips", float(n_ip), math.inf, True)]


def _pick(options: Sequence[str], matched: str) -> str:
    return options[zlib.crc32(matched.encode("utf-8", "surrogatepass")) % len(options)]


def _is_replaceable_ip(candidate: str, only_public: bool) -> bool:
    try:
        ip = ipaddress.ip_address(candidate)
    except ValueError:
        return False
    return ip.is_global or not only_public


def replace_pii(text: str, p: PiiConfig) -> tuple[str, int, int]:
    """``(text, e-mails replaced, IP addresses replaced)`` under the ``filter.pii`` values ``p``.
    Never raises."""
    n_email = n_ip = 0
    if p.emails and "@" in text:
        def email(m: re.Match) -> str:
            nonlocal n_email
            n_email += 1
            return _pick(p.email_replacement, m.group(0))
        text = _in_runs(text, "@", _not_space, _TOKEN, _always, lambda token: EMAIL.sub(email, token))
    if p.ips:
        def ip(m: re.Match, options: Sequence[str]) -> str:
            nonlocal n_ip
            found = m.group(0)
            if found in options or not _is_replaceable_ip(found, p.only_public_ips):
                return found
            n_ip += 1
            return _pick(options, found)
        if "." in text:
            text = _in_runs(text, ".", _digit_or_dot, _DIGIT_DOT_RUN, _ipv4_dots,
                            lambda run: IPV4.sub(lambda m: ip(m, p.ipv4_replacement), run))
        if "::" in text or text.count(":") >= 7:
            text = _in_runs(text, ":", _word_colon_or_dot, _WORD_COLON_DOT_RUN, _ipv6_colons,
                            lambda run: IPV6.sub(lambda m: ip(m, p.ipv6_replacement), run))
    return text, n_email, n_ip


def _in_runs(text: str, mark: str, inside, tail: re.Pattern, wanted, replace) -> str:
    """``text`` with each maximal run of characters around an occurrence of ``mark`` passed
    through ``replace``: ``tail`` matches the run from ``mark`` on, ``inside(char)`` says whether a
    character before ``mark`` belongs to it. Only runs whose part from ``mark`` on satisfies
    ``wanted`` are expanded and replaced; that part holds every ``mark`` of the run, as the mark
    found is the run's first. str.find and a literal-free ``match`` skip the text between marks
    in C."""
    out, done, n = [], 0, len(text)
    at = text.find(mark)
    while at >= 0:
        end = tail.match(text, at).end()
        if wanted(text[at:end]):
            start = at
            while start > done and inside(text[start - 1]):
                start -= 1
            out += (text[done:start], replace(text[start:end]))
            done = end
        at = text.find(mark, end) if end < n else -1
    out.append(text[done:])
    return "".join(out)


def _not_space(char: str) -> bool:
    return not char.isspace()


def _digit_or_dot(char: str) -> bool:
    return char == "." or char.isdecimal()     # re's \d is str.isdecimal


def _word_colon_or_dot(char: str) -> bool:
    return char in "_:." or char.isalnum()     # re's \w is str.isalnum or "_"


def _always(tail: str) -> bool:
    return True


def _ipv4_dots(tail: str) -> bool:
    return tail.count(".") >= 3                # an address has three dots


def _ipv6_colons(tail: str) -> bool:
    return "::" in tail or tail.count(":") >= 7  # a full address has seven colons, else "::"
