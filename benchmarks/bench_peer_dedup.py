"""MinHash near-dedup end to end against HuggingFace datatrove, on the same Parquet files.

Input: ``--sizes`` documents made by ``bench_dedup_scale.py``'s seeded generator (runs of real
page paragraphs of ../shared/data plus a unique sentence, ~10 % planted exact and near copies
with their exact word-5-gram Jaccard to their source), written once as crawlake's
``bronze.documents`` Delta table (deltalake, 20,000-row files). Both systems read those same
Parquet files and write their deduplicated set to disk:

  crawlake    the dedup stage on local Spark (2 cores), ``dedup.bands=14 dedup.rows=8``
              (num_perm 112, word 5-grams: datatrove's scheme) → the three silver Delta tables
  datatrove   its MinHash pipeline with defaults (5-grams, 14 buckets x 8 hashes, 64-bit xxhash),
              ``LocalPipelineExecutor`` 2 tasks / 2 workers (buckets: 14 tasks / 2 workers) →
              the kept documents as Parquet (see _peer_dedup_side.py)

Each side runs in its own interpreter (.venv, .venv-peers/datatrove: ``make peers``), alternating,
``--repeats`` times per size; medians. Spark's start and crawlake's warm-up run (JVM, Python
workers, MinHash JIT cache) are timed apart (``spark_start_s``, ``warmup_s``), as are imports.

Metrics per system and size: docs_per_s (documents ÷ the timed run's seconds), peak_rss_mb (summed
RSS of the side's process tree — JVM + Python workers, or datatrove's task processes — over the
whole child process, warm-up included; PSS beside it), and pair precision / recall / F1 against
the planted truth: truth clusters = each source with its copies of Jaccard ≥ ``--threshold``
(0.8); predicted = each system's duplicate clusters (crawlake's exact and near clusters joined);
pairs = document pairs in one cluster. The precision row also carries ``pair_classes``: every
predicted pair by what the planted list says of it (:func:`pair_classes`). Target (issue 21):
crawlake ≥ 5x datatrove's docs/s at both sizes, F1 not lower.

    python benchmarks/bench_peer_dedup.py [--json] [--sizes 100000] [--repeats 3] [--workdir DIR]
        [--systems crawlake,datatrove]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peer_common import load_average, peer_python, run_side  # noqa: E402

SIDE = Path(__file__).resolve().parent / "_peer_dedup_side.py"
OVERRIDES = ["dedup.num_perm=112", "dedup.bands=14", "dedup.rows=8", "dedup.ngram=5"]


def lake(workdir: Path, n: int, seed: int, threshold: float) -> tuple[Path, dict]:
    import bench_dedup_scale as scale

    root = workdir / f"lake-{n}-seed{seed}"
    planted = root / "_planted.tsv"
    if planted.exists() and len(planted.open().readline().split("\t")) < 4:   # an older generator's file
        (root / "_generated.json").unlink(missing_ok=True)
    summary = scale.build_lake(root, n, seed, 5, threshold)
    return root, summary


def truth_clusters(root: Path, threshold: float) -> dict[str, str]:
    """doc_id → truth cluster (its source's doc_id) for sources and copies at or above the threshold."""
    out = {}
    with open(root / "_planted.tsv", encoding="utf-8") as fh:
        for line in fh:
            doc_id, _, similarity, source = line.rstrip("\n").split("\t")
            if float(similarity) >= threshold:
                out[doc_id] = source
                out[source] = source
    return out


def predicted_clusters(path: str) -> dict[str, str]:
    """doc_id → cluster representative, joining rows that share a doc or a cluster id (union-find)."""
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for doc, cluster in zip(t.column("doc_id").to_pylist(), t.column("cluster_id").to_pylist()):
        a, b = find("d:" + doc), find("c:" + cluster)
        if a != b:
            parent[a] = b
    return {k[2:]: find(k) for k in list(parent) if k.startswith("d:")}


def pair_scores(truth: dict[str, str], pred: dict[str, str]) -> dict:
    def pairs(clusters: dict[str, str]) -> int:
        sizes = defaultdict(int)
        for c in clusters.values():
            sizes[c] += 1
        return sum(s * (s - 1) // 2 for s in sizes.values())

    together = defaultdict(lambda: defaultdict(int))   # truth cluster → predicted cluster → members
    for doc, t in truth.items():
        if doc in pred:
            together[t][pred[doc]] += 1
    tp = sum(k * (k - 1) // 2 for members in together.values() for k in members.values())
    n_true, n_pred = pairs(truth), pairs(pred)
    precision = tp / n_pred if n_pred else 1.0
    recall = tp / n_true if n_true else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "true_pairs": n_true, "predicted_pairs": n_pred,
            "correct_pairs": tp}


def planted_families(root: Path) -> tuple[dict[str, str], dict[str, float]]:
    """Every planted copy and its source: (doc_id → source doc_id, doc_id → Jaccard to the
    source; a source maps to itself at 1.0)."""
    family, similarity = {}, {}
    with open(root / "_planted.tsv", encoding="utf-8") as fh:
        for line in fh:
            doc_id, _, sim, source = line.rstrip("\n").split("\t")
            family[doc_id], similarity[doc_id] = source, float(sim)
            family[source], similarity[source] = source, 1.0
    return family, similarity


def pair_classes(planted: tuple[dict[str, str], dict[str, float]], threshold: float, pred: dict[str, str]) -> dict:
    """Every predicted pair (two documents in one predicted cluster) by what the planted list
    (:func:`planted_families`) says of it: ``true`` (one source's family, both at Jaccard ≥
    ``threshold``), ``same_source_below_threshold``, ``different_sources`` (both planted),
    ``one_planted``, ``neither_planted``; plus the largest cluster's size and the pairs in clusters
    of more than 20 documents (pairs grow with the square of a cluster's size). Counted per
    cluster from its members' families, not pair by pair."""
    family, similarity = planted

    def c2(k: int) -> int:
        return k * (k - 1) // 2

    members = defaultdict(list)
    for doc, cluster in pred.items():
        members[cluster].append(doc)
    out = dict.fromkeys(("true", "same_source_below_threshold", "different_sources", "one_planted",
                         "neither_planted", "in_clusters_over_20"), 0)
    for docs in members.values():
        by_family = defaultdict(lambda: [0, 0])   # family → [members, members at ≥ threshold]
        for d in docs:
            if d in family:
                by_family[family[d]][0] += 1
                by_family[family[d]][1] += similarity[d] >= threshold
        planted = sum(k for k, _ in by_family.values())
        unplanted = len(docs) - planted
        same = sum(c2(k) for k, _ in by_family.values())
        out["true"] += sum(c2(hi) for _, hi in by_family.values())
        out["same_source_below_threshold"] += same - sum(c2(hi) for _, hi in by_family.values())
        out["different_sources"] += c2(planted) - same
        out["one_planted"] += planted * unplanted
        out["neither_planted"] += c2(unplanted)
        out["in_clusters_over_20"] += c2(len(docs)) if len(docs) > 20 else 0
    out["largest_cluster"] = max((len(d) for d in members.values()), default=0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", default="100000", help="comma-separated document counts (e.g. 100000,1000000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=0.8, help="Jaccard of the truth pairs")
    parser.add_argument("--systems", default="crawlake,datatrove")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="extra crawlake config override, e.g. spark.conf.spark.driver.memory=10g")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "crawlake-bench-peer-dedup")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    pythons = {"crawlake": sys.executable}
    if "datatrove" in systems:
        pythons["datatrove"] = peer_python("datatrove")
    warm_root, _ = lake(workdir, 1_000, args.seed + 1, args.threshold)

    lines = []
    for n in sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()}):
        root, summary = lake(workdir, n, args.seed, args.threshold)
        truth, planted = truth_clusters(root, args.threshold), planted_families(root)
        input_folder = root / "bronze" / "documents"
        runs: dict[str, list[dict]] = {s: [] for s in systems}
        load = [load_average()]
        for repeat in range(args.repeats):
            for system in systems:
                clusters = str(workdir / f"clusters-{system}-{n}.parquet")
                if system == "crawlake":
                    side = {"system": "crawlake", "lake": str(root), "warm_lake": str(warm_root),
                            "overrides": [*OVERRIDES, *args.set], "clusters": clusters}
                else:
                    side = {"system": "datatrove", "input": str(input_folder), "work": str(workdir / f"datatrove-{n}"),
                            "tasks": 2, "workers": 2, "clusters": clusters}
                res = run_side(pythons[system], SIDE, side)
                pred = predicted_clusters(clusters)
                res["scores"] = {**pair_scores(truth, pred), "pair_classes": pair_classes(planted, args.threshold, pred)}
                runs[system].append(res)
                load.append(load_average())
        settings = {"benchmark": "peer_dedup", "documents": n, "text_mb": summary["text_mb"],
                    "planted": summary["planted"], "planted_expected": summary["planted_expected"],
                    "truth_threshold": args.threshold, "ngram": 5, "num_perm": 112, "bands_x_rows": "14x8",
                    "repeats": args.repeats, "cpus": os.cpu_count(), "tasks": 2, "workers": 2,
                    "load_min": min(x[0] for x in load), "load_max": max(x[0] for x in load)}
        medians = {}
        for system, results in runs.items():
            name = "datatrove" if system == "datatrove" else "crawlake"
            secs = [r["seconds"] for r in results]
            med = statistics.median(secs)
            medians[system] = med
            best = results[secs.index(med)] if med in secs else results[0]
            info = {"runs_s": [round(s, 2) for s in secs], "kept": [r["kept"] for r in results],
                    "documents_seen": [r["documents"] for r in results], "import_s": [round(r["import_s"], 2) for r in results]}
            if system == "crawlake":
                info.update(spark_start_s=[round(r["spark_start_s"], 2) for r in results],
                            warmup_s=[round(r["warmup_s"], 2) for r in results], notes=best["notes"],
                            config=[*OVERRIDES, *args.set])
            else:
                info.update(steps_s=[{k: round(v, 2) for k, v in r["steps_s"].items()} for r in results])
            lines.append({**settings, "system": name, "metric": "docs_per_s", "value": round(n / med, 1),
                          "unit": "documents/s", "seconds": round(med, 2), **info})
            lines.append({**settings, "system": name, "metric": "peak_rss_mb",
                          "value": statistics.median(r["peak_rss_mb"] for r in results), "unit": "MiB",
                          "peak_pss_mb": statistics.median(r["peak_pss_mb"] for r in results)})
            for metric in ("precision", "recall", "f1"):
                lines.append({**settings, "system": name, "metric": f"pair_{metric}",
                              "value": round(best["scores"][metric], 4), "unit": "fraction",
                              **{k: best["scores"][k] for k in ("true_pairs", "predicted_pairs", "correct_pairs")},
                              **({"pair_classes": best["scores"]["pair_classes"]} if metric == "precision" else {})})
        if len(medians) == 2:
            lines.append({**settings, "system": "crawlake", "metric": "ratio_docs_per_s_vs_datatrove",
                          "value": round(medians["datatrove"] / medians["crawlake"], 3), "unit": "x", "target": 5.0})
    for line in lines:
        if args.json:
            print(json.dumps(line))
        else:
            print(f"{line['documents']:>9} {line['system']:>10} {line['metric']:>30}: {line['value']:,} {line['unit']}")


if __name__ == "__main__":
    main()
