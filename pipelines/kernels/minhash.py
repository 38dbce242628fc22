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
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa
from scipy.integrate import quad

from pipelines.config import DedupConfig
from pipelines.kernels import _minhash_jit as _jit

MERSENNE_PRIME = np.uint64((1 << 61) - 1)
MAX_HASH = np.uint64((1 << 32) - 1)

_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    """The runs of word characters (``\\w``, Unicode) of the NFKC, lower-cased text."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def normalize_text(text: str) -> str:
    """NFKC, lower case, punctuation removed, whitespace collapsed (the exact-dedup key basis):
    the text's words joined by single spaces. One regex pass (``findall``), the same string as
    replacing every run of non-word, non-space characters with a space and collapsing whitespace."""
    return " ".join(_words(text))


def text_hash(text: str) -> str:
    """Exact-duplicate key: sha256 hex of :func:`normalize_text`."""
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


@lru_cache(maxsize=1)
def _word_characters() -> np.ndarray:
    """``bool[0x110000]``: the code points ``re``'s ``\\w`` matches in a str pattern
    (``str.isalnum()`` or ``_``)."""
    table = np.fromiter((chr(c).isalnum() for c in range(0x110000)), dtype=np.bool_, count=0x110000)
    table[ord("_")] = True
    return table


def normalize_texts(texts: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`normalize_text` of many texts (None as ""), packed as UTF-8: ``(data uint8[m],
    offsets int64[n + 1])``, text ``i`` being ``data[offsets[i]:offsets[i+1]]``.

    The same bytes as ``normalize_text(t).encode("utf-8")``; NFKC and lower case stay Python's,
    the word runs are cut by a compiled scan over a table of ``\\w`` (the regex was most of the
    cost)."""
    lowered = [unicodedata.normalize("NFKC", t or "").lower().encode("utf-8", "surrogatepass") for t in texts]
    offsets = np.zeros(len(lowered) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in lowered], out=offsets[1:])
    return _jit.word_runs(np.frombuffer(b"".join(lowered), dtype=np.uint8), offsets, _word_characters())


def text_hashes(texts: Sequence[str | None]) -> list[str]:
    """:func:`text_hash` of many texts (None as ""), through :func:`normalize_texts`."""
    return _packed_hashes(*normalize_texts(texts))


def _packed_hashes(data: np.ndarray, offsets: np.ndarray) -> list[str]:
    """sha256 hex of each packed normalized text (:func:`normalize_texts`'s output)."""
    view, bounds = memoryview(data), offsets.tolist()
    return [hashlib.sha256(view[a:b]).hexdigest() for a, b in zip(bounds[:-1], bounds[1:])]


def word_shingles(text: str, n: int = 5) -> set[bytes]:
    """Word ``n``-gram shingles of the normalized text, as UTF-8 bytes.

    A text with fewer than ``n`` words gives one shingle (the whole text); an empty text none.
    """
    words = _words(text)
    if not words:
        return set()
    if len(words) < n:
        return {" ".join(words).encode("utf-8")}
    return {" ".join(words[i:i + n]).encode("utf-8") for i in range(len(words) - n + 1)}


def char_shingles(text: str, n: int = 5) -> set[bytes]:
    """Character ``n``-gram shingles of the normalized text (spaces kept), as UTF-8 bytes.

    For scripts written without spaces (Chinese, Japanese, Thai) and for short records, where
    word n-grams are too few. A text shorter than ``n`` gives one shingle; an empty text none.
    """
    norm = normalize_text(text)
    if not norm:
        return set()
    if len(norm) < n:
        return {norm.encode("utf-8")}
    return {norm[i:i + n].encode("utf-8") for i in range(len(norm) - n + 1)}


def shingle_jaccard(a: str, b: str, n: int = 5) -> float:
    """Exact Jaccard similarity of two texts' word ``n``-gram shingle sets (0.0 if both are empty)."""
    sa, sb = word_shingles(a, n), word_shingles(b, n)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 0.0


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


