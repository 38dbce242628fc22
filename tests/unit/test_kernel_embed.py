"""The embedding kernel on CPU (no Spark): batching, chunking, vectors against
sentence-transformers' ``encode``, model revisions, bad models."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest
from conftest import real_file

from pipelines.config import EmbedConfig
from pipelines.kernels.embed import (EmbedParams, ModelRef, chunk_documents, embed_batch, load_model, plan_batches,
                                     resolve_model)

CPU = EmbedParams(EmbedConfig(device="cpu"))
pytestmark = pytest.mark.usefixtures("one_thread_while_building")


# -- kernel ----------------------------------------------------------------------------------------

def test_plan_batches_covers_every_row_once_within_the_token_budget():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=1000)
    batches = plan_batches(lengths, 4096, 64)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))
    for b in batches:
        assert len(b) <= 64
        assert len(b) == 1 or len(b) * lengths[b].max() <= 4096
    assert [lengths[b].max() for b in batches] == sorted((lengths[b].max() for b in batches), reverse=True)
    assert len(plan_batches(np.array([10_000]), 512, 8)) == 1  # an over-long row is its own batch


def test_a_batch_holds_rows_of_one_length_in_key_order():
    lengths = np.array([5, 3, 3, 3, 3, 1, 1])
    keys = ["f", "d", "b", "c", "a", "e", "g"]
    want = [["f"], ["a", "b", "c"], ["d"], ["e", "g"]]   # budget 10: 3 rows of 3 tokens
    assert [[keys[i] for i in b] for b in plan_batches(lengths, 10, 64, keys=keys)] == want
    perm = [6, 5, 4, 3, 2, 1, 0]
    again = plan_batches(lengths[perm], 10, 64, keys=[keys[i] for i in perm])
    assert [[keys[perm[i]] for i in b] for b in again] == want


def _excerpt_pages() -> list[str]:
    """The non-empty page texts of the real 2020-34 excerpt."""
    from pipelines.kernels.warc import parse_warc_file

    return [r["text"] for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows
            if r["kind"] == "document" and r["text"]]


def test_a_chunks_vector_does_not_depend_on_its_batch_mates():
    """Bits, not a tolerance: the index's fingerprint hashes the vectors, and a document must get
    the same vector in a full run and in an incremental one, in any task, in any order."""
    from pipelines.kernels.embed import encode_chunks

    texts = _excerpt_pages()
    # many chunks of equal and nearby lengths: first words of the pages, and their reversals
    chunks = [" ".join(t.split()[:n]) for t in texts for n in (6, 9, 40)]
    chunks = list(dict.fromkeys(chunks + [" ".join(reversed(c.split())) for c in chunks]))
    params = EmbedParams(EmbedConfig(device="cpu", tokens_per_batch=256))
    whole = encode_chunks(chunks, params)
    perm = np.random.default_rng(1).permutation(len(chunks))
    assert np.array_equal(encode_chunks([chunks[i] for i in perm], params), whole[perm])
    half = len(chunks) // 2
    assert np.array_equal(np.concatenate([encode_chunks(chunks[:half], params), encode_chunks(chunks[half:], params)]), whole)
    wide = EmbedParams(EmbedConfig(device="cpu", tokens_per_batch=8192))
    assert np.array_equal(encode_chunks(chunks[::3], wide), whole[::3])
    assert all(np.array_equal(encode_chunks([c], params)[0], whole[i]) for i, c in enumerate(chunks[:12]))


def test_a_chunks_vector_does_not_depend_on_the_thread_count():
    """Executors differ in cores: one torch thread and two give the same bits (MKL's strict CNR
    mode, set on importing pipelines; without it, rows differed by about 1e-7 here)."""
    import torch

    from pipelines.kernels.embed import encode_chunks

    chunks = [" ".join(t.split()[:n]) for t in _excerpt_pages() for n in (6, 40, 200)]
    params = EmbedParams(EmbedConfig(device="cpu", tokens_per_batch=2048))
    before = torch.get_num_threads()
    try:
        vectors = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            vectors.append(encode_chunks(chunks, params))
    finally:
        torch.set_num_threads(before)
    assert np.array_equal(vectors[0], vectors[1])


def test_by_default_a_vector_does_not_depend_on_what_its_process_embedded_before(monkeypatch):
    """A full run's workers embed millions of tokens, an incremental run's a few: under
    ``compile: auto`` the first switched to the compiled pass, whose bits differ from the eager
    pass's, so the same document got other bits in a full and an incremental run."""
    from pipelines.kernels import embed as kernel

    chunks = ["a page about rivers", "another page, about the sea and its tides"]
    params = EmbedParams(EmbedConfig(device="cpu"))
    fresh = kernel.encode_chunks(chunks, params)
    monkeypatch.setattr(kernel, "_tokens_embedded", kernel.AUTO_COMPILE_AFTER_TOKENS + 1)
    assert kernel._forward(params, on_gpu=False) is kernel.load_model("default", "cpu", "auto")   # eager
    assert np.array_equal(kernel.encode_chunks(chunks, params), fresh)


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_batch_gathered_from_one_tokenization_equals_tokenizing_its_rows(side, monkeypatch):
    """Texts are tokenized once, in slices wider than a batch; a batch cut from that must be what
    tokenizing its rows alone and padding them to the batch length gives, on either padding side."""
    import torch

    from pipelines.kernels.embed import _batch_features, _pad_features, _row_lengths, _tokenize

    model = load_model("default", "cpu", "auto")
    monkeypatch.setattr(model.tokenizer, "padding_side", side)
    texts = [" ".join(["word"] * n) + f" {n}" for n in (3, 40, 7, 300, 18, 1, 90)]
    features, lengths = _tokenize(model, texts, slice_rows=3)   # three slices of different widths
    padded = _row_lengths(model, lengths)
    assert features["input_ids"].shape == (len(texts), padded.max()) and padded.max() == model.max_seq_length
    for idx in (np.array([4, 0]), np.array([3]), np.array([6, 1, 2])):
        length = int(padded[idx].max())
        got = _batch_features(model, features, idx, length)
        want = _pad_features(model, model.preprocess([texts[i] for i in idx]), length)
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert torch.equal(got[key], value) if torch.is_tensor(value) else got[key] == value, key


