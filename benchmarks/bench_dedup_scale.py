"""End-to-end dedup at scale: the dedup stage on local Spark at 10k, 100k and 1M documents.

What it measures: for each size N, the wall seconds of one full-mode run of
``pipelines.stages.dedup.run`` (exact dedup, MinHash + LSH, connected components, the Delta writes
of silver.documents_dedup / silver.duplicate_clusters / silver.dedup_index) on a fresh lake, and
the peak resident memory of the Spark side during that run: the RSS of the driver JVM plus every
Python worker (all descendants of the driver process), sampled with psutil every 0.1 s, maximum
of the sum (``peak_rss_mb``). Forked Python workers share pages with their daemon, so summed RSS
overcounts when many workers are alive; ``peak_pss_mb`` (proportional set size) does not. Then
metric ``growth_exponent`` = log(t2/t1) / log(n2/n1) between consecutive sizes and between the
smallest and largest (1.0 = linear). Target (issue 4): 1M documents finish on a
2-core, 24 GiB machine with exponent <= 1.15.

Input: N bronze.documents rows (every BRONZE_DOCUMENTS column) generated, deterministically from
``--seed``, out of the real page texts of ../shared/data (the WARC pages of >= 150 words that
bench_dedup_quality.py uses; nothing is copied into the repository):

* the pages are split into paragraphs (their non-empty lines; lines of more than 40 words are cut
  into 40-word pieces);
* an original document is >= 6 runs of consecutive paragraphs, each run from a page and start
  chosen at random, until a target length drawn from 80..400 words, plus one sentence of 12
  random words of the pages' vocabulary, so that originals are not near-duplicates of each other;
* ~10 % of the rows are planted duplicates of an earlier original of the same generation chunk:
  40 % exact (half verbatim, half reformatted so that only the normalized text is equal), 60 %
  near, with random word insertions, deletions and substitutions (bench_dedup_quality.edit) at
  edit rates 0.005, 0.01 and 0.03. Each near copy's exact word n-gram Jaccard to its original is
  computed at generation, so the planted copies the stage should remove at the configured
  threshold (exact ones plus near ones at or above it) are known; a copy's crawl date is later
  than its original's, so the keep rule keeps the original.

Rows are written in chunks of 20,000 with the deltalake (delta-rs) writer into
``<workdir>/lake-<N>-seed<S>/bronze/documents`` (kept and reused by later runs with the same
generator settings); generation is not timed. Each size runs in its own Python process (a fresh
Spark driver, so memory peaks do not carry over), which first runs the stage once, untimed, on a
small lake (JVM, Python workers and the MinHash JIT warm up), then deletes the lake's silver
tables and times one full run.

    python benchmarks/bench_dedup_scale.py [--json] [--sizes 10000,100000,1000000] [--workdir DIR]
        [--seed 0] [--set spark.conf.spark.driver.memory=8g ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_dedup_quality import base_texts, edit  # noqa: E402  (benchmarks/ is on sys.path)

GENERATOR_VERSION = 1
CHUNK_ROWS = 20_000
DUP_FRACTION = 0.10
EXACT_SHARE = 0.40
NEAR_EDIT_RATES = (0.005, 0.01, 0.03)
MIN_WORDS, MAX_WORDS = 80, 400
MIN_RUNS = 6
PIECE_WORDS = 40
UNIQUE_WORDS = 12
WARMUP_DOCS = 1_000
EPOCH = datetime(2024, 5, 1, tzinfo=timezone.utc)


# -- generation ---------------------------------------------------------------------------------

def paragraph_pool() -> tuple[list[list[str]], list[str]]:
    """(paragraphs of each real page, sorted vocabulary of the pages' words)."""
    pages = base_texts()
    pool = []
    for page in pages:
        paragraphs = []
        for line in page.split("\n"):
            words = line.split()
            if len(words) <= PIECE_WORDS:
                if words:
                    paragraphs.append(line.strip())
            else:
                paragraphs += [" ".join(words[i:i + PIECE_WORDS]) for i in range(0, len(words), PIECE_WORDS)]
        pool.append(paragraphs)
    vocab = sorted({w for page in pages for w in page.split()})
    return pool, vocab


def original_text(rng: random.Random, pool: list[list[str]], vocab: list[str]) -> str:
    """>= MIN_RUNS runs of consecutive real paragraphs up to a random length, plus a unique sentence."""
    target = rng.randint(MIN_WORDS, MAX_WORDS)
    budget = max(10, target // MIN_RUNS)
    parts, total = [], 0
    while total < target:
        paragraphs = pool[rng.randrange(len(pool))]
        start, run = rng.randrange(len(paragraphs)), 0
        for paragraph in paragraphs[start:]:
            words = paragraph.split()
            if run + len(words) > budget:
                paragraph = " ".join(words[:max(1, budget - run)])
                words = paragraph.split()
            parts.append(paragraph)
            run += len(words)
            if run >= budget:
                break
        total += run
    parts.append(" ".join(rng.sample(vocab, UNIQUE_WORDS)) + ".")
    return "\n".join(parts)


def generate_rows(n: int, seed: int, pool, vocab, ngram: int):
    """Yield (chunk rows as dict of columns, planted list of (doc_id, kind, jaccard, source doc_id))
    per chunk."""
    from pipelines.kernels.minhash import word_shingles

    def jaccard(a: str, b: str) -> float:
        sa, sb = word_shingles(a, ngram), word_shingles(b, ngram)
        return len(sa & sb) / len(sa | sb) if sa or sb else 1.0

    for chunk_start in range(0, n, CHUNK_ROWS):
        chunk = chunk_start // CHUNK_ROWS
        rng = random.Random(seed * 1_000_003 + chunk)
        originals: list[tuple[int, str]] = []
        cols: dict[str, list] = {name: [] for name in COLUMNS}
        planted = []
        for i in range(chunk_start, min(n, chunk_start + CHUNK_ROWS)):
            doc_id = hashlib.sha256(f"bench_dedup_scale:{seed}:{i}".encode()).hexdigest()[:32]
            if originals and rng.random() < DUP_FRACTION:
                src, text = originals[rng.randrange(len(originals))]
                if rng.random() < EXACT_SHARE:
                    if rng.random() < 0.5:
                        kind = "exact"
                    else:  # same normalized text: whitespace and trailing punctuation differ
                        kind, text = "exact-reformatted", text.replace("\n", "\n\n") + " ..."
                    similarity = 1.0
                else:
                    rate = NEAR_EDIT_RATES[rng.randrange(len(NEAR_EDIT_RATES))]
                    edited = edit(text, rate, rng, vocab)
                    kind, similarity = f"near-{rate}", jaccard(text, edited)
                    text = edited
                source = hashlib.sha256(f"bench_dedup_scale:{seed}:{src}".encode()).hexdigest()[:32]
                planted.append((doc_id, kind, similarity, source))
                host = f"mirror{src % 101}.example.net"
            else:
                text = original_text(rng, pool, vocab)
                originals.append((i, text))
                host = f"www.site{i % 10007}.example.com"
            url = f"https://{host}/page/{i}"
            payload = len(text.encode("utf-8"))
            labels = host.split(".")
            for name, value in (
                ("doc_id", doc_id), ("url", url), ("url_normalized", url), ("host", host),
                ("registered_domain", ".".join(labels[-2:])), ("surt_host", ",".join(reversed(labels))),
                ("crawl_date", EPOCH + timedelta(seconds=i)), ("crawl_id", "BENCH-DEDUP-SCALE"),
                ("warc_record_id", f"<urn:bench:{seed}:{i}>"), ("warc_type", "response"), ("http_status", 200),
                ("content_type", "text/html"), ("content_type_source", "declared"), ("content_language", None), ("last_modified", None),
                ("payload_digest", None), ("charset", "utf-8"), ("extraction", "bench_dedup_scale"),
                ("text", text), ("text_length", len(text)), ("payload_bytes", payload),
                ("source_file", f"generated://bench_dedup_scale/seed{seed}"),
                ("warc_filename", f"bench-dedup-scale-{chunk:05d}.warc.gz"), ("record_offset", i),
            ):
                cols[name].append(value)
        yield cols, planted


def _columns() -> list[str]:
    from schemas.catalog import BRONZE_DOCUMENTS

    return BRONZE_DOCUMENTS.columns


COLUMNS = _columns()


def build_lake(root: Path, n: int, seed: int, ngram: int, threshold: float) -> dict:
    """Write bronze.documents of ``n`` generated rows under ``root`` (reused if already built).

    Returns the generation summary: planted counts and the planted doc_ids by kind are in
    ``root/_generated.json`` and ``root/_planted.tsv``.
    """
    import pyarrow as pa
    from deltalake import write_deltalake
    from pyspark.sql.pandas.types import to_arrow_schema

    from schemas.catalog import BRONZE_DOCUMENTS

    marker = root / "_generated.json"
    params = {"documents": n, "seed": seed, "generator": GENERATOR_VERSION, "ngram": ngram, "threshold": threshold}
    if marker.exists():
        summary = json.loads(marker.read_text())
        if summary.get("params") == params:
            return summary
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    schema = to_arrow_schema(BRONZE_DOCUMENTS.schema)
    table_path = str(root / "bronze" / "documents")
    pool, vocab = paragraph_pool()
    t0 = time.perf_counter()
    kinds: dict[str, int] = {}
    expected = 0
    text_bytes = 0
    with open(root / "_planted.tsv", "w", encoding="utf-8") as planted_out:
        for cols, planted in generate_rows(n, seed, pool, vocab, ngram):
            text_bytes += sum(cols["payload_bytes"])
            write_deltalake(table_path, pa.table(cols, schema=schema), mode="append")
            for doc_id, kind, similarity, source in planted:
                kinds[kind] = kinds.get(kind, 0) + 1
                expected += similarity >= threshold
                planted_out.write(f"{doc_id}\t{kind}\t{similarity:.4f}\t{source}\n")
    summary = {"params": params, "planted": sum(kinds.values()), "planted_expected": expected,
               "planted_by_kind": dict(sorted(kinds.items())), "text_mb": round(text_bytes / 1e6, 1),
               "generation_s": round(time.perf_counter() - t0, 1)}
    marker.write_text(json.dumps(summary))
    return summary


# -- measurement --------------------------------------------------------------------------------

class RssSampler(threading.Thread):
    """Max over samples of the summed RSS (and PSS) of this process's descendants (JVM + Python workers).

    Forked Python workers share their daemon's pages, so summed RSS counts those pages once per
    worker; PSS (each shared page divided among its sharers) does not, and is reported beside it.
    """

    def __init__(self, interval: float = 0.1):
        super().__init__(daemon=True)
        import psutil

        self.psutil, self.me, self.interval = psutil, psutil.Process(), interval
        self.peak = self.peak_pss = self.peak_jvm = self.peak_workers = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        jvm = workers = pss = 0
        for proc in self.me.children(recursive=True):
            try:
                mem = proc.memory_full_info()
                if proc.name().startswith("java"):
                    jvm += mem.rss
                else:
                    workers += mem.rss
                pss += getattr(mem, "pss", mem.rss)
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                continue
        self.peak, self.peak_pss = max(self.peak, jvm + workers), max(self.peak_pss, pss)
        self.peak_jvm, self.peak_workers = max(self.peak_jvm, jvm), max(self.peak_workers, workers)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.sample()


def _context(spark, root: Path, overrides: list[str]):
    from pipelines.config import load_config
    from pipelines.ledger import new_run_id
    from pipelines.stage import StageContext
    from pipelines.lake import Lake

    cfg = load_config("local", [f"lake.root={root}", *overrides])
    return StageContext(spark=spark, cfg=cfg, lake=Lake(spark, cfg.lake), run_id=new_run_id())


def _fresh_silver(root: Path) -> None:
    for folder in ("silver", "ops"):
        shutil.rmtree(root / folder, ignore_errors=True)


def measure_one(n: int, workdir: Path, seed: int, overrides: list[str]) -> dict:
    """Generate (or reuse) the lake of ``n`` documents, warm up, time one full dedup run."""
    from pyspark.sql import functions as F

    from pipelines.config import load_config
    from pipelines.session import get_spark
    from pipelines.stages import dedup
    from schemas.catalog import SILVER_DUPLICATE_CLUSTERS

    dcfg = load_config("local", overrides).dedup
    root = workdir / f"lake-{n}-seed{seed}"
    summary = build_lake(root, n, seed, dcfg.ngram, dcfg.threshold)
    warm_root = workdir / f"lake-warmup-{WARMUP_DOCS}-seed{seed + 1}"
    build_lake(warm_root, WARMUP_DOCS, seed + 1, dcfg.ngram, dcfg.threshold)

    spark = get_spark(load_config("local", overrides).spark)
    _fresh_silver(warm_root)
    dedup.run(_context(spark, warm_root, overrides))  # untimed warm-up

    _fresh_silver(root)
    ctx = _context(spark, root, overrides)
    sampler = RssSampler()
    sampler.start()
    t0 = time.perf_counter()
    result = dedup.run(ctx)
    seconds = time.perf_counter() - t0
    sampler.stop()
    if result.notes.get("mode") != "full":
        raise RuntimeError(f"expected a full dedup run, got {result.notes}")

    # Sanity, after timing: which removed documents were planted copies.
    removed_ids = {r.doc_id for r in ctx.lake.read(SILVER_DUPLICATE_CLUSTERS).filter(~F.col("kept"))
                   .select("doc_id").distinct().collect()}
    planted = {}
    with open(root / "_planted.tsv", encoding="utf-8") as fh:
        for line in fh:
            doc_id, kind, similarity = line.rstrip("\n").split("\t")[:3]   # 4th: the source doc_id
            planted[doc_id] = float(similarity) >= dcfg.threshold
    spark.stop()
    return {
        "documents": n, "seconds": seconds, "rows_in": result.rows_in, "rows_out": result.rows_out,
        "removed": result.rows_in - result.rows_out, "exact_removed": result.notes.get("exact_removed"),
        "near_removed": result.notes.get("near_removed"), "bands_x_rows": result.notes.get("bands_x_rows"),
        "planted": summary["planted"], "planted_expected": summary["planted_expected"],
        "planted_by_kind": summary["planted_by_kind"], "text_mb": summary["text_mb"],
        "removed_expected": sum(1 for d in removed_ids if planted.get(d)),
        "removed_planted_below_threshold": sum(1 for d in removed_ids if d in planted and not planted[d]),
        "removed_unplanted": sum(1 for d in removed_ids if d not in planted),
        "peak_rss_mb": sampler.peak / 2**20, "peak_pss_mb": sampler.peak_pss / 2**20, "peak_jvm_rss_mb": sampler.peak_jvm / 2**20,
        "peak_python_workers_rss_mb": sampler.peak_workers / 2**20,
        "threshold": dcfg.threshold, "num_perm": dcfg.num_perm, "ngram": dcfg.ngram,
    }


def run_child(n: int, args) -> dict:
    """Run :func:`measure_one` in a fresh Python process (its own Spark driver)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(n), "--workdir", str(args.workdir),
           "--seed", str(args.seed)] + [f"--set={o}" for o in args.set]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stdout.write(proc.stdout)
        raise RuntimeError(f"size {n}: child process failed (exit {proc.returncode})")
    return json.loads(lines[-1][len("RESULT "):])


def growth_exponent(a: dict, b: dict) -> float:
    return math.log(b["seconds"] / a["seconds"]) / math.log(b["documents"] / a["documents"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated document counts")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "crawlake-bench-dedup-scale")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override (as crawlake --set), e.g. spark.conf.spark.driver.memory=8g")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.workdir = args.workdir.resolve()

    if args.child is not None:
        print("RESULT " + json.dumps(measure_one(args.child, args.workdir, args.seed, args.set)), flush=True)
        return

    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    results = [run_child(n, args) for n in sizes]

    rows = []
    for r in results:
        common = {"benchmark": "dedup_scale", "system": "crawlake", "documents": r["documents"],
                  "removed": r["removed"], "exact_removed": r["exact_removed"], "near_removed": r["near_removed"],
                  "planted": r["planted"], "planted_expected": r["planted_expected"],
                  "removed_expected": r["removed_expected"],
                  "removed_planted_below_threshold": r["removed_planted_below_threshold"],
                  "removed_unplanted": r["removed_unplanted"], "text_mb": r["text_mb"],
                  "threshold": r["threshold"], "num_perm": r["num_perm"], "bands_x_rows": r["bands_x_rows"]}
        rows.append({**common, "metric": "seconds", "value": round(r["seconds"], 2), "unit": "s"})
        rows.append({**common, "metric": "peak_rss_mb", "value": round(r["peak_rss_mb"]), "unit": "MiB",
                     "peak_pss_mb": round(r["peak_pss_mb"]), "peak_jvm_rss_mb": round(r["peak_jvm_rss_mb"]),
                     "peak_python_workers_rss_mb": round(r["peak_python_workers_rss_mb"])})
        rows.append({**common, "metric": "docs_per_s", "value": round(r["documents"] / r["seconds"], 1),
                     "unit": "documents/s"})
    pairs = list(zip(results, results[1:]))
    if len(results) > 2:
        pairs.append((results[0], results[-1]))
    for a, b in pairs:
        rows.append({"benchmark": "dedup_scale", "system": "crawlake", "metric": "growth_exponent",
                     "value": round(growth_exponent(a, b), 3), "unit": "exponent",
                     "from_documents": a["documents"], "to_documents": b["documents"],
                     "from_seconds": round(a["seconds"], 2), "to_seconds": round(b["seconds"], 2), "target": 1.15})
    for row in rows:
        if args.json:
            print(json.dumps(row))
        elif row["metric"] == "growth_exponent":
            print(f"{'growth_exponent':>16} {row['from_documents']:>9} -> {row['to_documents']:<9} {row['value']:>10}")
        else:
            print(f"{row['metric']:>16} {row['documents']:>9} docs {row['value']:>12} {row['unit']:<12}"
                  f" removed={row['removed']} planted_expected={row['planted_expected']}")


if __name__ == "__main__":
    main()