def pack_shingles(shingle_sets: list[set[bytes] | list[bytes]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(data uint8[m], offsets int64[n_shingles + 1], doc_starts int64[n_docs + 1])``."""
    flat = [s for shingles in shingle_sets for s in shingles]
    data = np.frombuffer(b"".join(flat), dtype=np.uint8)
    offsets = np.zeros(len(flat) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in flat], out=offsets[1:])
    doc_starts = np.zeros(len(shingle_sets) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in shingle_sets], out=doc_starts[1:])
    return data, offsets, doc_starts


def minhash_signatures(shingle_sets: list[set[bytes] | list[bytes]], num_perm: int = 112, seed: int = 1) -> np.ndarray:
    """MinHash signatures, ``uint32[n_docs, num_perm]``, one row per shingle set.

    Compiled (numba): SHA-1 of each shingle, then the legacy permutations; an empty set gives a
    row of ``2^32 − 1``. Bit-identical to ``datasketch.MinHash(num_perm, seed, scheme="legacy")``.
    """
    a, b = permutations(num_perm, seed)
    data, offsets, doc_starts = pack_shingles(shingle_sets)
    return _jit.min_permuted(_jit.sha1_hash32(data, offsets), doc_starts, a, b)


def minhash_signature(shingles: set[bytes] | list[bytes], num_perm: int = 112, seed: int = 1) -> np.ndarray:
    """MinHash signature of one shingle set, ``uint32[num_perm]``."""
    return minhash_signatures([shingles], num_perm, seed)[0]


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


def lsh_bands_rows(params: DedupConfig) -> tuple[int, int]:
    """``(bands, rows)`` of the ``dedup`` config section: ``bands``/``rows`` as given, else
    :func:`optimal_bands_rows` for its ``threshold`` and ``num_perm``."""
    if params.bands is not None and params.rows is not None:
        return params.bands, params.rows
    return optimal_bands_rows(params.threshold, params.num_perm)


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``int64[n, bands]`` hashes of each band of ``uint32[n, num_perm]`` signatures.

    Each band's ``rows`` values are chained through splitmix64, so two documents share a band
    hash exactly when they agree on that band (up to 64-bit collisions).
    """
    return _jit.band_hashes(np.ascontiguousarray(signatures, dtype=np.uint32), bands, rows)


#: One row per document: what the incremental dedup index keeps of it.
INDEX_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("text_hash", pa.string()),               # exact-dedup key: text_hash(text)
    ("signature", pa.binary()),               # uint32[num_perm], little-endian; null: no shingles
    ("band_hashes", pa.list_(pa.int64())),    # int64[bands]; empty: no shingles
])


def signature_bytes(signature: np.ndarray) -> bytes:
    """``uint32[num_perm]`` → ``4·num_perm`` bytes, little-endian (how the index stores it)."""
    return np.ascontiguousarray(signature, dtype="<u4").tobytes()


def estimated_jaccard(a: bytes | None, b: bytes | None) -> float | None:
    """MinHash estimate of the Jaccard similarity of two stored signatures (Broder 1997).

    The fraction of the ``num_perm`` positions where the two signatures are equal, in [0, 1].
    None when either signature is missing (a document without shingles). Raises ValueError when
    the two have different lengths (signatures from different ``num_perm`` are not comparable).
    """
    if a is None or b is None:
        return None
    if len(a) != len(b):
        raise ValueError(f"signatures of different lengths ({len(a)} and {len(b)} bytes)")
    return float(np.mean(np.frombuffer(a, dtype="<u4") == np.frombuffer(b, dtype="<u4")))


def signature_batch(batch: pa.RecordBatch, params: DedupConfig) -> pa.RecordBatch:
    """``(doc_id, text)`` batch → one :data:`INDEX_SCHEMA` row per document: both dedup keys from
    one normalization of each text.

    ``text_hash`` is :func:`text_hash`, the exact-duplicate key. ``params`` is the ``dedup`` config
    section: word ``ngram`` shingles → MinHash signature
    (``num_perm`` permutations, ``seed``; Broder 1997) → LSH band hashes, ``bands`` of ``rows``
    values each, as the section gives them or :func:`optimal_bands_rows` picks them for
    ``threshold`` (:func:`lsh_bands_rows`; Leskovec et al., *Mining of Massive Datasets*, ch. 3). A document with no shingles (empty normalized text)
    keeps its row, with a null signature and no band hashes: it can be an exact duplicate, never
    a near one.
    """
    ngram, num_perm, seed = params.ngram, params.num_perm, params.seed
    bands, rows = lsh_bands_rows(params)
    doc_ids = batch.column("doc_id").cast(pa.string())
    a, b = permutations(num_perm, seed)
    # The shingles are byte ranges of the packed normalized texts: no per-shingle string.
    data, offsets = normalize_texts(batch.column("text").to_pylist())
    starts, ends, doc_starts = _jit.word_shingle_ranges(data, offsets, ngram)
    counts = np.diff(doc_starts)
    hashed = np.flatnonzero(counts)
    sigs = _jit.min_permuted(_jit.sha1_hash32_ranges(data, starts, ends), doc_starts, a, b)[hashed]
    signatures: list[bytes | None] = [None] * len(doc_ids)
    for i, sig in zip(hashed.tolist(), sigs):
        signatures[i] = signature_bytes(sig)
    list_offsets = np.zeros(len(doc_ids) + 1, dtype=np.int32)
    np.cumsum(np.where(counts > 0, bands, 0), out=list_offsets[1:])
    values = band_hashes(sigs, bands, rows).reshape(-1)
    return pa.RecordBatch.from_arrays(
        [doc_ids, pa.array(_packed_hashes(data, offsets), pa.string()), pa.array(signatures, pa.binary()),
         pa.ListArray.from_arrays(pa.array(list_offsets), pa.array(values, pa.int64()))],
        schema=INDEX_SCHEMA,
    )
