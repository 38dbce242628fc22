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


def ngram_repetition_chars(tokens: list[str], top_ns: tuple[int, ...], dup_ns: tuple[int, ...]
                           ) -> tuple[list[int], list[int]]:
    """Gopher's word n-gram repetition measures of one token list, in characters:

    * for each n of ``top_ns``, the characters covered by the most frequent n-gram (its length,
      spaces included, times its count; ties: the n-gram seen first), as datatrove's
      ``find_top_duplicate``; 0 when there are fewer than n words;
    * for each n of ``dup_ns``, the characters (spaces excluded) in n-grams that repeat an earlier
      n-gram, overlapping repeats counted once, as datatrove's ``find_all_duplicate`` (after a
      repeat, skip ahead n words).

    Words are compared by 64-bit hash and n-grams by a 64-bit polynomial hash of their words'
    hashes, all in compiled code; a collision (about 2**-64 per pair) could only make two
    different n-grams count as one.
    """
    k = len(tokens)
    hashes = np.fromiter(map(hash, tokens), dtype=np.int64, count=k).view(np.uint64)
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=k)
    top, dup = _ngram_chars(hashes, lengths, np.array(top_ns, dtype=np.int64), np.array(dup_ns, dtype=np.int64))
    return top.tolist(), dup.tolist()


_MULT = np.uint64(0x100000001B3)
_MIX = np.uint64(0x9E3779B97F4A7C15)
_ADD = np.uint64(0x632BE59BD9B4E019)


@njit(cache=True)
def _gram_hashes(words, n):  # pragma: no cover - compiled
    m = words.shape[0] - n + 1
    h = np.zeros(m, dtype=np.uint64)
    for k in range(n):   # polynomial hash modulo 2**64 over the word hashes, with mixing
        for i in range(m):
            h[i] = h[i] * _MULT + (words[i + k] + _ADD) * _MIX
    return h


@njit(cache=True)
def _ngram_chars(words, lengths, top_ns, dup_ns):  # pragma: no cover - compiled
    k = words.shape[0]
    cum = np.zeros(k + 1, dtype=np.int64)   # characters before word i (no spaces)
    cum[1:] = np.cumsum(lengths)
    top = np.zeros(top_ns.shape[0], dtype=np.int64)
    dup = np.zeros(dup_ns.shape[0], dtype=np.int64)
    # One open-addressing hash table (linear probing, load <= 1/2) numbers each n's distinct
    # grams in order of first occurrence: linear time, where sorting the grams cost more.
    size = 2
    while size < 2 * k:
        size *= 2
    keys = np.empty(size, dtype=np.uint64)
    slots = np.empty(size, dtype=np.int64)
    gram_id = np.empty(k, dtype=np.int64)
    counts = np.empty(k, dtype=np.int64)
    for j in range(top_ns.shape[0] + dup_ns.shape[0]):
        is_top = j < top_ns.shape[0]
        n = top_ns[j] if is_top else dup_ns[j - top_ns.shape[0]]
        m = k - n + 1
        if m <= 0:
            continue
        h = _gram_hashes(words, n)
        slots[:] = -1
        distinct = 0
        for i in range(m):
            s = (h[i] >> np.uint64(17)) & np.uint64(size - 1)   # h is mixed: any bits will do
            while slots[s] >= 0 and keys[s] != h[i]:
                s = (s + np.uint64(1)) & np.uint64(size - 1)
            if slots[s] < 0:
                slots[s], keys[s] = distinct, h[i]
                counts[distinct] = 0
                distinct += 1
            gram_id[i] = slots[s]
            counts[gram_id[i]] += 1
        if is_top:
            # the most frequent gram; ties go to the lowest id, i.e. the gram seen first
            best = 0
            for g in range(distinct):
                if counts[g] > counts[best]:
                    best = g
            first = 0
            while gram_id[first] != best:
                first += 1
            top[j] = (cum[first + n] - cum[first] + n - 1) * counts[best]
            continue
        if distinct == m:
            continue   # no n-gram occurs twice: nothing to walk
        # datatrove's walk: a repeated n-gram adds its characters and skips n words; grams skipped
        # over are never marked seen.
        seen = np.zeros(distinct, dtype=np.bool_)
        repeated, idx = 0, 0
        while idx < m:
            g = gram_id[idx]
            if seen[g]:
                repeated += cum[idx + n] - cum[idx]
                idx += n
            else:
                seen[g] = True
                idx += 1
        dup[j - top_ns.shape[0]] = repeated
    return top, dup
