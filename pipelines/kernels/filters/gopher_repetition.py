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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import (
    UNSEGMENTED_LANGUAGES,
    find_duplicates,
    ngram_repetition_chars,
)

_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")


@dataclass(frozen=True)
class GopherRepetitionParams:
    dup_line_frac: float = 0.3
    dup_para_frac: float = 0.3
    dup_line_char_frac: float = 0.2
    dup_para_char_frac: float = 0.2
    #: n → maximum fraction of characters in the most frequent n-gram
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.20), (3, 0.18), (4, 0.16))
    #: n → maximum fraction of characters in repeated n-grams
    dup_n_grams: tuple[tuple[int, float], ...] = field(default=(
        (5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)))
    unsegmented_languages: tuple[str, ...] = UNSEGMENTED_LANGUAGES


def gopher_repetition_measures(text: str, language: str, p: GopherRepetitionParams) -> list[Measure]:
    """One :class:`Measure` per repetition rule that applies; every value is a fraction in [0, 1]
    and passes at value ≤ threshold. Never raises (an empty text scores 0 everywhere)."""
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

    if language in p.unsegmented_languages:
        return out
    top, dup = ngram_repetition_chars(text.split(), tuple(n for n, _ in p.top_n_grams),
                                      tuple(n for n, _ in p.dup_n_grams))
    for (n, limit), covered in zip(p.top_n_grams, top):
        v = covered / chars
        out.append(Measure(f"gopher_rep_top_{n}gram_char_frac", v, limit, v <= limit))
    for (n, limit), covered in zip(p.dup_n_grams, dup):
        v = covered / chars
        out.append(Measure(f"gopher_rep_dup_{n}gram_char_frac", v, limit, v <= limit))
    return out
