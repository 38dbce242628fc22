"""Compiled inner loops of the MinHash kernel (numba, single-threaded; engines parallelize).

``sha1_hash32`` reproduces ``datasketch.hashfunc.sha1_hash32`` (first 4 bytes of SHA-1, read
little-endian; FIPS 180-4 SHA-1) over many byte strings packed in one buffer, and
``min_permuted`` the legacy-scheme permutations ``((a·h + b) mod (2^61 − 1)) & (2^32 − 1)`` with
uint64 arithmetic that wraps exactly as numpy's does in datasketch.
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
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.uint32)
    w = np.empty(80, dtype=np.uint32)
    for i in range(n):
        start, length = offsets[i], offsets[i + 1] - offsets[i]
        h0, h1, h2, h3, h4 = (np.uint32(0x67452301), np.uint32(0xEFCDAB89), np.uint32(0x98BADCFE),
                              np.uint32(0x10325476), np.uint32(0xC3D2E1F0))
        n_blocks = (length + 8) // 64 + 1
        bit_len = np.uint64(length) * np.uint64(8)
        for blk in range(n_blocks):
            for t in range(16):
                word = np.uint32(0)
                for k in range(4):
                    pos = blk * 64 + t * 4 + k
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
            for t in range(80):
                if t < 20:
                    f, k = (b & c) | (~b & d), np.uint32(0x5A827999)
                elif t < 40:
                    f, k = b ^ c ^ d, np.uint32(0x6ED9EBA1)
                elif t < 60:
                    f, k = (b & c) | (b & d) | (c & d), np.uint32(0x8F1BBCDC)
                else:
                    f, k = b ^ c ^ d, np.uint32(0xCA62C1D6)
                tmp = (_rotl(a, 5) + f + e + k + w[t]) & np.uint32(0xFFFFFFFF)
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
                v = np.uint32(((a[j] * h + b[j]) % _P) & _MASK32)  # uint64 product wraps, as in numpy
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
