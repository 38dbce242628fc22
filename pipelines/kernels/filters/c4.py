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
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import UNSEGMENTED_LANGUAGES, count_sentences_in_lines

CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
#: C4's terminal punctuation plus the full stops of other scripts ("…" is an ellipsis, not an end).
END_PUNCTUATION = (".", "?", "!", '"', "'", "。", "！", "？", "｡", "؟", "।", "॥", "։", "።", "။", "།")
ELLIPSIS = "..."
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies")
_POLICY = re.compile("|".join(map(re.escape, POLICY_SUBSTRINGS)))
#: Languages whose bad words are matched as substrings (no spaces between words), as datatrove.
_SUBSTRING_LANGUAGES = frozenset(UNSEGMENTED_LANGUAGES)


@dataclass(frozen=True)
class C4Params:
    filter_no_terminal_punct: bool = True
    min_words_per_line: int = 3           # 0 disables
    min_num_sentences: int = 5            # 0 disables
    max_word_length: int = 1000           # 0 disables
    remove_citations: bool = True
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True
    #: language → compiled bad-words pattern (see :func:`bad_words_pattern`); empty = rule off
    bad_words: dict[str, re.Pattern] = field(default_factory=dict)
    unsegmented_languages: tuple[str, ...] = UNSEGMENTED_LANGUAGES


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


def c4_apply(text: str, language: str, p: C4Params) -> tuple[str, list[Measure]]:
    """``(text with failing lines removed, measures)``.

    Measures: ``c4_lines_removed`` (lines, informational), ``c4_lorem_ipsum`` and
    ``c4_curly_bracket`` (lines, pass at ≤ 0), ``c4_min_sentences`` (sentences, pass at ≥
    ``min_num_sentences``), ``c4_bad_words`` (matches, pass at ≤ 0; only if the language has a list).
    """
    segmented = language not in p.unsegmented_languages
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
        if p.filter_no_terminal_punct and (not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS)):
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
    pattern = p.bad_words.get(language)
    if pattern is not None:
        hits = len(pattern.findall(new_text.lower()))  # on the cleaned text, as C4
        out.append(Measure("c4_bad_words", float(hits), 0.0, hits == 0))
    return new_text, out
