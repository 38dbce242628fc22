"""C4 rules (Raffel et al. 2020, *Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer*, §2.2), as datatrove's ``C4QualityFilter`` and ``C4BadWordsFilter``.

Line rules — a failing line is **removed from the text**, as in C4 and FineWeb (crawlake keeps the
remaining lines and records how many went in the ``c4_lines_removed`` decision, value = lines
removed, detail = the count per reason; it never fails a document):

* a line with a word longer than 1,000 characters;
* a line not ending in terminal punctuation (``. ? ! " '``, or a non-Latin full stop such as
  ``。``), or ending in ``...`` — FineWeb's recipe turns this one off;
* a line with fewer than 3 words (only for languages written with spaces);
* a line containing "javascript", or a cookie / terms-of-use / privacy-policy phrase.

Document rules on the lines that reached them (the order is C4's): "lorem ipsum" anywhere (≤ 0
lines), a curly bracket ``{`` (≤ 0 lines), at least 5 sentences in the kept lines, and, when a
list is configured for the document's language, no word of the bad-words list (LDNOOBW in C4; a
file the user supplies here, one word or phrase per line, ``#`` comments; off by default).

Wikipedia-style citations (``[1]``, ``[edit]``, ``[citation needed]``) are removed from lines.
Sentences are counted with a punctuation splitter, not NLTK Punkt (see
:func:`~pipelines.kernels.filters._text.count_sentences`).

The values are ``filter.c4`` (:class:`~pipelines.config.C4Config`); the rule is
:class:`C4QualityFilter`, which reads the bad-words files on the driver.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipelines.config import C4Config, ConfigError, RuleConfig
from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import UNSEGMENTED_LANGUAGES, count_sentences_in_lines
from pipelines.kernels.filters.rule import Document, Rule

CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
#: C4's terminal punctuation plus the full stops of other scripts ("…" is an ellipsis, not an end).
END_PUNCTUATION = (".", "?", "!", '"', "'", "。", "！", "？", "｡", "؟", "।", "॥", "։", "።", "။", "།")
ELLIPSIS = "..."
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies")
_POLICY = re.compile("|".join(map(re.escape, POLICY_SUBSTRINGS)))
#: Languages whose bad words are matched as substrings (no spaces between words), as datatrove.
_SUBSTRING_LANGUAGES = frozenset(UNSEGMENTED_LANGUAGES)


class C4QualityFilter(Rule):
    """C4's rules as a filter rule (step and values ``c4``); it changes the text (line removal).

    ``bad_words``: language → compiled pattern (:func:`bad_words_pattern`); :meth:`prepare` adds
    those of the files in ``config.bad_words_paths``.
    """

    name = "c4"
    section = "c4"
    Config = C4Config

    def __init__(self, config: RuleConfig | Mapping[str, Any] | None = None, /, *,
                 bad_words: Mapping[str, re.Pattern] | None = None, **values: Any) -> None:
        super().__init__(config, **values)
        self.bad_words = dict(bad_words or {})

    def transform(self, doc: Document) -> tuple[str, Sequence[Measure]]:
        return c4_apply(doc.text, doc.language, self.config, self.bad_words, doc.segmented)

    def prepare(self) -> "C4QualityFilter":
        """Reads ``bad_words_paths`` (see :func:`load_word_list`); raises ConfigError naming
        ``filter.c4.bad_words_paths.<language>`` for a file that cannot be read."""
        if not self.config.bad_words_paths:
            return self
        loaded = {}
        for lang, path in self.config.bad_words_paths.items():
            try:
                pattern = bad_words_pattern(load_word_list(path), lang)
            except OSError as exc:
                raise ConfigError(f"bad value for config key 'filter.c4.bad_words_paths.{lang}': "
                                  f"cannot read {path!r}: {exc}") from None
            if pattern is not None:
                loaded[lang] = pattern
        out = self.with_config(self.config)
        out.bad_words = {**loaded, **self.bad_words}
        return out


def load_word_list(path: str | Path) -> list[str]:
    """Words or phrases from a UTF-8 file, one per line, lower-cased; blank lines and lines starting
    with ``#`` are skipped. Raises OSError if the file cannot be read."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line.lower())
    return out


