"""MinHash signature throughput per core: datasketch vs crawlake's kernel (and rensa if installed).

Input: real texts from ../shared/data: the extracted pages of the WARC files and the descriptions
of the Abt-Buy and Chicago early-childhood record sets, as word 5-gram shingles (the same shingle
sets for every system; shingling is not timed). Each system is single-threaded.

Systems:
  datasketch  MinHash(num_perm, seed, scheme="legacy").update_batch(shingles) per document
  crawlake    pipelines.kernels.minhash.minhash_signatures (numba), JIT compile excluded
  rensa       rensa.RMinHash (its own hashing, so not bit-exact; speed reference), if importable

Metrics: shingles_per_s (shingles/s) per system, bit_exact (1 or 0) for crawlake.

    python benchmarks/bench_minhash.py [--json] [--repeats 5] [--num-perm 112]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"


def real_texts() -> list[str]:
    from pipelines.kernels.warc import parse_warc_file

    texts = []
    for name in ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz", "cc-main-2024-22-whirlwind.warc.gz"):
        texts += [r["text"] for r in parse_warc_file(str(DATA / name)).rows if r["kind"] == "document"]
    for name, column in (("dedupe-AbtBuy_Abt.csv", "description"), ("dedupe-AbtBuy_Buy.csv", "description"),
                         ("dedupe-chicago-ece-sites-with-true-ids.csv", "Site name")):
        with open(DATA / name, encoding="latin-1") as fh:
            texts += [row[column] for row in csv.DictReader(fh) if row.get(column)]
    return texts


def time_it(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--num-perm", type=int, default=112)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from datasketch import MinHash

    from pipelines.kernels.minhash import minhash_signatures, word_shingles

    shingle_sets = [list(s) for s in (word_shingles(t, 5) for t in real_texts()) if s]
    n_shingles = sum(len(s) for s in shingle_sets)

    def run_datasketch():
        out = []
        for shingles in shingle_sets:
            m = MinHash(num_perm=args.num_perm, seed=args.seed, scheme="legacy")
            m.update_batch(shingles)
            out.append(m.hashvalues)
        return np.stack(out)

    t0 = time.perf_counter()
    minhash_signatures(shingle_sets[:2], args.num_perm, args.seed)  # JIT compile (or load the cache)
    compile_s = time.perf_counter() - t0
    results = {}
    results["datasketch"], reference = time_it(run_datasketch, args.repeats)
    results["crawlake"], ours = time_it(lambda: minhash_signatures(shingle_sets, args.num_perm, args.seed), args.repeats)
    try:
        from rensa import RMinHash

        def run_rensa():
            for shingles in shingle_sets:
                m = RMinHash(num_perm=args.num_perm, seed=args.seed)
                m.update([s.decode("utf-8", "replace") for s in shingles])
        results["rensa"], _ = time_it(run_rensa, args.repeats)
    except ImportError:
        pass

    common = {"benchmark": "minhash", "documents": len(shingle_sets), "shingles": n_shingles,
              "num_perm": args.num_perm, "repeats": args.repeats}
    rows = [{**common, "system": system, "metric": "shingles_per_s", "value": round(n_shingles / secs),
             "unit": "shingles/s", "seconds": round(secs, 4)} for system, secs in results.items()]
    rows.append({**common, "system": "crawlake", "metric": "bit_exact", "value": int(np.array_equal(ours, reference)),
                 "unit": "bool"})
    rows.append({**common, "system": "crawlake", "metric": "speedup_vs_datasketch",
                 "value": round(results["datasketch"] / results["crawlake"], 1), "unit": "x", "target": 10,
                 "jit_compile_s": round(compile_s, 2)})
    for row in rows:
        print(json.dumps(row) if args.json else f"{row['system']:>12} {row['metric']:>22} {row['value']:>12} {row['unit']}")


if __name__ == "__main__":
    main()
