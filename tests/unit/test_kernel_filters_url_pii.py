"""URL blocklists and adult heuristic; PII replacement (datatrove's URLFilter and PIIFormatter)."""

import pytest

from pipelines.config import PiiConfig
from pipelines.kernels.filters import (
    UrlFilter,
    load_domain_blocklist,
    load_url_blocklist,
    replace_pii,
    url_measures,
)


@pytest.fixture
def lists(tmp_path):
    (tmp_path / "domains.txt").write_text(
        "# blocked domains\n\nblocked.example\n*.wild.example\nSHOUTY.example\n", encoding="utf-8")
    (tmp_path / "urls.txt").write_text(
        "# blocked URLs\nhttps://www.news.example/bad/page\nnews.example/section\n", encoding="utf-8")
    return UrlFilter(blocked_domains=load_domain_blocklist(tmp_path / "domains.txt"),
                     blocked_urls=load_url_blocklist(tmp_path / "urls.txt"))


def outcome(url, p):
    return {m.filter: m.passed for m in url_measures(url, p)}


def test_blocklist_files_skip_comments_and_blank_lines(lists):
    assert lists.blocked_domains == {"blocked.example", "wild.example", "shouty.example"}
    assert lists.blocked_urls == {"news.example/bad/page", "news.example/section"}


@pytest.mark.parametrize("url,passed", [
    ("https://blocked.example/any/page", False),
    ("http://www.blocked.example/", False),            # subdomains too
    ("https://a.b.wild.example/x", False),
    ("https://Shouty.Example/", False),                # case-insensitive
    ("https://notblocked.example/", True),             # a label boundary, not a suffix
    ("https://blocked.example.org/", True),
])
def test_domain_blocklist(lists, url, passed):
    assert outcome(url, lists)["url_domain_blocklist"] is passed


@pytest.mark.parametrize("url,passed", [
    ("https://news.example/bad/page", False),
    ("http://www.news.example/bad/page/", False),
    ("https://news.example/section/article-1.html", False),   # below a blocked prefix
    ("https://news.example/sections", True),                   # not at a '/' boundary
    ("https://news.example/bad", True),
])
def test_url_blocklist(lists, url, passed):
    assert outcome(url, lists)["url_blocklist"] is passed


def test_blocklist_rules_only_run_with_lists():
    assert set(outcome("https://a.example/", UrlFilter())) == {
        "url_adult_words", "url_adult_soft_words", "url_adult_subwords"}
    assert outcome("https://a.example/", UrlFilter(adult_keywords=False)) == {}


@pytest.mark.parametrize("url,rule,passed", [
    ("https://videos.example/free-porn-clips", "url_adult_words", False),
    ("https://shop.example/xxx-large-shirts", "url_adult_words", False),
    ("https://tea.example/green-tea-guide", "url_adult_words", True),
    ("https://photos.example/nude-beach", "url_adult_soft_words", True),        # one soft word: 1 <= 1
    ("https://photos.example/nude-sexy-beach", "url_adult_soft_words", False),  # two: fails
    ("https://site.example/bestpornsite", "url_adult_subwords", False),         # inside a word
    ("https://site.example/best-sites", "url_adult_subwords", True),
])
def test_adult_keyword_heuristic(url, rule, passed):
    assert outcome(url, UrlFilter())[rule] is passed


# --- PII ---

@pytest.mark.parametrize("text,emails", [
    ("Write to jane.doe@mail.example.com today.", 1),
    ("Write to Jane.Doe@Mail.Example.COM today.", 1),
    ("a@b.example and c@d.example", 2),
    ("No address here, just an @ sign.", 0),
])
def test_emails_are_replaced_and_counted(text, emails):
    out, n_email, n_ip = replace_pii(text, PiiConfig())
    assert n_email == emails and n_ip == 0
    assert ("example.com" in out or "example.org" in out) if emails else out == text
    assert "jane" not in out.lower() and "@d.example" not in out


@pytest.mark.parametrize("ip,replaced", [
    ("8.8.8.8", True), ("93.184.216.34", True),
    ("192.168.1.20", False), ("10.0.0.1", False), ("127.0.0.1", False), ("172.16.5.4", False),
    ("2606:4700:4700::1111", True), ("::1", False), ("fe80::1ff:fe23:4567:890a", False),
    ("2001:db8::5", False),
])
def test_public_ips_are_replaced_private_ones_left(ip, replaced):
    text = f"The server at {ip} answered."
    out, _, n_ip = replace_pii(text, PiiConfig())
    assert (n_ip == 1) is replaced and ((ip in out) is not replaced)


