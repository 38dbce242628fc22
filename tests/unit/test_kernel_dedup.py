"""MinHash/LSH kernel against datasketch, the correctness oracle, on real text."""

import csv

import numpy as np
import pytest
from conftest import real_file
from datasketch import MinHash, MinHashLSH

from pipelines.kernels.minhash import band_hashes, minhash_signature, optimal_bands_rows, text_hash, word_shingles


@pytest.fixture(scope="module")
def abt_descriptions():
    with open(real_file("dedupe-AbtBuy_Abt.csv"), encoding="latin-1") as fh:
        return [row["description"] for row in csv.DictReader(fh)][:200]


@pytest.mark.parametrize("num_perm, seed", [(112, 1), (128, 42)])
def test_signatures_bit_identical_to_datasketch_legacy(abt_descriptions, num_perm, seed):
    for text in abt_descriptions:
        shingles = word_shingles(text, 5)
        reference = MinHash(num_perm=num_perm, seed=seed, scheme="legacy")
        for s in shingles:
            reference.update(s)
        assert np.array_equal(minhash_signature(shingles, num_perm, seed), reference.hashvalues)


@pytest.mark.parametrize("threshold, num_perm", [(0.8, 112), (0.5, 128), (0.9, 64)])
def test_bands_and_rows_match_datasketch(threshold, num_perm):
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    assert optimal_bands_rows(threshold, num_perm) == (lsh.b, lsh.r)


def test_band_hashes_agree_exactly_where_bands_agree():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, size=112, dtype=np.uint64).astype(np.uint32)
    b = a.copy()
    b[15] ^= 1  # differs in band 1 (rows 12..23) only
    ha, hb = band_hashes(np.stack([a, b]), 9, 12)
    assert (ha == hb).tolist() == [True, False] + [True] * 7


def test_short_and_empty_texts():
    assert word_shingles("", 5) == set()
    assert word_shingles("Two words", 5) == {b"two words"}
    assert len(word_shingles("one two three four five six", 5)) == 2


def test_batch_signatures_bit_identical_on_all_real_page_texts():
    from pipelines.kernels.minhash import minhash_signatures
    from pipelines.kernels.warc import parse_warc_file

    texts = [r["text"] for name in ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz",
                                    "cc-main-2024-22-whirlwind.warc.wet.gz")
             for r in parse_warc_file(real_file(name)).rows if r["kind"] == "document"]
    shingle_sets = [word_shingles(t, 5) for t in texts] + [set()]   # an empty document too
    ours = minhash_signatures(shingle_sets, 112, 1)
    for shingles, row in zip(shingle_sets, ours):
        reference = MinHash(num_perm=112, seed=1, scheme="legacy")
        reference.update_batch(list(shingles))
        assert np.array_equal(row, reference.hashvalues)


@pytest.mark.parametrize("ngram", [5, 2])
def test_stage_kernel_signatures_bit_identical_to_datasketch_on_real_and_odd_texts(ngram):
    """signature_batch hashes byte ranges of the packed normalized texts, not shingle strings:
    every row must still equal datasketch fed word_shingles, band hashes included."""
    import pyarrow as pa

    from pipelines.config import DedupConfig
    from pipelines.kernels.minhash import lsh_bands_rows, signature_batch, signature_bytes
    from pipelines.kernels.warc import parse_warc_file

    texts = [r["text"] for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows
             if r["kind"] == "document"][:150]
    texts += ["", None, "   ...!?", "Two", "two words", "one two three four five", "a a a a a a a a a a a",
              "Straße ＦＵＬＬ ǅemal ΣΊΣΥΦΟΣ", "日本語のテキスト 中文 ok", "x" * 200 + " " + "y" * 119 + " end",
              " ".join(["word"] * 3) + "\n\n" + "ünï " * 40]
    params = DedupConfig(ngram=ngram, num_perm=112, bands=14, rows=8)
    batch = pa.RecordBatch.from_arrays([pa.array([str(i) for i in range(len(texts))]), pa.array(texts, pa.string())],
                                       names=["doc_id", "text"])
    out = signature_batch(batch, params)
    assert out.column("doc_id").to_pylist() == [str(i) for i in range(len(texts))]
    assert out.column("text_hash").to_pylist() == [text_hash(t or "") for t in texts]
    bands, rows = lsh_bands_rows(params)
    for text, signature, hashes in zip(texts, out.column("signature").to_pylist(), out.column("band_hashes").to_pylist()):
        shingles = word_shingles(text or "", ngram)
        if not shingles:
            assert signature is None and hashes == [], repr(text)
            continue
        reference = MinHash(num_perm=112, seed=1, scheme="legacy")
        reference.update_batch(list(shingles))
        assert signature == signature_bytes(reference.hashvalues), repr(text)
        assert hashes == band_hashes(reference.hashvalues[None, :].astype(np.uint32), bands, rows)[0].tolist()


def test_char_shingles():
    from pipelines.kernels.minhash import char_shingles

    assert char_shingles("中文没有空格", 3) == {"中文没".encode(), "文没有".encode(), "没有空".encode(), "有空格".encode()}
    assert char_shingles("Ab", 5) == {b"ab"} and char_shingles("  ", 5) == set()


