"""Near-duplicate detection quality: MinHash LSH pairs vs brute-force exact Jaccard, and vs human labels.

1. Planted near-duplicates. Real page texts from ../shared/data (documents of >= 150 words) each get
   variants at known edit rates: random word insertions, deletions, substitutions, and boilerplate
   swaps (a header and footer of other text). Ground truth: every pair whose exact word 5-gram
   Jaccard is >= the threshold (brute force over all pairs). Prediction: the pairs that share at
   least one LSH bucket (bands x rows from the threshold, as the dedup stage uses), and the pairs
   that end in the same connected component. Precision, recall and F1 for both.
2. Labeled record linkage: dedupe-chicago-ece-sites-with-true-ids.csv (3,337 records, `True Id`
   clusters; `x` = unlabeled, left out), character 5-gram shingles of name + address; pair
   precision/recall of LSH candidate pairs against same-`True Id` pairs. A measurement, not a target.

    python benchmarks/bench_dedup_quality.py [--json] [--threshold 0.8] [--num-perm 112]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
EDIT_RATES = (0.01, 0.03, 0.05, 0.10, 0.15, 0.20, 0.30)


def base_texts(min_words: int = 150) -> list[str]:
    from pipelines.kernels.warc import parse_warc_file

    texts = []
    for name in ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz", "cc-main-2024-22-whirlwind.warc.gz"):
        texts += [r["text"] for r in parse_warc_file(str(DATA / name)).rows
                  if r["kind"] == "document" and len(r["text"].split()) >= min_words]
    return list(dict.fromkeys(texts))  # exact repeats would only inflate the easy pairs


def edit(text: str, rate: float, rng: random.Random, vocab: list[str]) -> str:
    """Apply ``rate`` x words random edits: a mix of insertions, deletions and substitutions."""
    words = text.split()
    for _ in range(max(1, int(rate * len(words)))):
        op, i = rng.choice("ids"), rng.randrange(len(words))
        if op == "i":
            words.insert(i, rng.choice(vocab))
        elif op == "d" and len(words) > 10:
            del words[i]
        else:
            words[i] = rng.choice(vocab)
    return " ".join(words)


def boilerplate_swap(text: str, rng: random.Random, others: list[str]) -> str:
    donor = rng.choice(others).split()
    return " ".join(donor[:20]) + "\n" + text + "\n" + " ".join(donor[-20:])


def corpus(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    bases = base_texts()
    vocab = sorted({w for t in bases for w in t.split()})
    docs = list(bases)
    for i, text in enumerate(bases):
        rate = EDIT_RATES[i % len(EDIT_RATES)]
        docs.append(edit(text, rate, rng, vocab))
        if i % 3 == 0:
            docs.append(boilerplate_swap(text, rng, bases))
    return docs


def lsh_pairs(shingle_sets, threshold: float, num_perm: int) -> set[tuple[int, int]]:
    from pipelines.kernels.minhash import band_hashes, minhash_signatures, optimal_bands_rows

    bands, rows = optimal_bands_rows(threshold, num_perm)
    keep = [i for i, s in enumerate(shingle_sets) if s]
    hashes = band_hashes(minhash_signatures([shingle_sets[i] for i in keep], num_perm), bands, rows)
    buckets: dict[tuple[int, int], list[int]] = defaultdict(list)
    for row, doc in enumerate(keep):
        for band in range(bands):
            buckets[(band, int(hashes[row, band]))].append(doc)
    return {pair for members in buckets.values() for pair in itertools.combinations(sorted(members), 2)}


def components(pairs: set[tuple[int, int]], n: int) -> set[tuple[int, int]]:
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    groups = defaultdict(list)
    for i in range(n):
        groups[find(i)].append(i)
    return {p for g in groups.values() for p in itertools.combinations(sorted(g), 2)}


def prf(predicted: set, truth: set) -> tuple[float, float, float]:
    tp = len(predicted & truth)
    p = tp / len(predicted) if predicted else 1.0
    r = tp / len(truth) if truth else 1.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--num-perm", type=int, default=112)
    args = parser.parse_args()

    from pipelines.kernels.minhash import char_shingles, word_shingles

    rows = []
    docs = corpus()
    sets = [word_shingles(t, 5) for t in docs]
    truth = {(i, j) for i, j in itertools.combinations(range(len(docs)), 2)
             if sets[i] and sets[j] and len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= args.threshold}
    candidates = lsh_pairs(sets, args.threshold, args.num_perm)
    common = {"benchmark": "dedup_quality", "system": "crawlake", "threshold": args.threshold,
              "num_perm": args.num_perm, "documents": len(docs), "true_pairs": len(truth)}
    jaccard = lambda i, j: len(sets[i] & sets[j]) / len(sets[i] | sets[j])
    verified = {(i, j) for i, j in candidates if jaccard(i, j) >= args.threshold}  # dedup.verify=true
    for name, predicted in (("lsh_pairs", candidates), ("cluster_pairs", components(candidates, len(docs))),
                            ("verified_pairs", verified), ("verified_cluster_pairs", components(verified, len(docs)))):
        p, r, f1 = prf(predicted, truth)
        rows += [{**common, "pairs": name, "metric": m, "value": round(v, 4), "unit": "ratio"}
                 for m, v in (("precision", p), ("recall", r), ("f1", f1))]

    with open(DATA / "dedupe-chicago-ece-sites-with-true-ids.csv", encoding="latin-1") as fh:
        records = [r for r in csv.DictReader(fh) if r["True Id"] != "x"]
    texts = [" ".join(r[c] for c in ("Site name", "Address") if r.get(c)) for r in records]
    csets = [char_shingles(t, 5) for t in texts]
    labeled = {(i, j) for i, j in itertools.combinations(range(len(records)), 2)
               if records[i]["True Id"] == records[j]["True Id"]}
    for threshold in (args.threshold, 0.5):
        p, r, f1 = prf(lsh_pairs(csets, threshold, args.num_perm), labeled)
        chicago = {"benchmark": "dedup_quality_chicago", "system": "crawlake", "threshold": threshold,
                   "records": len(records), "labeled_pairs": len(labeled), "shingles": "char-5"}
        rows += [{**chicago, "metric": m, "value": round(v, 4), "unit": "ratio"}
                 for m, v in (("precision", p), ("recall", r), ("f1", f1))]
    for row in rows:
        print(json.dumps(row) if args.json else
              f"{row['benchmark']:>22} {row.get('pairs', ''):>14} t={row['threshold']} {row['metric']:>10} {row['value']}")


if __name__ == "__main__":
    main()
