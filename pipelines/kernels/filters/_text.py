"""Text helpers shared by the filter rules: lines, words, sentences, duplicates, punctuation.

Words are whitespace-separated tokens that contain at least one character that is not
punctuation (so a lone ``-`` or ``|`` is not a word). This is only meaningful for languages written
with spaces between words; rules that count words are skipped for the languages listed as
*unsegmented* (Chinese, Japanese, Thai, ...), see :data:`UNSEGMENTED_LANGUAGES`.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from itertools import compress, repeat

import numpy as np
from numba import njit

#: Languages written without spaces between words (fastText lid.176 codes): word rules skip them.
UNSEGMENTED_LANGUAGES: tuple[str, ...] = ("zh", "ja", "th", "lo", "km", "my", "bo", "wuu", "yue")

PUNCT_CHARS = string.punctuation + "«»“”‘’„…–—¡¿、。，！？：；（）【】《》「」『』・·•"
PUNCT = frozenset(PUNCT_CHARS)

#: Characters that end a sentence in many scripts (Latin, CJK full-width, Devanagari danda, Arabic,
#: Armenian, Ethiopic, Myanmar, Tibetan...). FineWeb's line-punctuation rule uses such a set
#: (datatrove ``TERMINAL_PUNCTUATION``); quotes count because a quoted sentence ends with one.
TERMINAL_PUNCTUATION: tuple[str, ...] = tuple(
    ".!?\"'…。！？｡．‼⁇⁈⁉︒﹒﹖﹗؟۔।॥։።፧፨᙮᠃᠉၊။།༎។៕꓿꘎꘏")

_SENTENCE_BREAK = re.compile(r"(?<=[.!?…؟।])\s+|(?<=[。！？｡‼⁇⁈⁉︒﹒﹖﹗])")
# the same breaks plus a newline, which then ends every line's last sentence
_SENTENCE_OR_LINE_BREAK = re.compile(r"(?<=[.!?…؟।])\s+|(?<=[。！？｡‼⁇⁈⁉︒﹒﹖﹗])|\n")


def nonempty_lines(text: str) -> list[str]:
    """Lines of ``text`` split on ``\\n`` that hold more than whitespace (not stripped)."""
    return [ln for ln in text.split("\n") if ln.strip()]


@lru_cache(maxsize=4)
def words(text: str) -> tuple[str, ...]:
    """Whitespace tokens that are not pure punctuation. Cached: the engine and several rules ask
    for the words of the same text."""
    tokens = text.split()
    return tuple(compress(tokens, map(str.strip, tokens, repeat(PUNCT_CHARS, len(tokens)))))  # C-speed loop


def count_sentences(line: str) -> int:
    """Sentences in one line: segments separated by terminal punctuation (followed by a space in
    Latin-like scripts, immediately in CJK). A stand-in for NLTK Punkt, which C4 and datatrove use;
    it splits after abbreviations ("Dr. Smith") where Punkt would not."""
    return sum(1 for seg in _SENTENCE_BREAK.split(line) if seg.strip())


def count_sentences_in_lines(lines: list[str]) -> int:
    """``sum(count_sentences(line) for line in lines)`` for lines without ``\\n``, in one regex pass."""
    return sum(1 for seg in _SENTENCE_OR_LINE_BREAK.split("\n".join(lines)) if seg.strip())


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """``(duplicate elements, their characters)``: every occurrence after the first counts
    (datatrove ``find_duplicates``)."""
    seen: set[str] = set()
    dup_elements = dup_chars = 0
    for item in items:
        if item in seen:
            dup_elements += 1
            dup_chars += len(item)
        else:
            seen.add(item)
    return dup_elements, dup_chars


class NgramIndex:
    """Word n-grams of one token list as 64-bit hashes, so the repetition rules hash each n-gram
    once in numpy instead of joining strings in Python (a hash collision, about 2**-64 per pair,
    could only make two different n-grams count as one)."""

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        # id = rank of the word's first occurrence; dict.fromkeys and map keep the loop in C
        ids = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
        self.ids = np.fromiter(map(ids.__getitem__, tokens), dtype=np.uint64, count=len(tokens))
        # characters before word i (words only, no spaces)
        self.cum = np.concatenate(([0], np.cumsum(np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens)))))

    def hashes(self, n: int) -> np.ndarray:
        """Hash of the n-gram starting at each position (len(tokens) - n + 1 values)."""
        m = len(self.tokens) - n + 1
        if m <= 0:
            return np.empty(0, dtype=np.uint64)
        h = np.zeros(m, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for k in range(n):  # polynomial hash modulo 2**64 over word ids, with mixing
                h = h * _MULT + (self.ids[k:k + m] + _ADD) * _MIX
        return h

    def gram_chars(self, i: int, n: int, spaces: bool) -> int:
        return int(self.cum[i + n] - self.cum[i]) + (n - 1 if spaces else 0)


_MULT = np.uint64(0x100000001B3)
_MIX = np.uint64(0x9E3779B97F4A7C15)
_ADD = np.uint64(0x632BE59BD9B4E019)


def top_ngram_chars(tokens: list[str] | NgramIndex, n: int) -> int:
    """Characters covered by the most frequent word n-gram (its length, spaces included, times its
    count), as datatrove's ``find_top_duplicate`` (ties: the n-gram seen first); 0 when there are
    fewer than ``n`` words."""
    index = tokens if isinstance(tokens, NgramIndex) else NgramIndex(tokens)
    h = index.hashes(n)
    if not len(h):
        return 0
    _, first, counts = np.unique(h, return_index=True, return_counts=True)
    best = counts.max()
    i = int(first[counts == best].min())
    return index.gram_chars(i, n, spaces=True) * int(best)


def duplicate_ngram_chars(tokens: list[str] | NgramIndex, n: int) -> int:
    """Characters (spaces excluded) in word n-grams that repeat an earlier n-gram, overlapping
    repeats counted once (datatrove ``find_all_duplicate``: after a repeat, skip ahead ``n`` words)."""
    index = tokens if isinstance(tokens, NgramIndex) else NgramIndex(tokens)
    h = index.hashes(n)
    if not len(h):
        return 0
    uniques, inverse = np.unique(h, return_inverse=True)
    if len(uniques) == len(h):
        return 0  # no n-gram occurs twice: nothing to walk
    return int(_walk_duplicates(inverse.astype(np.int64), index.cum, n, len(uniques)))


@njit(cache=True)
def _walk_duplicates(gram_ids, cum, n, distinct):  # pragma: no cover - compiled
    # datatrove's walk: a repeated n-gram adds its characters and skips n words; grams skipped
    # over are never marked seen. Compiled: one pass over the grams, per document.
    seen = np.zeros(distinct, dtype=np.bool_)
    repeated = 0
    idx = 0
    while idx < gram_ids.shape[0]:
        g = gram_ids[idx]
        if seen[g]:
            repeated += cum[idx + n] - cum[idx]
            idx += n
        else:
            seen[g] = True
            idx += 1
    return repeated
