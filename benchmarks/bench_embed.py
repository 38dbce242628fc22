"""Chunks and tokens per second of crawlake's embedding kernel vs naive sentence-transformers, on
the same chunk texts, in one process.

Input: the documents of the WARC files in ../shared/data (parsed and extracted by crawlake's
ingest kernel), split into chunks of at most the model's window by crawlake's chunker, repeated
until there are ``--chunks`` of them. Both systems embed exactly these texts.

Systems (``--repeats`` runs each, alternating, medians reported):
  sentence-transformers  ``SentenceTransformer.encode(texts, batch_size=32, normalize_embeddings=True)``
                         on the same model object
  crawlake               ``pipelines.kernels.embed.encode_chunks``: token-budget batches over
                         length-sorted chunks; fp16 and a tokenizing thread on CUDA; the forward
                         pass compiled (``--compile``, default on: the steady state that
                         ``compile: auto`` reaches after 1M tokens per process)

Metrics: chunks_per_s, tokens_per_s (tokens = the model's own tokens per chunk, special tokens
included, padding excluded), ``first_call_s`` (the untimed warm-up call, which includes the
compile), and on CUDA model_flops_utilization (approximate FLOPs of the
encoder per token, 2 x non-embedding parameters + attention, over the GPU's dense fp16 peak,
``--peak-tflops``, 989 for an H100 SXM). Also ``max_abs_diff`` between the two systems' vectors.
JSON lines: {"benchmark", "system", "metric", "value", "unit", "device", ...}.

    python benchmarks/bench_embed.py [--json] [--chunks 2000] [--repeats 3] [--device auto] [--compile on]
                                     [--texts chunks.json | --write-texts chunks.json] [--model FOLDER]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
WARCS = ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz", "cc-main-2024-22-whirlwind.warc.gz")


def real_chunks(n: int, params) -> list[str]:
    """``n`` chunk texts of the real pages (the real ones repeated)."""
    from pipelines.kernels.embed import chunk_documents
    from pipelines.kernels.warc import parse_warc_file

    texts = [r["text"] for name in WARCS if (DATA / name).exists()
             for r in parse_warc_file(str(DATA / name)).rows if r["kind"] == "document" and r["text"]]
    doc_index, spans = chunk_documents(texts, params)
    base = [texts[d][s:e] for d, (s, e, _) in zip(doc_index, spans)]
    return [base[i % len(base)] for i in range(n)]


def encoder_flops_per_token(model, seq_len: float) -> float:
    """2 x non-embedding parameters + attention scores and mixing (4 x layers x seq x hidden)."""
    bert = model[0].auto_model
    cfg = bert.config
    embed_params = sum(p.numel() for p in bert.embeddings.parameters())
    dense = sum(p.numel() for p in bert.parameters()) - embed_params
    return 2 * dense + 4 * cfg.num_hidden_layers * seq_len * cfg.hidden_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--texts", type=Path, default=None,
                        help="a JSON list of chunk texts to embed instead of chunking the real pages here "
                             "(for a GPU box without the WARC parsers; --write-texts makes one)")
    parser.add_argument("--write-texts", type=Path, default=None, help="write the chunk texts as JSON and stop")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--model", default="default")
    parser.add_argument("--tokens-per-batch", type=int, default=0, help="0 = the kernel's default for the device")
    parser.add_argument("--compile", default="on", choices=("on", "off", "auto"),
                        help="crawlake's embed.compile: on = compiled from the first batch (the steady state)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="GPU dense fp16 peak for MFU")
    args = parser.parse_args()

    import numpy as np
    import torch

    from pipelines.config import EmbedConfig
    from pipelines.kernels.embed import EmbedParams, encode_chunks, load_model, resolve_device

    device = resolve_device(args.device)
    compile_ = {"on": True, "off": False, "auto": "auto"}[args.compile]
    params = EmbedParams(EmbedConfig(model=args.model, device=device, tokens_per_batch=args.tokens_per_batch,
                                     compile=compile_))
    if args.texts:
        base = json.loads(args.texts.read_text())
        chunks = [base[i % len(base)] for i in range(args.chunks)]
    else:
        chunks = real_chunks(args.chunks, params)
    if args.write_texts:
        args.write_texts.write_text(json.dumps(chunks))
        return
    model = load_model(params.config.model, params.config.device, params.config.precision)
    lengths = np.array([len(x) for x in model.tokenizer(chunks, truncation=True, max_length=model.max_seq_length)["input_ids"]])
    tokens = int(lengths.sum())
    device_name = torch.cuda.get_device_name() if device == "cuda" else f"cpu x{torch.get_num_threads()} threads"

    naive = load_naive(params, device)  # as a user would write it: default precision (fp32)

    def run_naive():
        return naive.encode(chunks, batch_size=32, normalize_embeddings=True, show_progress_bar=False)

    def run_crawlake():
        out = encode_chunks(chunks, params)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    first_call = {}
    for system, fn in (("sentence-transformers", run_naive), ("crawlake", run_crawlake)):
        t0 = time.perf_counter()
        fn()  # warm-up: kernels, allocator, thread pools, and crawlake's compile
        first_call[system] = time.perf_counter() - t0
    times = {"sentence-transformers": [], "crawlake": []}
    vecs = {}
    for _ in range(args.repeats):
        for system, fn in (("sentence-transformers", run_naive), ("crawlake", run_crawlake)):
            t0 = time.perf_counter()
            vecs[system] = fn()
            times[system].append(time.perf_counter() - t0)

    diff = float(np.abs(np.asarray(vecs["crawlake"], np.float32) - np.asarray(vecs["sentence-transformers"], np.float32)).max())
    mean_len = tokens / len(chunks)
    rows = []
    for system, ts in times.items():
        med = statistics.median(ts)
        extra = {"device": device_name, "chunks": len(chunks), "tokens": tokens, "mean_tokens_per_chunk": round(mean_len, 1),
                 "repeats": args.repeats, "seconds": [round(t, 3) for t in ts], "compile": args.compile}
        rows.append({"benchmark": "embed", "system": system, "metric": "chunks_per_s", "value": round(len(chunks) / med, 1), "unit": "chunks/s", **extra})
        rows.append({"benchmark": "embed", "system": system, "metric": "tokens_per_s", "value": round(tokens / med, 1), "unit": "tokens/s", **extra})
        rows.append({"benchmark": "embed", "system": system, "metric": "first_call_s", "value": round(first_call[system], 2), "unit": "s", **extra})
        if device == "cuda":
            mfu = encoder_flops_per_token(model, mean_len) * tokens / med / (args.peak_tflops * 1e12)
            rows.append({"benchmark": "embed", "system": system, "metric": "model_flops_utilization", "value": round(mfu, 4), "unit": "ratio", **extra})
    rows.append({"benchmark": "embed", "system": "crawlake", "metric": "max_abs_diff", "value": diff, "unit": "abs", "device": device_name,
                 "note": "vs the naive fp32 vectors; fp16 on CUDA"})
    base = statistics.median(times["sentence-transformers"]) / statistics.median(times["crawlake"])
    rows.append({"benchmark": "embed", "system": "crawlake", "metric": "speedup_vs_naive", "value": round(base, 3), "unit": "ratio", "device": device_name})
    for r in rows:
        if args.json:
            print(json.dumps(r))
        else:
            print(f"{r['system']:>22}  {r['metric']:<26} {r['value']:>12} {r['unit']}")


def load_naive(params, device):
    """A separate fp32 SentenceTransformer loaded as the documentation shows."""
    from sentence_transformers import SentenceTransformer

    from pipelines.kernels.embed import resolve_model

    return SentenceTransformer(resolve_model(params.config.model).source, device=device)


if __name__ == "__main__":
    main()