def test_explicit_bands_and_rows_are_used_as_given():
    """dedup.bands x dedup.rows (FineWeb's 14 x 8 with 112 permutations) instead of the threshold's optimum."""
    import pyarrow as pa

    from pipelines.config import ConfigError, DedupConfig, load_config
    from pipelines.kernels.minhash import lsh_bands_rows, signature_batch

    assert lsh_bands_rows(DedupConfig()) == optimal_bands_rows(0.8, 112) == (9, 12)
    fineweb = DedupConfig(bands=14, rows=8)
    assert lsh_bands_rows(fineweb) == (14, 8)
    assert load_config(None, ["dedup.bands=14", "dedup.rows=8"]).dedup == fineweb
    batch = pa.RecordBatch.from_pydict({"doc_id": ["a", "b"], "text": ["one two three four five six seven", ""]})
    out = signature_batch(batch, fineweb)
    assert [len(h) for h in out.column("band_hashes").to_pylist()] == [14, 0]
    sig = np.frombuffer(out.column("signature")[0].as_py(), "<u4")
    assert out.column("band_hashes")[0].as_py() == band_hashes(sig[None, :], 14, 8)[0].tolist()
    with pytest.raises(ConfigError, match="go together"):
        load_config(None, ["dedup.bands=14"])
    with pytest.raises(ConfigError, match="exceeds dedup.num_perm"):
        load_config(None, ["dedup.bands=15", "dedup.rows=8"])


def test_normalized_text_is_the_two_pass_definition_on_real_and_odd_text():
    """normalize_text's one ``findall`` pass gives exactly the string of its definition: runs of
    non-word, non-space characters replaced by a space, whitespace collapsed, ends stripped (the
    exact-dedup key, ``silver.dedup_index.text_hash``, must not change)."""
    import re
    import unicodedata

    from pipelines.kernels.minhash import normalize_text
    from pipelines.kernels.warc import parse_warc_file

    def reference(text: str) -> str:
        text = unicodedata.normalize("NFKC", text).lower()
        return re.sub(r"\s+", " ", re.sub(r"[^\w\s]+", " ", text)).strip()

    texts = [r["text"] for name in ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz")
             for r in parse_warc_file(real_file(name)).rows if r["kind"] == "document" and r["text"]]
    rng = np.random.default_rng(0)
    alphabet = list("aZ_9 \t\n\u00a0\u2003.,-!?'\"()\u00e9\u00df\u0130\ufb01\u4e2d\u6587\u3002\u0664\u200b\u2028\x1c")
    texts += ["".join(rng.choice(alphabet, size=int(rng.integers(0, 40)))) for _ in range(2000)]
    texts += ["", "  ", "...", "snake_case_word", "ﬁne Ⅻ ①"]
    assert len(texts) > 2100
    for text in texts:
        assert normalize_text(text) == reference(text), repr(text)
        words = [w for w in reference(text).split(" ") if w]
        want = ({" ".join(words[i:i + 5]).encode() for i in range(len(words) - 4)} if len(words) >= 5
                else {" ".join(words).encode()} if words else set())
        assert word_shingles(text, 5) == want, repr(text)


def test_packed_normalization_equals_normalize_text_on_real_and_odd_text():
    """normalize_texts (the stages' batch path: a compiled scan over a table of ``\\w``) gives the
    bytes of normalize_text for every text, and so text_hashes the exact-dedup keys of text_hash."""
    import re

    from pipelines.kernels.minhash import _word_characters, normalize_text, normalize_texts, text_hash, text_hashes
    from pipelines.kernels.warc import parse_warc_file

    table = _word_characters()
    assert all(bool(re.fullmatch(r"\w", chr(c))) == bool(table[c]) for c in range(0x110000))

    texts = [r["text"] for r in parse_warc_file(real_file("cc-main-2024-22-whirlwind.warc.gz")).rows
             if r["kind"] == "document"]
    rng = np.random.default_rng(1)   # any code point, lone surrogates and 4-byte ones included
    texts += ["".join(map(chr, rng.integers(0, 0x110000, size=int(rng.integers(0, 60))))) for _ in range(500)]
    texts += ["".join(map(chr, range(lo, min(lo + 4096, 0x110000)))) for lo in range(0, 0x110000, 4096)]
    texts += [None, "", " \t ", "...", "İstanbul ΣΊΣΥΦΟΣ ﬁne Ⅻ ①", "trailing, punctuation!", "a_b c"]
    data, offsets = normalize_texts(texts)
    assert len(offsets) == len(texts) + 1
    for i, text in enumerate(texts):
        want = normalize_text(text or "").encode("utf-8", "surrogatepass")
        assert bytes(data[offsets[i]:offsets[i + 1]]) == want, repr(text)
    plain = [t for t in texts[:300] if t is not None] + [""]
    assert text_hashes(plain + [None]) == [text_hash(t) for t in plain] + [text_hash("")]
