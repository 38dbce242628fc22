"""Tokens per second delivered by TokenSequenceDataset vs a plain pyarrow scan of the same files.

Input: the extracted page texts of the WARC files in ../shared/data, tokenized with the default
tokenizer and packed into sequences of 2048 + 1 tokens by crawlake's kernel, the sequences
repeated (new seq_ids) up to ``--tokens`` tokens and written as a Delta table of ``--files``
files with deltalake (one Parquet row group per file, as Spark writes files of this size).
Building the input is not timed.

Systems (run alternately, ``--repeats`` times each, medians reported):
  crawlake             TokenSequenceDataset(batch_size=64, shuffle=True) through DeltaLoader,
                       1 process, 2 workers: Delta snapshot, block + buffer shuffle, int64
                       input_ids/labels tensors (labels masked at padding) built in shared
                       memory and handed to the main process
  pyarrow              pyarrow.dataset over the table's files, to_batches(input_ids,
                       num_tokens), ids flattened to numpy (no shuffle, no tensors, all cores)
  crawlake_in_process  the same dataset iterated in the main process (num_workers=0): the
                       loader's own work without DataLoader worker processes (information)

Metric: tokens_per_s = non-padding tokens (sum of num_tokens) delivered per second, plus
ratio_vs_pyarrow for crawlake. Each line also carries cpu_s: the median CPU seconds (user +
system, the process and its workers) a pass took. Targets (issue 6): >= 0.8x pyarrow and
>= 5M tokens/s.

    python benchmarks/bench_loader.py [--json] [--tokens 120000000] [--repeats 3]
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


def real_sequences(seq_len: int):
    """The real pages packed into sequences (one pack group, doc_id order) as a pyarrow Table."""
    import pyarrow as pa

    from pipelines.config import TokenizeConfig
    from pipelines.kernels.tokens import pack_batches
    from pipelines.kernels.warc import parse_warc_file

    texts = [r["text"] for name in WARCS for r in parse_warc_file(str(DATA / name)).rows if r["kind"] == "document"]
    docs = pa.RecordBatch.from_pylist([{"pack_group": 0, "doc_id": f"{i:06d}", "text": t} for i, t in enumerate(texts)])
    return pa.Table.from_batches(list(pack_batches([docs], TokenizeConfig(seq_len=seq_len))))


def write_table(uri: str, seqs, tokens: int, files: int) -> tuple[int, int]:
    import pyarrow as pa
    from deltalake import write_deltalake

    copies = max(1, -(-tokens // (seqs.num_rows * len(seqs.column("input_ids")[0]))))
    table = pa.concat_tables([seqs] * copies)
    table = table.set_column(0, "seq_id", pa.array([f"{i:09d}" for i in range(table.num_rows)]))
    per_file = -(-table.num_rows // files)
    for k in range(files):
        write_deltalake(uri, table.slice(k * per_file, per_file), mode="append")
    return table.num_rows, int(pa.compute.sum(table.column("num_tokens")).as_py())


def run_pyarrow(uri: str) -> int:
    import pyarrow.compute as pc
    import pyarrow.dataset as pds
    from deltalake import DeltaTable

    tokens = 0
    for batch in pds.dataset(DeltaTable(uri).file_uris(), format="parquet").to_batches(columns=["input_ids", "num_tokens"]):
        batch.column(0).flatten().to_numpy(zero_copy_only=False)
        tokens += pc.sum(batch.column(1)).as_py() or 0
    return tokens


def run_crawlake(uri: str, workers: int, batch_size: int, epoch: int) -> int:
    from pipelines.loaders import DeltaLoader, TokenSequenceDataset

    ds = TokenSequenceDataset(uri, batch_size=batch_size, extra_columns=["num_tokens"], seed=0)
    ds.set_epoch(epoch)
    return sum(int(b["num_tokens"].sum()) for b in DeltaLoader(ds, num_workers=workers))


def cpu_seconds() -> float:
    """User + system CPU of this process and its (finished) children, seconds."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                   resource.getrusage(resource.RUSAGE_CHILDREN)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tokens", type=int, default=120_000_000, help="tokens in the table (padded ids)")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import pipelines.loaders  # noqa: F401  (torch's import time is not the loader's)

    with tempfile.TemporaryDirectory(prefix="bench_loader_") as tmp:
        uri = f"{tmp}/token_sequences"
        rows, tokens = write_table(uri, real_sequences(args.seq_len), args.tokens, args.files)
        systems = {"pyarrow": lambda e: run_pyarrow(uri),
                   "crawlake": lambda e: run_crawlake(uri, args.workers, args.batch_size, e),
                   "crawlake_in_process": lambda e: run_crawlake(uri, 0, args.batch_size, e)}
        times = {s: [] for s in systems}
        cpu = {s: [] for s in systems}
        run_pyarrow(uri)  # warm the page cache for all
        for epoch in range(args.repeats):
            for system, run in systems.items():
                c0, t0 = cpu_seconds(), time.perf_counter()
                got = run(epoch)
                times[system].append(time.perf_counter() - t0)
                cpu[system].append(cpu_seconds() - c0)
                assert got == tokens, (system, got, tokens)
    rates = {s: tokens / statistics.median(t) for s, t in times.items()}
    common = {"benchmark": "loader", "rows": rows, "tokens": tokens, "seq_len": args.seq_len, "files": args.files,
              "batch_size": args.batch_size, "workers": args.workers, "repeats": args.repeats, "cpus": os.cpu_count()}
    lines = [{**common, "system": s, "metric": "tokens_per_s", "value": round(rates[s]), "unit": "tokens/s",
              "runs_s": [round(x, 3) for x in times[s]], "cpu_s": round(statistics.median(cpu[s]), 3)}
             for s in ("crawlake", "pyarrow", "crawlake_in_process")]
    lines.append({**common, "system": "crawlake", "metric": "ratio_vs_pyarrow",
                  "value": round(rates["crawlake"] / rates["pyarrow"], 3), "unit": "x"})
    for line in lines:
        if args.json:
            print(json.dumps(line))
        else:
            print(f"{line['system']:>19} {line['metric']:>16}: {line['value']:,} {line['unit']}")


if __name__ == "__main__":
    main()
