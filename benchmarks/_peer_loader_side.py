"""One side of ``benchmarks/bench_peer_loader.py``, run in that side's own interpreter:

    .venv/bin/python                     _peer_loader_side.py '{"system": "crawlake", ...}'
    .venv-peers/streaming/bin/python     _peer_loader_side.py '{"system": "streaming", ...}'

Modes (``mode``):
  write_mds  (streaming) the Delta table's Parquet files, in the order given, → MDS shards
  epochs     ``epochs`` epochs in one process; per epoch seconds, tokens, CPU seconds
  resume     half an epoch, a checkpoint, then a new dataset + loader from it: seconds to the
             first batch after resuming (``resume_s``), then the rest of the epoch

Both sides yield batches of ``batch_size`` samples with int64 ``input_ids`` = ids[:-1] and
``labels`` = ids[1:] (-100 where the target is padding, after ``num_tokens``) and ``num_tokens``,
from ``workers`` DataLoader workers. Tokens = sum of ``num_tokens`` delivered. Prints one line
``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _peer_common import cpu_seconds, emit  # noqa: E402

IGNORE_INDEX = -100


# -- crawlake -------------------------------------------------------------------------------------

def crawlake_dataset(args: dict):
    from pipelines.loaders import TokenSequenceDataset

    return TokenSequenceDataset(args["uri"], batch_size=args["batch_size"], extra_columns=["num_tokens"],
                                seed=args["seed"], shuffle_buffer=args["shuffle_block"], cache_dir=args.get("cache_dir"))


def crawlake_epochs(args: dict) -> dict:
    from pipelines.loaders import DeltaLoader

    t0 = time.perf_counter()
    ds = crawlake_dataset(args)
    setup_s = time.perf_counter() - t0
    loader = DeltaLoader(ds, num_workers=args["workers"])
    epochs = []
    for epoch in range(args["epochs"]):
        ds.set_epoch(epoch)
        c0, t0 = cpu_seconds(), time.perf_counter()
        tokens = sum(int(b["num_tokens"].sum()) for b in loader)
        epochs.append({"seconds": time.perf_counter() - t0, "tokens": tokens, "cpu_s": cpu_seconds() - c0})
    return {"setup_s": setup_s, "epochs": epochs, "version": ds.version}


def crawlake_resume(args: dict) -> dict:
    from pipelines.loaders import DeltaLoader

    ds = crawlake_dataset(args)
    half = len(ds) // 2
    head = 0
    for n, batch in enumerate(DeltaLoader(ds, num_workers=args["workers"]), 1):
        head += int(batch["num_tokens"].sum())
        if n == half:
            break
    state = json.loads(json.dumps(ds.state_dict()))
    t0 = time.perf_counter()
    again = crawlake_dataset(args)
    again.load_state_dict(state)
    it = iter(DeltaLoader(again, num_workers=args["workers"]))
    first = next(it)
    resume_s = time.perf_counter() - t0
    tail = int(first["num_tokens"].sum()) + sum(int(b["num_tokens"].sum()) for b in it)
    return {"resume_s": resume_s, "head_batches": half, "head_tokens": head, "tail_tokens": tail,
            "rest_s": time.perf_counter() - t0}


# -- MosaicML Streaming ---------------------------------------------------------------------------

def streaming_write_mds(args: dict) -> dict:
    import numpy as np
    import pyarrow.parquet as pq
    from streaming import MDSWriter

    rows = 0
    width = None
    with MDSWriter(out=args["out"], columns={"input_ids": f"ndarray:int32:{args['width']}", "num_tokens": "int32"},
                   compression=None, size_limit=args["shard_bytes"], progress_bar=False) as writer:
        for path in args["files"]:
            pf = pq.ParquetFile(path)
            for g in range(pf.num_row_groups):
                t = pf.read_row_group(g, columns=["input_ids", "num_tokens"])
                ids = t.column("input_ids").combine_chunks()
                width = width or len(ids[0])
                flat = ids.flatten().to_numpy(zero_copy_only=False).astype(np.int32, copy=False).reshape(len(ids), -1)
                for row, n in zip(flat, t.column("num_tokens").to_numpy()):
                    writer.write({"input_ids": row, "num_tokens": int(n)})
                    rows += 1
    return {"rows": rows}


def streaming_dataset(args: dict, local: str, remote: str | None):
    import numpy as np
    import torch
    from streaming import StreamingDataset

    class TokenMDS(StreamingDataset):
        """Samples as crawlake's: int64 input_ids/labels (labels -100 after num_tokens), num_tokens."""

        def __getitem__(self, idx):
            sample = super().__getitem__(idx)
            ids = sample["input_ids"].astype(np.int64)
            n = int(sample["num_tokens"])
            labels = ids[1:].copy()
            if n < len(ids):
                labels[max(n - 1, 0):] = IGNORE_INDEX
            return {"input_ids": torch.from_numpy(ids[:-1].copy()), "labels": torch.from_numpy(labels),
                    "num_tokens": torch.tensor(n, dtype=torch.int64)}

    return TokenMDS(local=local, remote=remote, shuffle=True, shuffle_algo="py1br", shuffle_seed=args["seed"],
                    shuffle_block_size=args["shuffle_block"], batch_size=args["batch_size"])


