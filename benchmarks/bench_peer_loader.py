"""Training loader against MosaicML Streaming: the same token sequences, local and from object storage.

Input: the extracted page texts of the WARC files in ../shared/data, tokenized with the default
tokenizer and packed by crawlake's kernel into sequences of 2048 + 1 tokens, repeated (new
seq_ids) up to ``--tokens`` tokens, written once as a Delta table of ``--files`` files
(deltalake, one row group each, as ``bench_loader.py`` does) and once as MosaicML Streaming MDS
shards made by Streaming's ``MDSWriter`` from that table's Parquet files in the table's file order
(``ndarray:int32:2049`` + ``int32``, uncompressed, shards of about one file's rows). Building is not
timed; the folders are reused while ``--workdir`` holds them.

Systems, each in its own interpreter (crawlake in .venv, Streaming in .venv-peers/streaming, made
by ``make peers``), alternating, ``--repeats`` times, medians reported:

  crawlake                 TokenSequenceDataset(batch_size=64, shuffle_buffer=B) through
                           DeltaLoader(num_workers=2): block (row group) + buffer shuffle
  mosaicml-streaming       StreamingDataset(shuffle_algo='py1br', shuffle_block_size=B,
                           batch_size=64) through StreamingDataLoader(batch_size=64, num_workers=2)
  pyarrow                  a plain scan of the Delta table's files (no shuffle, no tensors):
                           reference only (bench_loader's baseline)
  crawlake-s3              the table uploaded to an S3-compatible server on 127.0.0.1 (moto's,
                           pipelines.servers.start_s3), read by its s3:// URI with the standard AWS
                           variables, with a fresh local ``cache_dir`` each repeat as Streaming's
                           ``local`` (epoch 1 downloads each file once, epoch 2 reads the cache);
                           epochs 1 and 2 in one process
  mosaicml-streaming-s3    the MDS shards on the same server, ``remote=s3://...`` with a fresh
                           local cache each repeat (epoch 1 downloads, epoch 2 reads the cache)

Both yield int64 ``input_ids``/``labels`` [64, 2048] (labels -100 after ``num_tokens``) and
``num_tokens``. tokens/s = non-padding tokens delivered ÷ epoch seconds (dataset construction and
imports reported apart: ``setup_s``, ``import_s``). Resume: half an epoch, a checkpoint
(``state_dict``), then a new dataset + loader from it; ``resume_s`` = construction, loading the
state and the first batch. Targets (issue 21): local ≥ 3×, S3 ≥ 1.5× on both epochs, resume
time ≤ Streaming's.

    python benchmarks/bench_peer_loader.py [--json] [--tokens 40000000] [--repeats 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peer_common import load_average, peer_python, run_side  # noqa: E402

SIDE = Path(__file__).resolve().parent / "_peer_loader_side.py"
BUILD_VERSION = 1


def build(workdir: Path, tokens: int, files: int, seq_len: int) -> dict:
    """The Delta table and the MDS shards of the same sequences (reused when already built)."""
    from deltalake import DeltaTable

    from bench_loader import real_sequences, write_table

    marker = workdir / "_built.json"
    params = {"tokens": tokens, "files": files, "seq_len": seq_len, "version": BUILD_VERSION}
    if marker.exists() and json.loads(marker.read_text()).get("params") == params:
        return json.loads(marker.read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    delta = workdir / "delta" / "token_sequences"
    rows, real_tokens = write_table(str(delta), real_sequences(seq_len), tokens, files)
    paths = sorted(DeltaTable(str(delta)).file_uris())   # the loaders' file order
    paths = [p.removeprefix("file://") for p in paths]
    per_file = -(-rows // files)
    width = seq_len + 1
    mds = run_side(peer_python("streaming"), SIDE,
                   {"system": "streaming", "mode": "write_mds", "files": paths, "out": str(workdir / "mds"),
                    "width": width, "shard_bytes": per_file * (width * 4 + 4) + 4096}, sample=False)
    if mds["rows"] != rows:
        raise RuntimeError(f"MDS has {mds['rows']} rows, the table {rows}")
    summary = {"params": params, "rows": rows, "tokens": real_tokens, "delta": str(delta), "mds": str(workdir / "mds"),
               "delta_mb": round(sum(f.stat().st_size for f in delta.rglob("*") if f.is_file()) / 1e6, 1),
               "mds_mb": round(sum(f.stat().st_size for f in (workdir / "mds").rglob("*") if f.is_file()) / 1e6, 1),
               "mds_shards": len(list((workdir / "mds").glob("*.mds")))}
    marker.write_text(json.dumps(summary))
    return summary


def upload_tree(s3, folder: Path, url: str) -> None:
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            s3.upload(f, f"{url}/{f.relative_to(folder).as_posix()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tokens", type=int, default=40_000_000, help="tokens in the table (padded ids)")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shuffle-block", type=int, default=4096,
                        help="rows: crawlake's shuffle_buffer and Streaming's shuffle_block_size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--no-resume", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "crawlake-bench-peer-loader")
    args = parser.parse_args()

    from bench_loader import run_pyarrow

    built = build(args.workdir.resolve(), args.tokens, args.files, args.seq_len)
    rows, tokens = built["rows"], built["tokens"]
    crawlake_py, streaming_py = sys.executable, peer_python("streaming")
    common = {"batch_size": args.batch_size, "workers": args.workers, "shuffle_block": args.shuffle_block, "seed": 0}
    load = [load_average()]
    times: dict[str, list] = {}
    extra: dict[str, list] = {}

    def record(system: str, metric: str, value: float, info: dict | None = None) -> None:
        times.setdefault((system, metric), []).append(value)
        if info:
            extra.setdefault((system, metric), []).append(info)

    s3 = None
    s3_env: dict = {}
    if not args.no_s3:
        from pipelines.servers import start_s3

        s3 = start_s3()
        s3_env = s3.env()
        bucket = s3.create_bucket("bench-peer-loader")
        upload_tree(s3, Path(built["delta"]), f"{bucket}/delta/token_sequences")
        upload_tree(s3, Path(built["mds"]), f"{bucket}/mds")
    try:
        run_pyarrow(built["delta"])   # page cache warm for everyone
        for repeat in range(args.repeats):
            # local files
            c = run_side(crawlake_py, SIDE, {**common, "system": "crawlake", "mode": "epochs", "epochs": 1,
                                             "uri": built["delta"]}, sample=False)
            e = c["epochs"][0]
            assert e["tokens"] == tokens, ("crawlake", e["tokens"], tokens)
            record("crawlake", "tokens_per_s", e["tokens"] / e["seconds"],
                   {"seconds": e["seconds"], "cpu_s": e["cpu_s"], "setup_s": c["setup_s"], "import_s": c["import_s"]})
            st = run_side(streaming_py, SIDE, {**common, "system": "streaming", "mode": "epochs", "epochs": 1,
                                               "local": built["mds"]}, sample=False)
            e = st["epochs"][0]
            assert e["tokens"] == tokens, ("streaming", e["tokens"], tokens)
            record("mosaicml-streaming", "tokens_per_s", e["tokens"] / e["seconds"],
                   {"seconds": e["seconds"], "cpu_s": e["cpu_s"], "setup_s": st["setup_s"], "import_s": st["import_s"]})
            t0 = time.perf_counter()
            got = run_pyarrow(built["delta"])
            assert got == tokens
            record("pyarrow", "tokens_per_s", tokens / (time.perf_counter() - t0))
            load.append(load_average())
            if s3 is not None:
                cache = Path(tempfile.mkdtemp(prefix="bench_peer_loader_cache_"))
                try:
                    c = run_side(crawlake_py, SIDE, {**common, "system": "crawlake", "mode": "epochs", "epochs": 2,
                                                     "uri": "s3://bench-peer-loader/delta/token_sequences",
                                                     "cache_dir": str(cache / "delta")}, env=s3_env, sample=False)
                    st = run_side(streaming_py, SIDE, {**common, "system": "streaming", "mode": "epochs", "epochs": 2,
                                                       "local": str(cache / "mds"), "remote": "s3://bench-peer-loader/mds"},
                                  env=s3_env, sample=False)
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                for system, res in (("crawlake-s3", c), ("mosaicml-streaming-s3", st)):
                    for k, e in enumerate(res["epochs"], 1):
                        assert e["tokens"] == tokens, (system, k, e["tokens"], tokens)
                        record(system, f"tokens_per_s_epoch{k}", e["tokens"] / e["seconds"],
                               {"seconds": e["seconds"], "cpu_s": e["cpu_s"], "setup_s": res["setup_s"]})
                load.append(load_average())
            if not args.no_resume:
                c = run_side(crawlake_py, SIDE, {**common, "system": "crawlake", "mode": "resume",
                                                 "uri": built["delta"]}, sample=False)
                st = run_side(streaming_py, SIDE, {**common, "system": "streaming", "mode": "resume",
                                                   "local": built["mds"]}, sample=False)
                for system, res in (("crawlake", c), ("mosaicml-streaming", st)):
                    assert res["head_tokens"] + res["tail_tokens"] == tokens, (system, res)
                    record(system, "resume_s", res["resume_s"], {"rest_of_epoch_s": res["rest_s"]})
                load.append(load_average())
    finally:
        if s3 is not None:
            s3.stop()

    settings = {"benchmark": "peer_loader", "rows": rows, "tokens": tokens, "seq_len": args.seq_len,
                "files": args.files, "mds_shards": built["mds_shards"], "delta_mb": built["delta_mb"],
                "mds_mb": built["mds_mb"], "batch_size": args.batch_size, "workers": args.workers,
                "shuffle_block": args.shuffle_block, "repeats": args.repeats, "cpus": os.cpu_count(),
                "load_min": min(x[0] for x in load), "load_max": max(x[0] for x in load)}
    lines = []
    medians = {key: statistics.median(v) for key, v in times.items()}
    for (system, metric), value in medians.items():
        unit = "s" if metric == "resume_s" else "tokens/s"
        info = extra.get((system, metric), [])
        line = {**settings, "system": system, "metric": metric, "value": round(value, 3 if unit == "s" else 0),
                "unit": unit, "runs": [round(v, 3 if unit == "s" else 0) for v in times[(system, metric)]]}
        if info:
            line["details"] = [{k: round(v, 3) for k, v in d.items()} for d in info]
        lines.append(line)
    for mine, peer, metric in (("crawlake", "mosaicml-streaming", "tokens_per_s"),
                               ("crawlake", "pyarrow", "tokens_per_s"),
                               ("crawlake-s3", "mosaicml-streaming-s3", "tokens_per_s_epoch1"),
                               ("crawlake-s3", "mosaicml-streaming-s3", "tokens_per_s_epoch2"),
                               ("crawlake", "mosaicml-streaming", "resume_s")):
        if (mine, metric) in medians and (peer, metric) in medians:
            a, b = medians[(mine, metric)], medians[(peer, metric)]
            ratio = b / a if metric == "resume_s" else a / b   # > 1: crawlake better
            lines.append({**settings, "system": mine, "metric": f"ratio_{metric}_vs_{peer}", "value": round(ratio, 3),
                          "unit": "x"})
    for line in lines:
        if args.json:
            print(json.dumps(line))
        else:
            print(f"{line['system']:>22} {line['metric']:>48}: {line['value']:,} {line['unit']}")


if __name__ == "__main__":
    main()
