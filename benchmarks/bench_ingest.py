"""Ingest throughput: a plain fastwarc + resiliparse loop vs crawlake's ingest stage on local Spark.

Input: real archives from ../shared/data (the 2008 Internet Archive crawl and the Common Crawl
excerpt) repeated to >= 200 MB (compressed) over several files; each copy gets fresh WARC-Record-IDs
(uuid5 of copy number and original id), as distinct captures would have.

Systems (same files, same process, run one after the other):
  fastwarc+resiliparse  single-process loop: parse, decode, extract main text of HTML responses
  crawlake              `crawlake run --stages ingest` on local[2]: parse, extract, audit, Delta commit
  crawlake-trafilatura  the same stage with ingest.extractor=trafilatura, on a subset of the files

Spark starts and ingests one small file (untimed) before the timed runs.

    python benchmarks/bench_ingest.py [--json] [--mb 200] [--files 4] [--repeats 1] [--no-trafilatura]
        [--workdir DIR]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
SOURCES = ("ia-heritrix-2008-example.warc.gz", "cc-main-2020-34-excerpt.warc.gz")


def _copy_with_new_ids(src: Path, copy: int) -> bytes:
    from fastwarc.warc import ArchiveIterator

    out = io.BytesIO()
    with open(src, "rb") as fh:
        for rec in ArchiveIterator(fh, parse_http=False):
            rec.headers["WARC-Record-ID"] = f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{copy}:{rec.record_id}')}>"
            buf = io.BytesIO()
            rec.write(buf)
            out.write(gzip.compress(buf.getvalue(), compresslevel=6, mtime=0))  # one member per record, as CC
    return out.getvalue()


def build_input(workdir: Path, target_mb: int, files: int = 16) -> list[Path]:
    """``files`` WARC files totalling >= ``target_mb`` MB; reused when already built."""
    folder = workdir / f"input-{target_mb}mb-{files}"
    done = folder / "_complete"
    if done.exists():
        return sorted(folder.glob("*.warc.gz"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    per_file = target_mb * 1e6 / files
    copy = 0
    for i in range(files):
        parts, size = [], 0
        while size < per_file:
            for name in SOURCES:
                parts.append(_copy_with_new_ids(DATA / name, copy))
                size += len(parts[-1])
                copy += 1
        (folder / f"bench-{i:03d}.warc.gz").write_bytes(b"".join(parts))
    done.touch()
    return sorted(folder.glob("*.warc.gz"))


def baseline(paths: list[Path]) -> tuple[int, float]:
    """(documents, seconds) for the plain single-process loop."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    docs, t0 = 0, time.perf_counter()
    for path in paths:
        with open(path, "rb") as fh:
            for rec in ArchiveIterator(fh, record_types=WarcRecordType.response, parse_http=True):
                if rec.http_content_type != "text/html":
                    continue
                payload = rec.reader.read()
                html = bytes_to_str(payload, rec.http_charset or detect_encoding(payload), errors="replace")
                if extract_plain_text(html, main_content=True).strip():
                    docs += 1
    return docs, time.perf_counter() - t0


def crawlake(paths: list[Path], lake: Path, *overrides: str) -> tuple[int, float]:
    """(documents, seconds of the ingest stage) on a fresh lake."""
    from pipelines.config import load_config
    from pipelines.runner import run_pipeline

    shutil.rmtree(lake, ignore_errors=True)
    cfg = load_config("local", [f"lake.root={lake}", "ingest.progress=false", *overrides])
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": [str(p) for p in paths]})})
    (run,) = run_pipeline(cfg, stages=("ingest",), console=_quiet_console())
    return run.result.rows_out, run.duration_s


def _quiet_console():
    from rich.console import Console

    return Console(file=io.StringIO())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--files", type=int, default=4, help="WARC files the input is spread over "
                        "(Common Crawl's are ~1 GB each; each Spark task costs ~0.4 s beyond its parse)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-trafilatura", action="store_true", help="skip the trafilatura-mode run")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "crawlake-bench-ingest")
    args = parser.parse_args()

    paths = build_input(args.workdir, args.mb, args.files)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    # Spark (local[2]) starts once, before timing, and ingests one small real file to warm up (JVM,
    # Python workers, the Great Expectations import and context, Delta's first commit): process
    # start is not ingest throughput.
    from pipelines.config import load_config
    from pipelines.session import get_spark

    get_spark(load_config("local", ["spark.master=local[2]"]).spark)
    crawlake([DATA / SOURCES[1]], args.workdir / "lake-warmup")
    results: dict[str, list[tuple[int, float]]] = {"fastwarc+resiliparse": [], "crawlake": []}
    for _ in range(args.repeats):
        results["fastwarc+resiliparse"].append(baseline(paths))
        results["crawlake"].append(crawlake(paths, args.workdir / "lake"))
    subset = paths[:2]
    sub_mb = sum(p.stat().st_size for p in subset) / 1e6
    if not args.no_trafilatura:
        results["crawlake-trafilatura"] = [crawlake(subset, args.workdir / "lake-trafilatura",
                                                    "ingest.extractor=trafilatura")]

    rows = []
    for system, runs in results.items():
        size = sub_mb if system == "crawlake-trafilatura" else mb
        seconds = statistics.median(s for _, s in runs)
        docs = runs[0][0]
        common = {"benchmark": "ingest", "system": system, "files": len(subset if size == sub_mb else paths),
                  "input_mb": round(size, 1), "documents": docs, "seconds": round(seconds, 2), "repeats": len(runs)}
        rows.append({**common, "metric": "docs_per_s", "value": round(docs / seconds, 1), "unit": "documents/s"})
        rows.append({**common, "metric": "mb_per_s", "value": round(size / seconds, 2), "unit": "MB/s"})
    base = next(r["value"] for r in rows if r["system"] == "fastwarc+resiliparse" and r["metric"] == "mb_per_s")
    ours = next(r["value"] for r in rows if r["system"] == "crawlake" and r["metric"] == "mb_per_s")
    rows.append({"benchmark": "ingest", "system": "crawlake", "metric": "speedup_vs_baseline",
                 "value": round(ours / base, 2), "unit": "x", "target": 1.5})
    for row in rows:
        print(json.dumps(row) if args.json else f"{row['system']:>22} {row['metric']:>20} {row['value']:>10} {row['unit']}")


if __name__ == "__main__":
    main()
