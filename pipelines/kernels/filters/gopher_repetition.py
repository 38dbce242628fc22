"""Gopher repetition rules (Rae et al. 2021, App. A, Table A1), values as datatrove's
``GopherRepetitionFilter``.

A document fails when, over its characters (``len(text)``):

* duplicate paragraphs (split on 2+ newlines) are > 30 % of paragraphs or > 20 % of characters;
* duplicate lines (split on newlines) are > 30 % of lines or > 20 % of characters;
* the most frequent word 2-, 3-, 4-gram covers > 20 %, 18 %, 16 % of characters;
* repeated word n-grams for n = 5..10 cover > 15 %, 14 %, 13 %, 12 %, 11 %, 10 % of characters.

Paragraph and line rules are script-independent and apply to every language; the n-gram rules
need words and are skipped for unsegmented languages (datatrove uses a per-language word
tokenizer there; crawlake has none). Words are whitespace tokens, where datatrove uses NLTK's
word tokenizer (punctuation as separate tokens): values differ slightly on punctuated text.

The values are ``filter.gopher_repetition`` (:class:`~pipelines.config.GopherRepetitionConfig`,
Table A1 beside its defaults); the rule is :class:`GopherRepetitionFilter`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipelines.config import GopherRepetitionConfig
from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import (
    UNSEGMENTED_LANGUAGES,
    find_duplicates,
    ngram_repetition_chars,
)
from pipelines.kernels.filters.rule import Document, Rule

_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")


class GopherRepetitionFilter(Rule):
    """Gopher's repetition rules as a filter rule (step and values ``gopher_repetition``)."""

    name = "gopher_repetition"
    section = "gopher_repetition"
    Config = GopherRepetitionConfig

    def measures(self, doc: Document) -> Sequence[Measure]:
        return gopher_repetition_measures(doc.text, doc.language, self.config, doc.segmented)


def gopher_repetition_measures(text: str, language: str, p: GopherRepetitionConfig,
                               segmented: bool | None = None) -> list[Measure]:
    """One :class:`Measure` per repetition rule that applies; every value is a fraction in [0, 1]
    and passes at value ≤ threshold. ``segmented``: whether the n-gram rules apply (None: unless
    ``language`` is in :data:`UNSEGMENTED_LANGUAGES`). Never raises (an empty text scores 0
    everywhere)."""
    if segmented is None:
        segmented = language not in UNSEGMENTED_LANGUAGES
    out: list[Measure] = []
    chars = max(len(text), 1)

    paragraphs = _PARAGRAPHS.split(text.strip())
    dup, dup_chars = find_duplicates(paragraphs)
    v = dup / len(paragraphs)
    out.append(Measure("gopher_rep_dup_para_frac", v, p.dup_para_frac, v <= p.dup_para_frac))
    v = dup_chars / chars
    out.append(Measure("gopher_rep_dup_para_char_frac", v, p.dup_para_char_frac, v <= p.dup_para_char_frac))

    lines = _LINES.split(text)
    dup, dup_chars = find_duplicates(lines)
    v = dup / len(lines)
    out.append(Measure("gopher_rep_dup_line_frac", v, p.dup_line_frac, v <= p.dup_line_frac))
    v = dup_chars / chars
    out.append(Measure("gopher_rep_dup_line_char_frac", v, p.dup_line_char_frac, v <= p.dup_line_char_frac))

    if not segmented:
        return out
    top_n_grams, dup_n_grams = sorted(p.top_n_grams.items()), sorted(p.dup_n_grams.items())
    top, dup = ngram_repetition_chars(text.split(), tuple(n for n, _ in top_n_grams),
                                      tuple(n for n, _ in dup_n_grams))
    for (n, limit), covered in zip(top_n_grams, top):
        v = covered / chars
        out.append(Measure(f"gopher_rep_top_{n}gram_char_frac", v, limit, v <= limit))
    for (n, limit), covered in zip(dup_n_grams, dup):
        v = covered / chars
        out.append(Measure(f"gopher_rep_dup_{n}gram_char_frac", v, limit, v <= limit))
    return out
