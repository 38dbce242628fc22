"""``crawlake forget --domain ... --purge`` on a lake built from a real crawl: the domains' documents
leave every table, index shard, search and loader epoch, no file under the lake holds their text,
``ops.takedowns`` records the request, and a re-ingest keeps them out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import lake_config, read_lake, real_file

from pipelines.cli import main
from pipelines.kernels.takedown import url_host
from pipelines.runner import run_pipeline
from schemas.catalog import WARC_FLOW_TABLES

pytestmark = pytest.mark.slow
# Of the excerpt's pages: 0900-hovenier.nl's one page passes every filter and reaches every table;
# live-radsport.ch's two, on the subdomain 06.live-radsport.ch, are removed by the filters
DOMAINS = ("0900-hovenier.nl", "live-radsport.ch")
EXCERPT = "cc-main-2020-34-excerpt.warc.gz"
SETTINGS = ("ingest.progress=false",)


def config(root: Path, inputs: list[str]):
    cfg = lake_config(root, *SETTINGS)
    return cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": inputs})})


def in_domain(url: str | None) -> bool:
    host = url_host(url or "") or ""
    return any(host == d or host.endswith("." + d) for d in DOMAINS)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def files_holding(root: Path, sentence: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``sentence`` (UTF-8), read as what it is:
    Parquet files (whose pages may be compressed) through pyarrow, every string value searched;
    JSON lines (Delta logs, checksums) parsed, in case a writer escaped a character; other files raw."""
    needle = sentence.encode()
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        held = needle in data
        if not held and data[:4] == b"PAR1":
            held = any(sentence in s for s in _strings(pq.ParquetFile(path).read().to_pylist()))
        elif not held and path.suffix in (".json", ".crc"):
            for line in data.decode("utf-8", "replace").splitlines():
                try:
                    held = held or any(sentence in s for s in _strings(json.loads(line)))
                except ValueError:
                    pass
        if held:
            found.append(str(path.relative_to(root)))
    return found


def epoch_rows(root: Path) -> list[tuple[list[str], np.ndarray]]:
    """One loader epoch over gold.token_sequences as a trainer gets it: (doc_ids, input_ids) per sequence."""
    from pipelines.loaders import TokenSequenceDataset

    ds = TokenSequenceDataset(str(root / "gold" / "token_sequences"), batch_size=4, seed=0, extra_columns=["doc_ids"])
    return [(ids, row.numpy()) for batch in ds for ids, row in zip(batch["doc_ids"], batch["input_ids"])]


def holds(row: np.ndarray, tokens: list[int]) -> bool:
    if len(row) < len(tokens):
        return False
    windows = np.lib.stride_tricks.sliding_window_view(row, len(tokens))
    return bool((windows == np.asarray(tokens)).all(axis=1).any())


def rows_of(spark, cfg, spec, doc_ids: set[str]) -> int:
    """Rows of ``spec``'s table that belong to ``doc_ids`` (or, without a doc_id column, name them)."""
    from pyspark.sql import functions as F

    df = read_lake(spark, cfg, spec.qualified_name)
    if "doc_id" in df.columns:
        return df.filter(F.col("doc_id").isin(sorted(doc_ids))).count()
    if "doc_ids" in df.columns:   # gold.token_sequences: documents starting in the sequence
        return df.filter(F.arrays_overlap("doc_ids", F.array(*map(F.lit, sorted(doc_ids))))).count()
    if "url" in df.columns:       # bronze.quarantine
        return sum(in_domain(r.url) for r in df.select("url").collect())
    if spec.qualified_name == "gold.index_manifest":
        return sum(bool(doc_ids & set(pq.read_table(str(shard(cfg, r.path)) + ".ids.parquet")["doc_id"].to_pylist()))
                   for r in df.select("path").collect())
    return 0   # ops.* ledgers: no document rows


def phrases(text: str, words: int = 8):
    """Runs of ``words`` whole words from each line of ``text``, at least 40 characters long and
    starting past its first 40 characters."""
    for line in text.splitlines():
        split = line.split()
        for start in range(len(split) - words + 1):
            phrase = " ".join(split[start:start + words])
            if len(phrase) >= 40 and phrase in line and text.find(phrase) >= 40:
                yield phrase


def shard(cfg, path: str) -> Path:
    return Path(path) if path.startswith("/") else Path(cfg.lake.root) / path