def _streaming_loader(ds, args: dict):
    from streaming import StreamingDataLoader

    return StreamingDataLoader(ds, batch_size=args["batch_size"], num_workers=args["workers"])


def streaming_epochs(args: dict) -> dict:
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    t0 = time.perf_counter()
    ds = streaming_dataset(args, args["local"], args.get("remote"))
    setup_s = time.perf_counter() - t0
    loader = _streaming_loader(ds, args)
    epochs = []
    for _ in range(args["epochs"]):
        c0, t0 = cpu_seconds(), time.perf_counter()
        tokens = sum(int(b["num_tokens"].sum()) for b in loader)
        epochs.append({"seconds": time.perf_counter() - t0, "tokens": tokens, "cpu_s": cpu_seconds() - c0})
    return {"setup_s": setup_s, "epochs": epochs}


def streaming_resume(args: dict) -> dict:
    import gc

    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    ds = streaming_dataset(args, args["local"], args.get("remote"))
    loader = _streaming_loader(ds, args)
    half = len(loader) // 2
    head = 0
    it = iter(loader)
    for n in range(1, half + 1):
        head += int(next(it)["num_tokens"].sum())
    state = json.loads(json.dumps(loader.state_dict()))
    del it, loader, ds
    gc.collect()
    clean_stale_shared_memory()
    t0 = time.perf_counter()
    again = streaming_dataset(args, args["local"], args.get("remote"))
    loader = _streaming_loader(again, args)
    loader.load_state_dict(state)
    it = iter(loader)
    first = next(it)
    resume_s = time.perf_counter() - t0
    tail = int(first["num_tokens"].sum()) + sum(int(b["num_tokens"].sum()) for b in it)
    return {"resume_s": resume_s, "head_batches": half, "head_tokens": head, "tail_tokens": tail,
            "rest_s": time.perf_counter() - t0}


def main() -> None:
    args = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    if args["system"] == "crawlake":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        import pipelines.loaders  # noqa: F401
        import_s = time.perf_counter() - t0
        out = {"epochs": crawlake_epochs, "resume": crawlake_resume}[args["mode"]](args)
    else:
        import streaming  # noqa: F401
        import torch  # noqa: F401
        import_s = time.perf_counter() - t0
        out = {"write_mds": streaming_write_mds, "epochs": streaming_epochs,
               "resume": streaming_resume}[args["mode"]](args)
    emit({**out, "import_s": import_s, "pid": os.getpid()})


if __name__ == "__main__":
    main()
