"""FineWeb's own rules (Penedo et al. 2024, *The FineWeb Datasets*, §3.5), as datatrove's
``FineWebQualityFilter``, on the non-blank lines of the text (after C4 line removal when C4 runs):

* fraction of lines ending in terminal punctuation ≥ 0.12 (``fineweb_line_punct_ratio``);
* fraction of lines of ≤ 30 characters ≤ 0.67 (``fineweb_short_line_ratio``);
* characters in duplicate lines / characters without newlines ≤ 0.01 (``fineweb_char_dup_ratio``);
* newlines per word ≤ 0.3, i.e. not a list (``fineweb_list_ratio``; needs words, so skipped for
  unsegmented languages; datatrove counts NLTK tokens, crawlake whitespace words).

A text with no non-blank line fails ``fineweb_line_punct_ratio`` (datatrove: "empty").
The values are ``filter.fineweb`` (:class:`~pipelines.config.FineWebConfig`); the rule is
:class:`FineWebQualityFilter`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.config import FineWebConfig
from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import (
    TERMINAL_PUNCTUATION,
    UNSEGMENTED_LANGUAGES,
    find_duplicates,
    words,
)
from pipelines.kernels.filters.rule import Document, Rule


class FineWebQualityFilter(Rule):
    """FineWeb's rules as a filter rule (step and values ``fineweb``)."""

    name = "fineweb"
    section = "fineweb"
    Config = FineWebConfig

    def measures(self, doc: Document) -> Sequence[Measure]:
        return fineweb_measures(doc.text, doc.language, self.config, doc.segmented)


def fineweb_measures(text: str, language: str, p: FineWebConfig, segmented: bool | None = None) -> list[Measure]:
    """One :class:`Measure` per FineWeb rule that applies (values are ratios; never raises).
    ``segmented``: whether the list rule applies (None: unless ``language`` is in
    :data:`UNSEGMENTED_LANGUAGES`)."""
    if segmented is None:
        segmented = language not in UNSEGMENTED_LANGUAGES
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines:
        return [Measure("fineweb_line_punct_ratio", 0.0, p.min_line_punct_ratio, False, "empty")]
    n = len(lines)
    v = sum(ln.endswith(TERMINAL_PUNCTUATION) for ln in lines) / n
    ok = v >= p.min_line_punct_ratio or (v == 0 and p.line_punct_exclude_zero)
    out = [Measure("fineweb_line_punct_ratio", v, p.min_line_punct_ratio, ok)]
    v = sum(len(ln) <= p.short_line_length for ln in lines) / n
    out.append(Measure("fineweb_short_line_ratio", v, p.max_short_line_ratio, v <= p.max_short_line_ratio))
    v = find_duplicates(lines)[1] / max(len(text.replace("\n", "")), 1)
    out.append(Measure("fineweb_char_dup_ratio", v, p.max_char_dup_ratio, v <= p.max_char_dup_ratio))
    if segmented:
        v = text.count("\n") / max(len(words(text)), 1)
        out.append(Measure("fineweb_list_ratio", v, p.max_list_ratio, v <= p.max_list_ratio))
    return out
