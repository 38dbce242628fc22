"""Gopher repetition rules (Rae et al. 2021, datatrove's values) at each side of every threshold."""

import pytest
from _filter_texts import PROSE, exact_length, straddle

from pipelines.config import GopherRepetitionConfig
from pipelines.kernels.filters import gopher_repetition_measures

P = GopherRepetitionConfig()


def measure(text, name, lang="en"):
    found = {m.filter: m for m in gopher_repetition_measures(text, lang, P)}
    return found[name]


def unique_blocks(k, sep):
    return [f"Block {i} says something of its own about item {i}." for i in range(k)]


@pytest.mark.parametrize("sep,name", [("\n\n", "gopher_rep_dup_para_frac"), ("\n", "gopher_rep_dup_line_frac")])
@pytest.mark.parametrize("copies,passed", [(3, True), (4, False)])  # 3/10 = 0.3 passes, 4/10 fails
def test_duplicate_block_fraction(sep, name, copies, passed):
    blocks = ["The same block again."] * (copies + 1) + unique_blocks(9 - copies, sep)
    m = measure(sep.join(blocks), name)
    assert m.value == pytest.approx(copies / 10) and m.passed is passed and m.threshold == 0.3


@pytest.mark.parametrize("sep,name", [("\n\n", "gopher_rep_dup_para_char_frac"),
                                      ("\n", "gopher_rep_dup_line_char_frac")])
@pytest.mark.parametrize("extra,passed", [(0, True), (-1, False)])
def test_duplicate_block_characters(sep, name, extra, passed):
    dup = "d" * 20  # appears twice: 20 duplicate characters
    unique_len = 100 - 2 * 20 - 2 * len(sep) + extra  # total 100 → exactly 0.2
    text = sep.join(["u" * unique_len, dup, dup])
    m = measure(text, name)
    assert m.value == pytest.approx(20 / len(text)) and m.passed is passed


@pytest.mark.parametrize("n,limit", [(2, 0.20), (3, 0.18), (4, 0.16)])
@pytest.mark.parametrize("side", ["pass", "fail"])
def test_top_ngram_character_fraction(n, limit, side):
    gram = [f"w{i:02d}" for i in range(n)]          # "w00 w01 ..." is n * 4 - 1 characters
    copies = 4
    covered = copies * len(" ".join(gram))
    total = straddle(covered, limit)[0 if side == "pass" else 1]
    parts = []
    for c in range(copies):                         # unique separators: no other n-gram repeats
        parts += gram + [f"s{c:03d}"]
    m = measure(exact_length(parts, total), f"gopher_rep_top_{n}gram_char_frac")
    assert m.threshold == limit and m.value == pytest.approx(covered / total)
    assert m.passed is (side == "pass")


@pytest.mark.parametrize("n,limit", [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)])
@pytest.mark.parametrize("side", ["pass", "fail"])
def test_duplicate_ngram_character_fraction(n, limit, side):
    gram = [f"v{i:02d}" for i in range(n)]          # repeated once: its characters (no spaces) count
    repeated = len("".join(gram))
    total = straddle(repeated, limit)[0 if side == "pass" else 1]
    m = measure(exact_length(gram + gram, total), f"gopher_rep_dup_{n}gram_char_frac")
    assert m.threshold == limit and m.value == pytest.approx(repeated / total)
    assert m.passed is (side == "pass")


def test_varied_text_passes_everything():
    assert all(m.passed for m in gopher_repetition_measures(PROSE, "en", P))


def test_unsegmented_languages_get_only_line_and_paragraph_rules():
    names = {m.filter for m in gopher_repetition_measures("这是一个句子。\n这是另一个句子。", "zh", P)}
    assert names == {"gopher_rep_dup_para_frac", "gopher_rep_dup_para_char_frac",
                     "gopher_rep_dup_line_frac", "gopher_rep_dup_line_char_frac"}


def test_empty_text_does_not_raise():
    assert all(m.passed for m in gopher_repetition_measures("", "en", P))


def _top_duplicate(words, n):
    """datatrove's ``find_top_duplicate`` over joined n-gram strings (the plain reference)."""
    grams = [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0
    counts = {}
    for g in grams:
        counts[g] = counts.get(g, 0) + 1
    best = max(counts.values())
    gram = next(g for g in grams if counts[g] == best)   # ties: the one seen first
    return len(gram) * best


def _all_duplicate(words, n):
    """datatrove's ``find_all_duplicate``: a repeat adds its characters and skips n words."""
    seen, repeated, idx = set(), 0, 0
    while idx < len(words) - n + 1:
        gram = "".join(words[idx:idx + n])
        key = tuple(words[idx:idx + n])
        if key in seen:
            repeated += len(gram)
            idx += n
        else:
            seen.add(key)
            idx += 1
    return repeated


def test_compiled_ngram_counts_equal_the_plain_reference():
    """The hashed, compiled n-gram counts equal the string-joining reference on random texts
    from small vocabularies (many repeats, overlaps and ties), from 0 to 400 words."""
    import random

    from pipelines.kernels.filters._text import ngram_repetition_chars

    rng = random.Random(3)
    top_ns, dup_ns = (2, 3, 4), (5, 6, 7, 8, 9, 10)
    nonzero = 0
    for _ in range(400):
        vocab = [f"w{i}" * rng.randint(1, 3) for i in range(rng.randint(1, 12))]
        words = [rng.choice(vocab) for _ in range(rng.randint(0, 400))]
        top, dup = ngram_repetition_chars(words, top_ns, dup_ns)
        assert top == [_top_duplicate(words, n) for n in top_ns]
        assert dup == [_all_duplicate(words, n) for n in dup_ns]
        nonzero += any(dup)
    assert nonzero > 200   # most texts had repeats to walk
