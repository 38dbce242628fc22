"""Compiled inner loop of the Gopher n-gram repetition measures (numba, single-threaded); see
:func:`pipelines.kernels.filters._text.ngram_repetition_chars`, which imports this module on first
use so that importing the filter rules (the config does, to check ``filter.preset``) loads no numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit

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
def ngram_chars(words, lengths, top_ns, dup_ns):  # pragma: no cover - compiled
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