@pytest.fixture
def fresh_rust_tokenizer():
    """The cached Rust tokenizer is built from the tokenizer's settings of its first use."""
    from pipelines.kernels import embed as kernel

    kernel._rust_tokenizer.cache_clear()
    yield
    kernel._rust_tokenizer.cache_clear()


@pytest.mark.parametrize("side", ["right", "left"])
def test_the_rust_tokenizer_gives_what_the_models_preprocess_gives(side, monkeypatch, fresh_rust_tokenizer):
    """Above :data:`CHECK_ROWS` texts the Rust tokenizer tokenizes a call alone; its features must
    be exactly those of ``model.preprocess`` (real pages: long, short, empty and non-Latin texts),
    padded and truncated on either side."""
    import torch

    from pipelines.kernels import embed as kernel
    from pipelines.kernels.warc import parse_warc_file

    model = load_model("default", "cpu", "auto")
    monkeypatch.setattr(model.tokenizer, "padding_side", side)
    monkeypatch.setattr(model.tokenizer, "truncation_side", side)
    pages = [r["text"] or "" for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows
             if r["kind"] == "document"]
    texts = pages + [p for page in pages for p in page.split("\n\n")][:150] + ["", " ", "naïve café 東京 🙂", " ".join(f"w{i}" for i in range(600))]
    assert len(texts) > kernel.CHECK_ROWS
    features, lengths = kernel._tokenize(model, texts)
    want, want_lengths = kernel._tokenize_slices(model, texts, 1024)
    assert id(model) not in kernel._preprocess_only
    assert np.array_equal(lengths, want_lengths) and lengths.max() == model.max_seq_length
    assert list(features) == list(want)
    for key, value in want.items():
        assert torch.equal(features[key], value) if torch.is_tensor(value) else features[key] == value, key


def test_a_model_whose_preprocess_the_rust_tokenizer_misses_is_tokenized_by_preprocess(monkeypatch):
    """A model that changes texts in Python before tokenizing (here: lowercasing into a cased
    vocabulary's view) must not get the Rust tokenizer's features: the sampled check sees the
    difference and the call, and later ones, go through ``model.preprocess``."""
    from pipelines.kernels import embed as kernel

    model = load_model("default", "cpu", "auto")
    monkeypatch.setattr(kernel, "_preprocess_only", set())
    own = model.preprocess
    monkeypatch.setattr(model, "preprocess", lambda texts, **kw: own([t.upper() + " [SEP]" for t in texts], **kw))
    texts = [f"Text number {i} of a call" for i in range(kernel.CHECK_ROWS + 10)]
    features, lengths = kernel._tokenize(model, texts)
    assert id(model) in kernel._preprocess_only
    want, want_lengths = kernel._tokenize_slices(model, texts, 1024)
    assert np.array_equal(lengths, want_lengths) and np.array_equal(features["input_ids"], want["input_ids"])