def test_times_and_versions_are_not_ips():
    text = "Doors open at 12:30:45, version 1.2.3 ships, call 555-1234."
    assert replace_pii(text, PiiConfig()) == (text, 0, 0)


def test_replacement_is_deterministic_and_configurable():
    text = "mail bob@x.example from 8.8.8.8"
    assert replace_pii(text, PiiConfig()) == replace_pii(text, PiiConfig())
    out, n_email, n_ip = replace_pii(text, PiiConfig(emails=False, ipv4_replacement=("0.0.0.0",)))
    assert out == "mail bob@x.example from 0.0.0.0" and (n_email, n_ip) == (0, 1)
    out, _, n_ip = replace_pii(text, PiiConfig(only_public_ips=False, ips=False))
    assert "8.8.8.8" in out and n_ip == 0


def test_placeholders_are_not_replaced_again():
    once, _, _ = replace_pii("see 8.8.8.8 and 2606:4700:4700::1111", PiiConfig())
    assert replace_pii(once, PiiConfig())[2] == 0


@pytest.mark.parametrize("text,emails,ips", [
    ("x@y.example. then 8.8.8.8.", 1, 1),          # trailing dots end neither match
    ("(jane@mail.example),bob@x.example", 2, 0),   # two addresses in one whitespace token
    ("a{b@x.example", 1, 0),                       # a word boundary inside a token starts a match
    ("v1.2.3.4, 18.8.8.8.8, 5.8.8.8.8, 08.8.8.8", 0, 3),  # a dot may follow; "08" is no address
    ("8.8.8.8\n9.9.9.9\t1.1.1.1", 0, 3),
    ("@@@ x@ @y", 0, 0),
])
def test_matches_at_token_and_run_edges(text, emails, ips):
    """The patterns run only on whitespace tokens holding "@" and on digit-dot runs; these edges
    must give what the patterns give on the whole text."""
    import ipaddress

    from pipelines.kernels.filters.pii import EMAIL, IPV4

    def is_address(s: str) -> bool:
        try:
            return bool(ipaddress.ip_address(s))
        except ValueError:
            return False

    _, n_email, n_ip = replace_pii(text, PiiConfig(only_public_ips=False))
    assert (n_email, n_ip) == (emails, ips)
    whole_text = EMAIL.sub("E", text)  # the patterns on the whole text, as before the speed-up
    assert n_email == len(EMAIL.findall(text)) and n_ip == sum(map(is_address, IPV4.findall(whole_text)))


def test_span_search_equals_the_patterns_on_the_whole_text():
    """``replace_pii`` runs its patterns only on the spans a match can lie in; on random strings
    dense in digits, dots, colons, hex letters and "@", that gives what the patterns give when run
    over the whole text (as datatrove does), replacements and counts alike."""
    import random
    import re

    from pipelines.kernels.filters import pii

    def whole_text(text: str, p: PiiConfig) -> tuple[str, int, int]:
        counts = [0, 0]

        def sub(options, slot, only_valid):
            def replace(m: re.Match) -> str:
                found = m.group(0)
                if only_valid and (found in options or not pii._is_replaceable_ip(found, p.only_public_ips)):
                    return found
                counts[slot] += 1
                return pii._pick(options, found)
            return replace
        text = pii.EMAIL.sub(sub(p.email_replacement, 0, False), text)
        text = pii.IPV4.sub(sub(p.ipv4_replacement, 1, True), text)
        if "::" in text or text.count(":") >= 7:
            text = pii.IPV6.sub(sub(p.ipv6_replacement, 1, True), text)
        return text, counts[0], counts[1]

    rng = random.Random(7)
    alphabet = "0123456789" * 3 + "....::::@abcdefxé_- \n[]{}()"
    params = PiiConfig(only_public_ips=False)
    found = [0, 0]
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 48)))
        expected = whole_text(text, params)
        assert replace_pii(text, params) == expected, text
        found[0] += expected[1]
        found[1] += expected[2]
    assert min(found) > 50, found  # the strings did exercise both patterns