def bad_words_pattern(words: list[str], language: str) -> re.Pattern | None:
    """The pattern C4 / datatrove use: whole words (flanked by non-word characters) for languages with
    spaces, plain substrings for unsegmented ones. None for an empty list."""
    if not words:
        return None
    alt = "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))
    if language in _SUBSTRING_LANGUAGES:
        return re.compile(alt)
    return re.compile(rf"(?:\W|^)(?:{alt})(?:\W|$)")


def c4_apply(text: str, language: str, p: C4Config, bad_words: Mapping[str, re.Pattern] | None = None,
             segmented: bool | None = None) -> tuple[str, list[Measure]]:
    """``(text with failing lines removed, measures)``.

    ``p``: the ``filter.c4`` values (``filter_no_terminal_punct`` None counts as C4's own true);
    ``bad_words``: language → pattern (none: the rule is off); ``segmented``: whether the
    words-per-line rule applies (None: unless ``language`` is in :data:`UNSEGMENTED_LANGUAGES`).
    Measures: ``c4_lines_removed`` (lines, informational), ``c4_lorem_ipsum`` and
    ``c4_curly_bracket`` (lines, pass at ≤ 0), ``c4_min_sentences`` (sentences, pass at ≥
    ``min_num_sentences``), ``c4_bad_words`` (matches, pass at ≤ 0; only if the language has a list).
    Never raises.
    """
    if segmented is None:
        segmented = language not in UNSEGMENTED_LANGUAGES
    no_terminal_punct = p.filter_no_terminal_punct is not False
    removed = {"too_long_word": 0, "no_terminal_punct": 0, "too_few_words": 0, "javascript": 0, "policy": 0}
    lorem = curly = 0
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue  # blank lines are not content; C4 drops them too (fewer than 3 words)
        words = line.split()
        if p.max_word_length and words and max(map(len, words)) > p.max_word_length:
            removed["too_long_word"] += 1
            continue
        if p.remove_citations and "[" in line:
            line = CITATION.sub("", line)
        if no_terminal_punct and (not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS)):
            removed["no_terminal_punct"] += 1
            continue
        if segmented and len(words) < p.min_words_per_line:
            removed["too_few_words"] += 1
            continue
        lower = line.lower()
        if p.filter_lorem_ipsum and "lorem ipsum" in lower:
            lorem += 1  # C4 drops the whole document; counted so every such line is explained
            continue
        if p.filter_javascript and "javascript" in lower:
            removed["javascript"] += 1
            continue
        if p.filter_curly_bracket and "{" in line:
            curly += 1  # drops the whole document, as lorem ipsum
            continue
        if p.filter_policy and _POLICY.search(lower):
            removed["policy"] += 1
            continue
        kept.append(line)

    new_text = "\n".join(kept).strip()
    sentences = count_sentences_in_lines(kept) if p.min_num_sentences else 0
    n_removed = sum(removed.values())
    detail = ",".join(f"{k}={v}" for k, v in removed.items() if v) or "none"
    out = [Measure("c4_lines_removed", float(n_removed), math.inf, True, detail)]
    if p.filter_lorem_ipsum:
        out.append(Measure("c4_lorem_ipsum", float(lorem), 0.0, lorem == 0))
    if p.filter_curly_bracket:
        out.append(Measure("c4_curly_bracket", float(curly), 0.0, curly == 0))
    if p.min_num_sentences:
        out.append(Measure("c4_min_sentences", float(sentences), float(p.min_num_sentences),
                           sentences >= p.min_num_sentences))
    pattern = bad_words.get(language) if bad_words else None
    if pattern is not None:
        hits = len(pattern.findall(new_text.lower()))  # on the cleaned text, as C4
        out.append(Measure("c4_bad_words", float(hits), 0.0, hits == 0))
    return new_text, out