def test_chunks_cover_the_text_in_overlapping_windows_of_at_most_the_model_length():
    text = " ".join(f"word{i}" for i in range(2000))
    params = EmbedParams(EmbedConfig(device="cpu", max_chunk_tokens=100, chunk_overlap_tokens=20))
    doc_index, spans = chunk_documents([text, "", "short text"], params)
    assert set(doc_index.tolist()) == {0, 2}  # an empty text has no chunks
    first = [s for d, s in zip(doc_index, spans) if d == 0]
    assert first[0][0] == 0 and first[-1][1] == len(text)
    assert all(n <= 100 for _, _, n in first)
    assert all(b[0] < a[1] for a, b in zip(first, first[1:]))  # consecutive windows overlap
    tok = load_model("default", "cpu", "auto").tokenizer
    for s, e, n in first:  # the window's text re-tokenizes to its token count (give or take a split word)
        assert abs(len(tok(text[s:e], add_special_tokens=False)["input_ids"]) - n) <= 2


def test_overlap_not_smaller_than_window_is_an_error():
    with pytest.raises(ValueError, match="overlap"):
        chunk_documents(["some text " * 50], EmbedParams(EmbedConfig(device="cpu", max_chunk_tokens=16, chunk_overlap_tokens=16)))


def test_embed_batch_rows_match_sentence_transformers_on_real_pages():
    from pipelines.kernels.warc import parse_warc_file

    rows = [r for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows if r["kind"] == "document"][:5]
    batch = pa.RecordBatch.from_pydict({"doc_id": [r["doc_id"] for r in rows], "text": [r["text"] for r in rows]})
    out = embed_batch(batch, CPU).to_pydict()
    texts = {r["doc_id"]: r["text"] for r in rows}
    chunks = [texts[d][s:e] for d, s, e in zip(out["doc_id"], out["char_start"], out["char_end"])]
    want = load_model("default", "cpu", "auto").encode(chunks, normalize_embeddings=True, batch_size=32)
    got = np.asarray(out["vector"], np.float32)
    assert got.shape == want.shape and got.shape[1] == 384
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    for d in set(out["doc_id"]):  # chunk ids count from 0 per document
        ids = [c for doc, c in zip(out["doc_id"], out["chunk_id"]) if doc == d]
        assert ids == list(range(len(ids)))
    assert set(out["model"]) == {"sentence-transformers/all-MiniLM-L6-v2"}
    assert set(out["model_revision"]) == {resolve_model("default").revision}


def test_model_revision_follows_the_weights(tmp_path):
    ref = resolve_model("default")
    copy = tmp_path / "minilm"
    shutil.copytree(ref.source, copy)
    assert resolve_model(str(copy)) == ModelRef(str(copy), str(copy), ref.revision)
    (copy / "config.json").write_text((copy / "config.json").read_text() + "\n")
    from pipelines.kernels.embed import _folder_digest

    _folder_digest.cache_clear()
    assert resolve_model(str(copy)).revision != ref.revision
    with pytest.raises(FileNotFoundError):
        resolve_model(str(tmp_path / "no-such-model"))


def test_a_model_that_gives_nan_vectors_is_an_error(tmp_path):
    from safetensors.torch import load_file, save_file

    from pipelines.kernels.embed import encode_chunks

    broken = tmp_path / "broken-minilm"
    shutil.copytree(resolve_model("default").source, broken)
    weights = load_file(broken / "model.safetensors")
    name = next(k for k in weights if k.endswith("output.dense.weight"))
    weights[name][0, 0] = float("nan")  # one weight, as an fp16 overflow would leave it
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(FloatingPointError, match="2 of 2 embedding vectors are not finite"):
        encode_chunks(["a first chunk", "a second chunk"], EmbedParams(EmbedConfig(model=str(broken), device="cpu")))


def test_precision_other_than_fp32_on_cpu_is_an_error():
    with pytest.raises(ValueError, match="GPU"):
        load_model("default", "cpu", "fp16")


def test_loading_the_model_draws_no_progress_bar_and_keeps_the_callers_setting(capfd):
    from transformers.utils import logging as hf_logging

    for enabled in (True, False):
        (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
        try:
            load_model.__wrapped__("default", "cpu", "auto")   # past the per-process cache: a real load
            assert hf_logging.is_progress_bar_enabled() is enabled
        finally:
            hf_logging.enable_progress_bar()
    assert "Loading weights" not in capfd.readouterr().err
