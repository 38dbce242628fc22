"""Gopher quality rules (Rae et al. 2021, *Scaling Language Models: Methods, Analysis & Insights
from Training Gopher*, App. A), values as datatrove's ``GopherQualityFilter``.

50–100,000 words, mean word length 3–10 characters, symbol-to-word ratio ≤ 0.1, ≤ 90 % bullet
lines, ≤ 30 % ellipsis lines, ≥ 80 % of words with an alphabetic character, ≥ 2 English stop words.
Word rules are not applied to languages written without spaces; the stop-word rule only to
languages with a stop-word list (:data:`STOP_WORDS`). The values are ``filter.gopher``
(:class:`~pipelines.config.GopherConfig`, the paper's table beside its defaults); the rule is
:class:`GopherQualityFilter` (step ``gopher_quality``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from itertools import compress, repeat
from operator import not_

from pipelines.config import GopherConfig
from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import UNSEGMENTED_LANGUAGES, words as split_words
from pipelines.kernels.filters.rule import Document, Rule

#: Gopher's stop words (the paper's list is English only).
STOP_WORDS = {"en": frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})}
BULLETS = ("•", "-", "*", "‣", "⁃", "◦", "▪", "●", "·")
ELLIPSES = ("...", "…")
_LETTER = re.compile(r"[^\W\d_]")  # a letter of any script: a word character that is no digit or underscore


class GopherQualityFilter(Rule):
    """Gopher's quality rules as a filter rule (step ``gopher_quality``, values ``filter.gopher``)."""

    name = "gopher_quality"
    section = "gopher"
    Config = GopherConfig

    def measures(self, doc: Document) -> Sequence[Measure]:
        own = self.config.unsegmented_languages   # empty: filter.unsegmented_languages decides
        segmented = doc.language not in own if own else doc.segmented
        return [Measure(*m) for m in gopher_measures(doc.text, doc.language, self.config, segmented)]


def gopher_measures(text: str, language: str, p: GopherConfig,
                    segmented: bool | None = None) -> list[tuple[str, float, float, bool]]:
    """``(filter, value, threshold, passed)`` for each Gopher quality rule that applies to ``language``.

    Values: words (count), mean word length (characters), symbols per word (the larger of the hash
    and the ellipsis ratios), line fractions in [0, 1], distinct stop words (count). A ``min_`` rule
    passes at value ≥ threshold, a ``max_`` (and ratio) rule at value ≤ threshold
    (``gopher_alpha_words_ratio`` and ``gopher_stop_words`` are minimums). ``segmented``: whether
    the word rules apply (None: unless ``language`` is in ``p.unsegmented_languages``, or in
    :data:`UNSEGMENTED_LANGUAGES` when that is empty). Never raises.
    """
    if segmented is None:
        segmented = language not in (p.unsegmented_languages or UNSEGMENTED_LANGUAGES)
    out: list[tuple[str, float, float, bool]] = []
    # map over C methods, not generator expressions: these loops run once per line or word
    lines = list(filter(None, map(str.strip, text.split("\n"))))
    n_lines = max(len(lines), 1)
    bullet = sum(map(str.startswith, lines, repeat(BULLETS))) / n_lines
    ellipsis = sum(map(str.endswith, lines, repeat(ELLIPSES))) / n_lines
    out.append(("gopher_bullet_lines_ratio", bullet, p.max_bullet_lines_ratio, bullet <= p.max_bullet_lines_ratio))
    out.append(("gopher_ellipsis_lines_ratio", ellipsis, p.max_ellipsis_lines_ratio,
                ellipsis <= p.max_ellipsis_lines_ratio))
    if not segmented:
        return out

    words = split_words(text)  # whitespace tokens, pure punctuation dropped
    n = len(words)
    out.append(("gopher_min_doc_words", float(n), float(p.min_doc_words), n >= p.min_doc_words))
    out.append(("gopher_max_doc_words", float(n), float(p.max_doc_words), n <= p.max_doc_words))
    if n == 0:
        return out
    stripped = list(map(str.strip, words, repeat(string.punctuation, n)))
    avg = sum(map(len, stripped)) / n
    out.append(("gopher_min_avg_word_length", avg, p.min_avg_word_length, avg >= p.min_avg_word_length))
    out.append(("gopher_max_avg_word_length", avg, p.max_avg_word_length, avg <= p.max_avg_word_length))
    # The paper tests the hash and the ellipsis ratios each against the limit (as datatrove), not their sum.
    symbols = max(text.count("#"), text.count("...") + text.count("…")) / n
    out.append(("gopher_symbol_word_ratio", symbols, p.max_symbol_word_ratio, symbols <= p.max_symbol_word_ratio))
    # an all-alphabetic word has a letter; only the others need the regex
    others = list(compress(words, map(not_, map(str.isalpha, words))))
    alpha = (n - len(others) + sum(map(bool, map(_LETTER.search, others)))) / n
    out.append(("gopher_alpha_words_ratio", alpha, p.min_alpha_words_ratio, alpha >= p.min_alpha_words_ratio))
    stop_words = STOP_WORDS.get(language)
    if stop_words is not None:
        # "at least two of the following words": distinct words, not occurrences
        count = len(set(map(str.lower, stripped)) & stop_words)
        out.append(("gopher_stop_words", float(count), float(p.min_stop_words), count >= p.min_stop_words))
    return out
