"""Documents per second per core of every CPU stage before embeddings, on the same documents:
ingest, dedup, filter and tokenize on local Spark (issue 5's target: the filter stage is never the
slowest of them).

Input: ``--docs`` documents generated as ``bench_dedup_scale.py`` generates them (runs of real
paragraphs of the ../shared/data pages plus a unique sentence, ``--words`` long; ~10 % planted
exact and near duplicates, so dedup does all its work: exact, MinHash + LSH, connected
components), written as
gzip-per-record WARC response records over ``--files`` files: one HTML page per document (a title
and one ``<p>`` per paragraph).

Each repeat runs on a fresh lake, every stage timed on its own (``StageRun.duration_s``):

  ingest    the WARC files → bronze.documents (N documents)
  dedup     bronze.documents → silver.* (a full first run)
  filter    silver.documents_dedup *replaced by all N bronze documents* (untimed), so the
            filter sees the same documents as dedup did → silver.documents_clean (fineweb + LID)
  tokenize  silver.documents_clean *replaced by all N documents* (untimed) → gold tables

A warm-up pass of all four on a small lake comes first (JVM, Python workers, JIT caches).
There is no outside baseline here: the systems compared are crawlake's own stages; each stage's
baseline comparison is its own benchmark (bench_ingest, bench_dedup_scale, bench_filters,
bench_tokenize). The generated pages are simpler HTML than real ones, which makes ingest's
extraction cheaper per document than on a crawl.

Metric: docs_per_s_per_core (N ÷ the stage's median seconds ÷ cores). JSON lines:
{"benchmark", "system": "crawlake", "stage", "metric", "value", "unit", ...}.

    python benchmarks/bench_stages.py [--json] [--docs 10000] [--files 8] [--repeats 3] [--words 80,400]
        [--workdir DIR]
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import os
import shutil
import statistics
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import bench_dedup_scale  # noqa: E402  (benchmarks/ is on sys.path)
from bench_ingest import _quiet_console  # noqa: E402

STAGES = ("ingest", "dedup", "filter", "tokenize")
WARMUP_DOCS = 300


def _response_record(url: str, when: str, text: str) -> bytes:
    """One gzip member: a WARC response record of an HTML page holding ``text``'s lines."""
    lines = text.split("\n")
    body = ("<!doctype html><html><head><meta charset=\"utf-8\"><title>" + html.escape(lines[0][:60])
            + "</title></head><body><article>"
            + "".join(f"<p>{html.escape(line)}</p>" for line in lines if line.strip())
            + "</article></body></html>").encode("utf-8")
    http = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>\r\n"
            f"WARC-Date: {when}\r\nWARC-Target-URI: {url}\r\n"
            f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http)}\r\n\r\n").encode()
    return gzip.compress(head + http + b"\r\n\r\n", compresslevel=6, mtime=0)


def build_warcs(folder: Path, n: int, files: int, seed: int, words: tuple[int, int],
                crawl: int | None = None) -> list[Path]:
    """``files`` WARC files holding ``n`` generated documents of ``words`` (min, max) words each
    (before the unique sentence); reused when already built. ``crawl``: a crawl number, for
    crawls of one lake (bench_incremental): URLs carry ``/c<crawl>/`` (so record ids and doc_ids
    differ between crawls) and dates move ``crawl`` x 30 days on."""
    done = folder / "_complete"
    if done.exists():
        return sorted(folder.glob("*.warc.gz"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    bench_dedup_scale.MIN_WORDS, bench_dedup_scale.MAX_WORDS = words
    pool, vocab = bench_dedup_scale.paragraph_pool()
    records = []
    shift = timedelta(days=30 * (crawl or 0))
    for cols, _ in bench_dedup_scale.generate_rows(n, seed, pool, vocab, ngram=5):
        for url, when, text in zip(cols["url"], cols["crawl_date"], cols["text"]):
            if crawl is not None:
                scheme, rest = url.split("://", 1)
                host, path = rest.split("/", 1)
                url = f"{scheme}://{host}/c{crawl}/{path}"
            records.append(_response_record(url, (when + shift).strftime("%Y-%m-%dT%H:%M:%SZ"), text))
    per_file = -(-len(records) // files)
    for i in range(files):
        (folder / f"stages-{i:03d}.warc.gz").write_bytes(b"".join(records[i * per_file:(i + 1) * per_file]))
    done.touch()
    return sorted(folder.glob("*.warc.gz"))


def run_stages(spark, root: Path, warcs: list[Path]) -> dict[str, tuple[float, int]]:
    """Each stage on a fresh lake at ``root``: ``{stage: (seconds, documents in)}``."""
    from pyspark.sql import functions as F

    from pipelines.config import load_config
    from pipelines.runner import run_pipeline
    from pipelines.lake import Lake
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_CLEAN, SILVER_DOCUMENTS_DEDUP

    shutil.rmtree(root, ignore_errors=True)
    cfg = load_config("local", [f"lake.root={root}", "ingest.progress=false"])
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": [str(p) for p in warcs]})})
    lake = Lake(spark, cfg.lake)
    console = _quiet_console()
    out = {}
    for stage in STAGES:
        if stage == "filter":
            lake.overwrite(SILVER_DOCUMENTS_DEDUP, lake.read(BRONZE_DOCUMENTS))
        if stage == "tokenize":
            lake.overwrite(SILVER_DOCUMENTS_CLEAN, lake.read(BRONZE_DOCUMENTS).select(
                "*", F.lit("en").alias("language"), F.lit(1.0).alias("language_score")))
        (run,) = run_pipeline(cfg, stages=(stage,), console=console)   # raises StageFailed
        docs = run.result.rows_out if stage == "ingest" else run.result.rows_in
        out[stage] = (run.duration_s, docs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--words", default="80,400", help="min,max words of a generated document "
                        "(80,400: bench_dedup_scale's ~2 KB; 600,2000: about the real pages' ~8 KB)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the generated WARC files here")
    args = parser.parse_args()

    from pipelines.config import load_config
    from pipelines.session import get_spark

    words = tuple(int(w) for w in args.words.split(","))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_stages_"))
    warcs = build_warcs(workdir / f"warc-{args.docs}-{args.files}-seed{args.seed}-words{words[0]}-{words[1]}",
                        args.docs, args.files, args.seed, words)
    warm = build_warcs(workdir / f"warc-warmup-{WARMUP_DOCS}", WARMUP_DOCS, 2, args.seed + 1, (80, 400))
    cores = os.cpu_count() or 1
    spark = get_spark(load_config("local").spark)
    run_stages(spark, workdir / "lake-warmup", warm)
    runs: dict[str, list[float]] = {s: [] for s in STAGES}
    docs: dict[str, int] = {}
    for _ in range(args.repeats):
        for stage, (seconds, n) in run_stages(spark, workdir / "lake", warcs).items():
            runs[stage].append(seconds)
            docs[stage] = n
    spark.stop()
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    for stage in STAGES:
        median = statistics.median(runs[stage])
        line = {"benchmark": "stages", "system": "crawlake", "stage": stage, "metric": "docs_per_s_per_core",
                "value": round(docs[stage] / median / cores, 1), "unit": "docs/s/core", "documents": docs[stage],
                "median_s": round(median, 2), "runs_s": [round(x, 2) for x in runs[stage]], "cores": cores,
                "repeats": args.repeats, "words": list(words)}
        print(json.dumps(line) if args.json else f"{stage:>9}: {line['value']:,} docs/s/core "
              f"({docs[stage]} docs, median {line['median_s']} s)")


if __name__ == "__main__":
    main()
