"""Compiled inner loops of the MinHash kernel (numba, single-threaded; engines parallelize).

``sha1_hash32`` reproduces ``datasketch.hashfunc.sha1_hash32`` (first 4 bytes of SHA-1, read
little-endian; FIPS 180-4 SHA-1) over many byte strings packed in one buffer, and
``min_permuted`` the legacy-scheme permutations ``((a·h + b) mod (2^61 − 1)) & (2^32 − 1)`` with
uint64 arithmetic that wraps exactly as numpy's does in datasketch. ``word_runs`` and
``word_shingle_ranges`` normalize packed UTF-8 texts and cut their word n-gram shingles as byte
ranges of one buffer, so no shingle becomes a Python object.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_P = np.uint64((1 << 61) - 1)
_MASK32 = np.uint64(0xFFFFFFFF)


@njit(inline="always")
def _rotl(x, n):
    return ((x << np.uint32(n)) | (x >> np.uint32(32 - n))) & np.uint32(0xFFFFFFFF)


@njit(cache=True)
def sha1_hash32(data, offsets):
    """``uint32[n]``: sha1_hash32 of ``data[offsets[i]:offsets[i+1]]`` for each i (data: uint8[m])."""
    return sha1_hash32_ranges(data, offsets[:-1], offsets[1:])


@njit(cache=True)
def sha1_hash32_ranges(data, starts, ends):
    """``uint32[n]``: sha1_hash32 of ``data[starts[i]:ends[i]]`` for each i (ranges may overlap)."""
    n = starts.shape[0]
    out = np.empty(n, dtype=np.uint32)
    w = np.empty(80, dtype=np.uint32)
    for i in range(n):
        start, length = starts[i], ends[i] - starts[i]
        h0, h1, h2, h3, h4 = (np.uint32(0x67452301), np.uint32(0xEFCDAB89), np.uint32(0x98BADCFE),
                              np.uint32(0x10325476), np.uint32(0xC3D2E1F0))
        n_blocks = (length + 8) // 64 + 1
        bit_len = np.uint64(length) * np.uint64(8)
        for blk in range(n_blocks):
            base = blk * 64
            if base + 64 <= length:  # a whole block of message bytes: no padding to test for
                for t in range(16):
                    p = start + base + t * 4
                    w[t] = ((np.uint32(data[p]) << np.uint32(24)) | (np.uint32(data[p + 1]) << np.uint32(16))
                            | (np.uint32(data[p + 2]) << np.uint32(8)) | np.uint32(data[p + 3]))
            else:
                for t in range(16):
                    word = np.uint32(0)
                    for k in range(4):
                        pos = base + t * 4 + k
                        if pos < length:
                            byte = np.uint32(data[start + pos])
                        elif pos == length:
                            byte = np.uint32(0x80)
                        elif pos >= n_blocks * 64 - 8:  # message length in bits, big-endian
                            byte = np.uint32((bit_len >> np.uint64(8 * (n_blocks * 64 - 1 - pos))) & np.uint64(0xFF))
                        else:
                            byte = np.uint32(0)
                        word = (word << np.uint32(8)) | byte
                    w[t] = word
            for t in range(16, 80):
                w[t] = _rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1)
            a, b, c, d, e = h0, h1, h2, h3, h4
            for t in range(0, 20):  # four loops of 20 rounds: no branch per round
                tmp = (_rotl(a, 5) + ((b & c) | (~b & d)) + e + np.uint32(0x5A827999) + w[t]) & np.uint32(0xFFFFFFFF)
                e, d, c, b, a = d, c, _rotl(b, 30), a, tmp
            for t in range(20, 40):
                tmp = (_rotl(a, 5) + (b ^ c ^ d) + e + np.uint32(0x6ED9EBA1) + w[t]) & np.uint32(0xFFFFFFFF)
                e, d, c, b, a = d, c, _rotl(b, 30), a, tmp
            for t in range(40, 60):
                tmp = (_rotl(a, 5) + ((b & c) | (b & d) | (c & d)) + e + np.uint32(0x8F1BBCDC) + w[t]) & np.uint32(0xFFFFFFFF)
                e, d, c, b, a = d, c, _rotl(b, 30), a, tmp
            for t in range(60, 80):
                tmp = (_rotl(a, 5) + (b ^ c ^ d) + e + np.uint32(0xCA62C1D6) + w[t]) & np.uint32(0xFFFFFFFF)
                e, d, c, b, a = d, c, _rotl(b, 30), a, tmp
            h0 = (h0 + a) & np.uint32(0xFFFFFFFF)
            h1 = (h1 + b) & np.uint32(0xFFFFFFFF)
            h2 = (h2 + c) & np.uint32(0xFFFFFFFF)
            h3 = (h3 + d) & np.uint32(0xFFFFFFFF)
            h4 = (h4 + e) & np.uint32(0xFFFFFFFF)
        # digest[:4] is h0 big-endian; datasketch reads it little-endian: a byte swap.
        out[i] = (((h0 & np.uint32(0xFF)) << np.uint32(24)) | ((h0 & np.uint32(0xFF00)) << np.uint32(8))
                  | ((h0 >> np.uint32(8)) & np.uint32(0xFF00)) | (h0 >> np.uint32(24)))
    return out


@njit(cache=True)
def word_runs(data, offsets, is_word):
    """The runs of word characters of UTF-8 texts, joined by one space: ``(data, offsets)`` packed.

    ``data[offsets[d]:offsets[d+1]]`` is text ``d`` (valid UTF-8; surrogates as 3-byte sequences);
    ``is_word`` is ``bool[0x110000]``, which code points are word characters. The result is never
    longer than the input.
    """
    n = offsets.shape[0] - 1
    out = np.empty(data.shape[0], dtype=np.uint8)
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    o = 0
    for d in range(n):
        p, hi = offsets[d], offsets[d + 1]
        gap = False   # a non-word character since this text's last word
        while p < hi:
            b = np.int64(data[p])
            if b < 0x80:
                cp, size = b, 1
            elif b < 0xE0:
                cp, size = ((b & 0x1F) << 6) | (np.int64(data[p + 1]) & 0x3F), 2
            elif b < 0xF0:
                cp, size = (((b & 0x0F) << 12) | ((np.int64(data[p + 1]) & 0x3F) << 6)
                            | (np.int64(data[p + 2]) & 0x3F)), 3
            else:
                cp, size = (((b & 0x07) << 18) | ((np.int64(data[p + 1]) & 0x3F) << 12)
                            | ((np.int64(data[p + 2]) & 0x3F) << 6) | (np.int64(data[p + 3]) & 0x3F)), 4
            if is_word[cp]:
                if gap and o > out_offsets[d]:
                    out[o] = 32
                    o += 1
                gap = False
                for q in range(size):
                    out[o + q] = data[p + q]
                o += size
            else:
                gap = True
            p += size
        out_offsets[d + 1] = o
    return out[:o], out_offsets


@njit(cache=True)
def word_shingle_ranges(data, doc_offsets, n):
    """Byte ranges of the word ``n``-gram shingles of normalized texts (words joined by one space).

    ``data[doc_offsets[d]:doc_offsets[d+1]]`` is document ``d``'s normalized UTF-8 text, whose
    words never contain the byte 0x20 (UTF-8 continuation bytes are >= 0x80). Returns ``(starts,
    ends, doc_starts)``: shingle ``s`` is ``data[starts[s]:ends[s]]``, exactly the bytes of
    ``" ".join(words[i:i + n])``; document ``d``'s are ``doc_starts[d]:doc_starts[d+1]``, in word
    order, repeats kept (a minimum does not see them). Fewer than ``n`` words: one shingle, the
    whole text; no words: none (as ``word_shingles``).
    """
    n_docs = doc_offsets.shape[0] - 1
    total = 0
    for d in range(n_docs):  # words = spaces + 1 in a non-empty text
        lo, hi = doc_offsets[d], doc_offsets[d + 1]
        if hi > lo:
            words = 1
            for p in range(lo, hi):
                if data[p] == 32:
                    words += 1
            total += max(1, words - n + 1)
    starts = np.empty(total, dtype=np.int64)
    ends = np.empty(total, dtype=np.int64)
    doc_starts = np.zeros(n_docs + 1, dtype=np.int64)
    ring = max(n, 1)
    word_starts = np.empty(ring, dtype=np.int64)   # the starts of the last n words, as a ring
    s = 0
    for d in range(n_docs):
        lo, hi = doc_offsets[d], doc_offsets[d + 1]
        if hi > lo:
            words = 0
            begin = lo
            for p in range(lo, hi + 1):
                if p == hi or data[p] == 32:  # a word ends at p
                    word_starts[words % ring] = begin
                    words += 1
                    if words >= n:
                        starts[s] = word_starts[(words - n) % ring]
                        ends[s] = p
                        s += 1
                    begin = p + 1
            if words < n:
                starts[s] = lo
                ends[s] = hi
                s += 1
        doc_starts[d + 1] = s
    return starts, ends, doc_starts


@njit(cache=True)
def min_permuted(hv, doc_starts, a, b):
    """``uint32[n_docs, k]`` minima of the permuted hashes ``hv`` of each document's shingles.

    Documents with no shingles keep the empty value 2^32 − 1 (datasketch's initial state).
    """
    n_docs, k = doc_starts.shape[0] - 1, a.shape[0]
    out = np.full((n_docs, k), np.uint32(0xFFFFFFFF), dtype=np.uint32)
    for d in range(n_docs):
        for s in range(doc_starts[d], doc_starts[d + 1]):
            h = np.uint64(hv[s])
            for j in range(k):
                x = a[j] * h + b[j]  # uint64: the product and the sum wrap, as in numpy
                r = (x & _P) + (x >> np.uint64(61))  # x mod (2^61 - 1), as 2^61 = 1 (mod 2^61 - 1)
                if r >= _P:
                    r -= _P
                v = np.uint32(r & _MASK32)
                if v < out[d, j]:
                    out[d, j] = v
    return out


@njit(cache=True)
def band_hashes(sig, bands, rows):
    """``int64[n, bands]``: a 64-bit hash of each band's ``rows`` values (splitmix64 chaining)."""
    n = sig.shape[0]
    out = np.empty((n, bands), dtype=np.int64)
    for i in range(n):
        for j in range(bands):
            h = np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(j)
            for r in range(rows):
                h ^= np.uint64(sig[i, j * rows + r])
                h += np.uint64(0x9E3779B97F4A7C15)  # splitmix64 step (Steele et al. 2014)
                h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                h ^= h >> np.uint64(31)
            out[i, j] = np.int64(h)
    return out