@pytest.fixture(scope="module")
def taken(spark, submitted_lake, tmp_path_factory):
    """A copy of the session's lake of real archives (conftest.submitted_lake: the excerpt, a
    renamed copy of it, so bronze.quarantine holds duplicate_record rows of the domains too, and
    the 2008 Heritrix crawl, whose near duplicates make clusters), and its report; then ``crawlake
    forget --domain 0900-hovenier.nl --domain live-radsport.ch --purge``; returns what the tests
    compare."""
    from pipelines.kernels.tokens import encode_ids, load_tokenizer
    from pipelines.report import build_report
    from pipelines.search import Searcher

    root = tmp_path_factory.mktemp("forget") / "lake"
    shutil.copytree(submitted_lake[0], root)
    cfg = config(root, [])

    bronze = read_lake(spark, cfg, "bronze.documents").select("doc_id", "url", "text").collect()
    doomed = {r.doc_id for r in bronze if in_domain(r.url)}
    clean = {r.doc_id: r.text for r in read_lake(spark, cfg, "silver.documents_clean").select("doc_id", "text").collect()}
    assert len(doomed) == 3 and len(doomed & set(clean)) == 1, "one of the pages must reach every layer for this test"
    before = {spec.qualified_name: rows_of(spark, cfg, spec, doomed) for spec in WARC_FLOW_TABLES}
    assert all(before[t] for t in ("bronze.documents", "bronze.quarantine", "silver.documents_clean",
                                   "gold.token_sequences", "gold.embeddings", "gold.index_manifest")), before

    # a distinctive run of whole words from one of their pages: past the first 40 characters (Delta's
    # statistics keep 32-character prefixes), in no other page, and in a loader epoch now
    rows = epoch_rows(root)
    tokenizer = load_tokenizer(cfg.tokenize.tokenizer)
    others = [r.text for r in bronze if r.doc_id not in doomed]
    candidates = ((p, encode_ids(tokenizer, [p])[0]) for d in sorted(doomed & set(clean)) for p in phrases(clean[d])
                  if not any(p in t for t in others))
    sentence, tokens = next(((p, ids) for p, ids in candidates if any(holds(row, ids) for _, row in rows)), (None, None))
    assert sentence, "no distinctive sentence found in the domains' pages"
    assert files_holding(root, sentence)   # the scan finds it before the takedown
    hits = Searcher(cfg).search(sentence, k=len(clean))
    assert any(h.doc_id in doomed for h in hits)

    assert build_report(str(root)).path.is_file()   # it samples documents: purge deletes it
    argv = ["forget", *(a for d in DOMAINS for a in ("--domain", d)), "--reason", "opt-out request 42", "--purge",
            "--lake-root", str(root),
            *(a for s in SETTINGS for a in ("--set", s))]
    assert main(argv) == 0
    return {"cfg": cfg, "root": root, "doomed": doomed, "before": before, "sentence": sentence, "tokens": tokens,
            "clean": set(clean) - doomed}


def test_the_domain_is_in_no_table(spark, taken):
    cfg, doomed = taken["cfg"], taken["doomed"]
    assert {spec.qualified_name: rows_of(spark, cfg, spec, doomed) for spec in WARC_FLOW_TABLES} == \
           {spec.qualified_name: 0 for spec in WARC_FLOW_TABLES}
    assert {r.doc_id for r in read_lake(spark, cfg, "silver.documents_clean").collect()} == taken["clean"]
    # the other documents went on through tokenize and index
    assert {r.doc_id for r in read_lake(spark, cfg, "gold.document_tokens").collect()} == taken["clean"]
    assert {r.doc_id for r in read_lake(spark, cfg, "gold.embeddings").select("doc_id").distinct().collect()} == taken["clean"]


def test_no_index_shard_and_no_search_result(spark, taken):
    from pipelines.search import Searcher

    cfg, root = taken["cfg"], taken["root"]
    listed = {shard(cfg, r.path) for r in read_lake(spark, cfg, "gold.index_manifest").collect()}
    assert listed and all(p.is_file() for p in listed)
    indexed = {d for p in listed for d in pq.read_table(str(p) + ".ids.parquet")["doc_id"].to_pylist()}
    assert indexed == taken["clean"]
    on_disk = {p for p in (root / "_index").rglob("*.faiss")}
    assert on_disk == listed   # no stale shard file of the old index left
    hits = Searcher(cfg).search(taken["sentence"], k=len(taken["clean"]) + 2)
    assert hits and not {h.doc_id for h in hits} & taken["doomed"]


def test_no_loader_epoch_yields_them(taken):
    rows = epoch_rows(taken["root"])
    assert rows
    assert not {d for ids, _ in rows for d in ids} & taken["doomed"]
    assert {d for ids, _ in rows for d in ids} == taken["clean"]
    assert not any(holds(row, taken["tokens"]) for _, row in rows)


