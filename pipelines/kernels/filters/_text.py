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

#: Languages written without spaces between words: word rules skip them (the default of
#: ``filter.unsegmented_languages``, defined with the config).
from pipelines.config import UNSEGMENTED_LANGUAGES  # noqa: F401

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
    from pipelines.kernels.filters._text_jit import ngram_chars  # numba: compiled on first use, not on import

    top, dup = ngram_chars(hashes, lengths, np.array(top_ns, dtype=np.int64), np.array(dup_ns, dtype=np.int64))
    return top.tolist(), dup.tolist()
