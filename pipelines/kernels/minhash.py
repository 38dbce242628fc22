"""Shingling, MinHash signatures and LSH band hashes (no Spark).

Follows Broder (1997) MinHash with LSH banding (Leskovec, Rajaraman & Ullman, *Mining of Massive
Datasets*, ch. 3). Signatures are bit-identical to ``datasketch.MinHash(num_perm, seed,
scheme="legacy")`` fed the same shingles as UTF-8 bytes: 32-bit SHA-1 shingle hashes, permutations
``(a·h + b) mod (2^61 − 1)`` truncated to 32 bits, ``a, b`` drawn from ``RandomState(seed)`` as
datasketch draws them. Bands × rows follow datasketch's ``_optimal_param`` (equal weights on
false-positive and false-negative probability mass).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

import numpy as np
import pyarrow as pa
from scipy.integrate import quad

MERSENNE_PRIME = np.uint64((1 << 61) - 1)
MAX_HASH = np.uint64((1 << 32) - 1)

_NON_WORD = re.compile(r"[^\w\s]+", re.UNICODE)
_SPACE = re.compile(r"\s+", re.UNICODE)


def normalize_text(text: str) -> str:
    """NFKC, lower case, punctuation removed, whitespace collapsed (the exact-dedup key basis)."""
    text = unicodedata.normalize("NFKC", text).lower()
    return _SPACE.sub(" ", _NON_WORD.sub(" ", text)).strip()


def text_hash(text: str) -> str:
    """Exact-duplicate key: sha256 hex of :func:`normalize_text`."""
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


def word_shingles(text: str, n: int = 5) -> set[bytes]:
    """Word ``n``-gram shingles of the normalized text, as UTF-8 bytes.

    A text with fewer than ``n`` words gives one shingle (the whole text); an empty text none.
    """
    words = normalize_text(text).split(" ")
    words = [w for w in words if w]
    if not words:
        return set()
    if len(words) < n:
        return {" ".join(words).encode("utf-8")}
    return {" ".join(words[i:i + n]).encode("utf-8") for i in range(len(words) - n + 1)}


@lru_cache(maxsize=16)
def permutations(num_perm: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``, each ``uint64[num_perm]``, drawn exactly as datasketch's legacy scheme does."""
    gen = np.random.RandomState(seed)
    pairs = np.array(
        [(gen.randint(1, MERSENNE_PRIME, dtype=np.uint64), gen.randint(0, MERSENNE_PRIME, dtype=np.uint64))
         for _ in range(num_perm)],
        dtype=np.uint64,
    ).T
    return pairs[0].copy(), pairs[1].copy()


def sha1_hash32(shingles: set[bytes] | list[bytes]) -> np.ndarray:
    """``uint64[len(shingles)]``: first 4 bytes of SHA-1, little-endian (datasketch.sha1_hash32)."""
    digests = b"".join(hashlib.sha1(s).digest()[:4] for s in shingles)
    return np.frombuffer(digests, dtype="<u4").astype(np.uint64)


def minhash_signature(shingles: set[bytes] | list[bytes], num_perm: int = 112, seed: int = 1) -> np.ndarray:
    """MinHash signature, ``uint32[num_perm]``; all ``2^32 − 1`` for an empty shingle set."""
    a, b = permutations(num_perm, seed)
    if not shingles:
        return np.full(num_perm, MAX_HASH, dtype=np.uint32)
    hv = sha1_hash32(shingles)[:, None]
    # uint64 products wrap exactly as datasketch's numpy arithmetic does.
    with np.errstate(over="ignore"):
        phv = np.bitwise_and((hv * a + b) % MERSENNE_PRIME, MAX_HASH)
    return phv.min(axis=0).astype(np.uint32)


def _false_positive(threshold: float, b: int, r: int) -> float:
    return quad(lambda s: 1 - (1 - s ** float(r)) ** float(b), 0.0, threshold)[0]


def _false_negative(threshold: float, b: int, r: int) -> float:
    return quad(lambda s: 1 - (1 - (1 - s ** float(r)) ** float(b)), threshold, 1.0)[0]


@lru_cache(maxsize=64)
def optimal_bands_rows(threshold: float, num_perm: int,
                       fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands·rows <= num_perm`` minimizing the weighted error mass.

    Same search as datasketch's ``MinHashLSH`` (``_optimal_param``). Raises ValueError for a
    threshold outside (0, 1).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"Jaccard threshold must be in (0, 1), got {threshold}")
    best, best_err = (0, 0), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            err = fp_weight * _false_positive(threshold, b, r) + fn_weight * _false_negative(threshold, b, r)
            if err < best_err:
                best, best_err = (b, r), err
    return best


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``int64[n, bands]`` hashes of each band of ``uint32[n, num_perm]`` signatures.

    Each band's ``rows`` values are hashed with BLAKE2b-64 of their little-endian bytes, so two
    documents share a band hash exactly when they agree on that band (up to 2^-64 collisions).
    """
    n = signatures.shape[0]
    sig = np.ascontiguousarray(signatures[:, : bands * rows].astype("<u4")).reshape(n, bands, rows)
    out = np.empty((n, bands), dtype=np.int64)
    for i in range(n):
        for j in range(bands):
            digest = hashlib.blake2b(sig[i, j].tobytes(), digest_size=8).digest()
            out[i, j] = int.from_bytes(digest, "little", signed=True)
    return out


SIGNATURE_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("band", pa.int32()),
    ("band_hash", pa.int64()),
])


def band_batch(batch: pa.RecordBatch, *, ngram: int, num_perm: int, seed: int,
               bands: int, rows: int) -> pa.RecordBatch:
    """``(doc_id, text)`` batch → one ``(doc_id, band, band_hash)`` row per document and band.

    Documents with no shingles (empty text) get no rows: they cannot be near-duplicates.
    """
    doc_ids = batch.column("doc_id").to_pylist()
    texts = batch.column("text").to_pylist()
    keep, sigs = [], []
    for doc_id, text in zip(doc_ids, texts):
        shingles = word_shingles(text or "", ngram)
        if shingles:
            keep.append(doc_id)
            sigs.append(minhash_signature(shingles, num_perm, seed))
    if not keep:
        return pa.RecordBatch.from_pylist([], schema=SIGNATURE_SCHEMA)
    hashes = band_hashes(np.stack(sigs), bands, rows)
    return pa.RecordBatch.from_arrays(
        [pa.array(np.repeat(keep, bands).tolist(), pa.string()),
         pa.array(np.tile(np.arange(bands, dtype=np.int32), len(keep))),
         pa.array(hashes.reshape(-1))],
        schema=SIGNATURE_SCHEMA,
    )