def test_the_takedown_is_recorded_with_what_it_removed(spark, taken):
    cfg, before = taken["cfg"], taken["before"]
    (row,) = read_lake(spark, cfg, "ops.takedowns").collect()   # the first request
    assert (row.domains, row.urls, row.url_prefixes, row.doc_ids) == (list(DOMAINS), [], [], [])
    assert row.reason == "opt-out request 42" and row.purge and row.documents == 3
    expected = {t: before[t] for t in ("bronze.documents", "bronze.quarantine", "silver.documents_dedup",
                                       "silver.dedup_index", "silver.documents_clean", "silver.filter_decisions",
                                       "silver.duplicate_clusters", "gold.document_tokens", "gold.token_sequences",
                                       "gold.embeddings", "gold.index_manifest")}
    assert dict(row.removed) == expected
    assert row.duplicates_kept_out == []
    runs = read_lake(spark, cfg, "ops.runs").filter(f"run_id = '{row.run_id}'").collect()
    assert sorted((r.stage, r.status) for r in runs) == [("forget", "succeeded"), ("index", "succeeded"),
                                                         ("purge", "succeeded"), ("tokenize", "succeeded")]
    quality = read_lake(spark, cfg, "ops.quality").filter("table_name = 'ops.takedowns'").collect()
    assert quality and all(q.success and q.run_id == row.run_id for q in quality)


def test_no_file_under_the_lake_holds_their_text(taken):
    assert files_holding(taken["root"], taken["sentence"]) == []
    assert not (taken["root"] / "_staging").exists() and not (taken["root"] / "report.html").exists()


def test_a_reingest_keeps_them_out(spark, taken):
    cfg, root = taken["cfg"], taken["root"]
    again = root.parent / "again" / "cc-main-2020-34-excerpt-again.warc.gz"
    again.parent.mkdir()
    shutil.copyfile(real_file(EXCERPT), again)
    (run,) = run_pipeline(config(root, [str(again)]), stages=("ingest",))
    notes = run.result.notes
    (takedown,) = read_lake(spark, cfg, "ops.takedowns").collect()
    assert notes["taken_down"] == 3 and notes["quarantined_by_reason"] == {"duplicate_record": 13, "taken_down": 3}
    assert notes["records"] == notes["documents"] + sum(notes["skipped_by_type"].values()) + 16
    assert not [r for r in read_lake(spark, cfg, "bronze.documents").collect() if in_domain(r.url)]
    down = read_lake(spark, cfg, "bronze.quarantine").filter("reason = 'taken_down'").collect()
    assert sorted((Path(r.source_file).name, in_domain(r.url), r.detail) for r in down) == \
           [(again.name, True, f"takedown {takedown.takedown_id}")] * 3
    assert files_holding(root / "bronze", taken["sentence"]) == []


def test_duplicates_of_a_removed_kept_document_stay_removed(spark, taken):
    """The lake's duplicate clusters: taking down a cluster's kept page lists its removed copies
    in ops.takedowns and leaves them removed, through a later dedup and filter run too."""
    cfg, root = taken["cfg"], taken["root"]
    clusters = read_lake(spark, cfg, "silver.duplicate_clusters").collect()
    kept = sorted(r.doc_id for r in clusters if r.kept)[0]
    copies = sorted(r.doc_id for r in clusters if not r.kept and r.cluster_id == kept)
    assert copies
    argv = ["forget", "--doc-id", kept, "--reason", "legal request 7", "--lake-root", str(root),
            *(a for s in SETTINGS for a in ("--set", s))]
    assert main(argv) == 0
    row = read_lake(spark, cfg, "ops.takedowns").filter("reason = 'legal request 7'").first()
    assert (row.doc_ids, row.documents, row.duplicates_kept_out) == ([kept], 1, copies)
    run_pipeline(config(root, []), stages=("dedup", "filter"))
    bronze = {r.doc_id for r in read_lake(spark, cfg, "bronze.documents").select("doc_id").collect()}
    assert kept not in bronze and set(copies) <= bronze
    for table in ("silver.documents_dedup", "silver.documents_clean"):
        assert not {r.doc_id for r in read_lake(spark, cfg, table).collect()} & {kept, *copies}, table
    left = [r for r in read_lake(spark, cfg, "silver.duplicate_clusters").collect() if r.cluster_id == kept]
    assert sorted(r.doc_id for r in left) == copies and not any(r.kept for r in left)


def test_a_selector_matching_nothing_is_recorded_with_nothing_removed(spark, taken):
    cfg, root = taken["cfg"], taken["root"]
    counts = {spec.qualified_name: read_lake(spark, cfg, spec.qualified_name).count()
              for spec in WARC_FLOW_TABLES if spec.qualified_name not in ("ops.runs", "ops.quality")}
    argv = ["forget", "--domain", "no-such-site.example", "--reason", "test", "--lake-root", str(root),
            *(a for s in SETTINGS for a in ("--set", s))]
    assert main(argv) == 0
    row = read_lake(spark, cfg, "ops.takedowns").filter("array_contains(domains, 'no-such-site.example')").first()
    assert row.documents == 0 and set(dict(row.removed).values()) == {0} and not row.purge
    assert {name: read_lake(spark, cfg, name).count() for name in counts} == counts
