"""Tokens per second of the tokenize stage vs Tokenizer.encode_batch alone, on the same texts.

Input: the extracted page texts of the WARC files in ../shared/data, repeated ``--copies`` times
(new doc_ids), written with deltalake as a lake's ``silver.documents_clean`` (doc_id, text).

Systems (``--repeats`` runs each, alternating, medians reported):
  tokenizers  the default tokenizer's ``encode_batch`` (Rust, all cores) on the texts in
              batches of 1000 (Spark's Arrow batch size here), no special tokens
  crawlake    ``pipelines.stages.tokenize.run`` end to end on local Spark (all cores): read
              the Delta table, hash into pack groups, shuffle, sort, tokenize and pack in
              mapInArrow, write gold.token_sequences and gold.document_tokens, count
              (Spark session start-up and a warm-up run on one copy are not timed)

Metric: tokens_per_s (document tokens, separators not counted) and tokens_per_s_per_core (the
same over the machine's cores, which both systems use), plus ratio_vs_tokenizers for crawlake.
Target (issue 6): >= 0.8x per core.

    python benchmarks/bench_tokenize.py [--json] [--copies 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
WARCS = ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz", "cc-main-2024-22-whirlwind.warc.gz")


def real_texts() -> list[str]:
    from pipelines.kernels.warc import parse_warc_file

    return [r["text"] for name in WARCS for r in parse_warc_file(str(DATA / name)).rows if r["kind"] == "document"]


def write_documents(root: str, texts: list[str], copies: int) -> list[str]:
    import pyarrow as pa
    from deltalake import write_deltalake

    all_texts = texts * copies
    table = pa.table({"doc_id": [f"{i:08d}" for i in range(len(all_texts))], "text": all_texts})
    write_deltalake(f"{root}/silver/documents_clean", table, mode="overwrite")
    return all_texts


def run_tokenizers(texts: list[str]) -> int:
    from pipelines.kernels.tokens import load_tokenizer

    tok = load_tokenizer("default")
    return sum(len(e.ids) for i in range(0, len(texts), 1000)
               for e in tok.encode_batch(texts[i:i + 1000], add_special_tokens=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=2048)
    args = parser.parse_args()

    from pipelines.config import load_config
    from pipelines.ledger import new_run_id
    from pipelines.session import get_spark
    from pipelines.stage import StageContext
    from pipelines.stages import tokenize
    from pipelines.lake import Lake

    texts = real_texts()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench_tokenize_") as tmp:
        cfg = load_config("local", [f"lake.root={tmp}", f"tokenize.seq_len={args.seq_len}"])
        spark = get_spark(cfg.spark)
        ctx = StageContext(spark=spark, cfg=cfg, lake=Lake(spark, cfg.lake), run_id=new_run_id())
        write_documents(tmp, texts, 1)
        tokenize.run(ctx)  # warm-up: JVM, Python workers, tokenizer load
        corpus = write_documents(tmp, texts, args.copies)
        times = {"tokenizers": [], "crawlake": []}
        tokens = {}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tokens["tokenizers"] = run_tokenizers(corpus)
            times["tokenizers"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = tokenize.run(ctx)
            times["crawlake"].append(time.perf_counter() - t0)
            tokens["crawlake"] = result.notes["document_tokens"]
        spark.stop()
    assert tokens["crawlake"] == tokens["tokenizers"], tokens
    n = tokens["crawlake"]
    rates = {s: n / statistics.median(t) for s, t in times.items()}
    common = {"benchmark": "tokenize", "documents": len(corpus), "tokens": n, "characters": sum(map(len, corpus)),
              "seq_len": args.seq_len, "repeats": args.repeats, "cores": cores}
    lines = []
    for s in ("crawlake", "tokenizers"):
        runs = [round(x, 3) for x in times[s]]
        lines.append({**common, "system": s, "metric": "tokens_per_s", "value": round(rates[s]), "unit": "tokens/s", "runs_s": runs})
        lines.append({**common, "system": s, "metric": "tokens_per_s_per_core", "value": round(rates[s] / cores),
                      "unit": "tokens/s/core", "runs_s": runs})
    lines.append({**common, "system": "crawlake", "metric": "ratio_vs_tokenizers",
                  "value": round(rates["crawlake"] / rates["tokenizers"], 3), "unit": "x"})
    for line in lines:
        if args.json:
            print(json.dumps(line))
        else:
            print(f"{line['system']:>10} {line['metric']:>22}: {line['value']:,} {line['unit']}")


if __name__ == "__main__":
    main()
