"""Incremental dedup, the estimated-Jaccard audit column and the keep policy, on local Spark + Delta.

Batch A is the built-in sample crawl, ingested and deduplicated. Batch B is written to
bronze.documents directly: copies of A's kept documents (crawled earlier and longer, so the keep
rule alone would prefer them), real page texts from ``../shared/data`` and copies of those.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest
from conftest import lake_config, read_table, real_file
from pyspark.sql import functions as F

from pipelines.config import ConfigError, load_config
from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DEDUP_INDEX, SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS

pytestmark = pytest.mark.slow
EARLY = dt.datetime(2001, 1, 1)                 # before any sample crawl date
LATE = dt.datetime(2030, 1, 1)
REAL_URLS = ("http://01spb.ru/company/", "http://037426.cn/", "http://0900-hovenier.nl/gelderland/oosterbeek/",
             "http://06.live-radsport.ch/tippspiel/stats_140_petzi.html")   # pages in cc-main-2020-34-excerpt


def _doc_id(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()[:32]


def _bronze_row(template: dict, label: str, text: str, crawl_date: dt.datetime, **extra) -> dict:
    """A bronze.documents row: ``template``'s columns with a new identity and text."""
    row = {k: template.get(k) for k in BRONZE_DOCUMENTS.columns}
    row.update(doc_id=_doc_id(label), warc_record_id=f"<urn:uuid:{label}>", url=f"https://{label}.example/",
               text=text, text_length=len(text), crawl_date=crawl_date, **extra)
    return row


def _write_bronze(spark, lake, rows: list[dict]) -> None:
    data = [tuple(r[c] for c in BRONZE_DOCUMENTS.columns) for r in rows]
    lake.merge(BRONZE_DOCUMENTS, spark.createDataFrame(data, BRONZE_DOCUMENTS.schema))


def _replace_word(text: str, index: int, word: str) -> str:
    words = text.split(" ")
    words[index] = word
    return " ".join(words)


def _rows(spark, root, spec, key=("doc_id",)) -> dict:
    return {tuple(r[k] for k in key): r for r in read_table(spark, root, spec.qualified_name).collect()}


@pytest.fixture(scope="module")
def incremental(spark, tmp_path_factory):
    """Ingest + dedup batch A; snapshot; add batch B to bronze; dedup again. Returns what a test needs."""
    from pipelines.kernels.warc import parse_warc_file
    from pipelines.runner import run_pipeline
    from pipelines.sample import SAMPLE_PAGES
    from pipelines.lake import Lake

    root = tmp_path_factory.mktemp("incremental_lake")
    cfg = lake_config(root)
    run_a = {r.stage: r for r in run_pipeline(cfg, stages=("ingest", "dedup"))}["dedup"]
    lake = Lake(spark, cfg.lake)
    before = {spec.name: _rows(spark, root, spec, spec.keys)
              for spec in (SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS, SILVER_DEDUP_INDEX)}

    kept_a = {k[0]: r.asDict() for k, r in before["documents_dedup"].items()}
    clusters_a = before["duplicate_clusters"]
    # A1: kept in A with an exact copy in A (its cluster grows). A2: the longest sample article
    # with no cluster in A (it gets its first cluster row).
    a1 = next(r.doc_id for r in clusters_a.values() if r.kept and r.method == "exact")
    articles = {p.url for p in SAMPLE_PAGES if p.kind == "article"}
    in_clusters = {k[0] for k in clusters_a}
    a2 = max((d for d in kept_a.values() if d["doc_id"] not in in_clusters and d["url"] in articles),
             key=lambda d: len(d["text"].split()))["doc_id"]
    a1_text, a2_text = kept_a[a1]["text"], kept_a[a2]["text"]

    real = [r for r in parse_warc_file(real_file("cc-main-2020-34-excerpt.warc.gz")).rows
            if r["kind"] == "document" and r["url"] in REAL_URLS]
    assert len(real) == len(REAL_URLS)
    r1, r2 = real[0], real[1]
    template = kept_a[a1]
    batch_b = [
        _bronze_row(template, "b-copy-a1", a1_text, EARLY),
        _bronze_row(template, "b-copy-a1-punct", a1_text.replace(".", "!!"), EARLY),       # same normalized text
        _bronze_row(template, "b-near-a2", _replace_word(a2_text, 40, "entirely") + " Extra words.", EARLY),
        *[{k: r[k] for k in BRONZE_DOCUMENTS.columns} for r in real],                        # new real pages
        _bronze_row(r1, "b-copy-r1", r1["text"], EARLY),                                     # earlier: kept over r1
        _bronze_row(r2, "b-near-r2", _replace_word(r2["text"], 60, "другой"), LATE),          # later: r2 kept
    ]
    _write_bronze(spark, lake, batch_b)
    (run_b,) = run_pipeline(cfg, stages=("dedup",))
    ids = {label: _doc_id(label) for label in ("b-copy-a1", "b-copy-a1-punct", "b-near-a2", "b-copy-r1", "b-near-r2")}
    return dict(root=root, lake=lake, cfg=cfg, before=before, run_a=run_a, run_b=run_b,
                a1=a1, a2=a2, r1=r1["doc_id"], r2=r2["doc_id"], real=[r["doc_id"] for r in real], ids=ids,
                batch_b=batch_b)


def test_first_run_is_a_full_run(incremental):
    notes = incremental["run_a"].result.notes
    assert notes["mode"] == "full" and notes["exact_removed"] >= 1 and notes["near_removed"] >= 1


def test_copies_of_kept_documents_are_removed_and_old_documents_stay(spark, incremental):
    inc, root = incremental, incremental["root"]
    clusters = _rows(spark, root, SILVER_DUPLICATE_CLUSTERS, ("doc_id", "method"))
    ids = inc["ids"]
    for label in ("b-copy-a1", "b-copy-a1-punct"):
        row = clusters[(ids[label], "exact")]
        assert (row.cluster_id, row.kept, row.jaccard) == (inc["a1"], False, 1.0)
    near = clusters[(ids["b-near-a2"], "near")]
    assert near.cluster_id == inc["a2"] and not near.kept and 0.8 <= near.jaccard < 1.0
    assert clusters[(inc["a2"], "near")].kept and clusters[(inc["a2"], "near")].jaccard == 1.0
    # Among new documents the keep rule decides: the earlier copy of r1 wins, the later near copy of r2 loses.
    assert clusters[(inc["r1"], "exact")].cluster_id == ids["b-copy-r1"] and not clusters[(inc["r1"], "exact")].kept
    r2_near = clusters[(ids["b-near-r2"], "near")]
    assert r2_near.cluster_id == inc["r2"] and not r2_near.kept and 0.8 <= r2_near.jaccard < 1.0

    kept = set(_rows(spark, root, SILVER_DOCUMENTS_DEDUP))
    new_kept = {(d,) for d in [ids["b-copy-r1"], *(r for r in inc["real"] if r != inc["r1"])]}
    assert kept == set(inc["before"]["documents_dedup"]) | new_kept
    index = _rows(spark, root, SILVER_DEDUP_INDEX)
    assert set(index) == kept
    notes = inc["run_b"].result.notes
    assert notes["mode"] == "incremental" and notes["new_documents"] == len(inc["batch_b"])
    assert (notes["exact_removed"], notes["near_removed"]) == (3, 2)
    assert inc["run_b"].result.rows_out == len(new_kept)


def test_batch_a_rows_are_untouched(spark, incremental):
    inc, root = incremental, incremental["root"]
    before = inc["before"]
    docs = _rows(spark, root, SILVER_DOCUMENTS_DEDUP)
    assert all(docs[k] == row for k, row in before["documents_dedup"].items())
    index = _rows(spark, root, SILVER_DEDUP_INDEX)
    assert all(index[k] == row for k, row in before["dedup_index"].items())   # signatures byte-identical
    clusters = _rows(spark, root, SILVER_DUPLICATE_CLUSTERS, ("doc_id", "method"))
    sizes = {}
    for r in clusters.values():
        sizes[(r.cluster_id, r.method)] = sizes.get((r.cluster_id, r.method), 0) + 1
    for key, old in before["duplicate_clusters"].items():
        new = clusters[key]
        # The decision is final; only the size of a cluster that newcomers joined grows.
        assert {**new.asDict(), "cluster_size": None} == {**old.asDict(), "cluster_size": None}
        assert new.cluster_size == sizes[(new.cluster_id, new.method)]
    a1_exact = clusters[(inc["a1"], "exact")]
    assert a1_exact.cluster_size == before["duplicate_clusters"][(inc["a1"], "exact")].cluster_size + 2


def test_batch_a_signatures_were_not_recomputed(spark, incremental):
    inc = incremental
    # Only B's documents went through the MinHash kernel (each once, exact copies included: one
    # pass gives both keys), none of A's.
    assert inc["run_b"].result.notes["signatures_computed"] == len(inc["batch_b"])
    # The index's history: the B run added its kept documents' rows in one commit on top of A's
    # version and retired none of A's files (A's rows are the same bytes:
    # test_batch_a_rows_are_untouched).
    log = Path(inc["lake"].location(SILVER_DEDUP_INDEX)) / "_delta_log"
    actions = [json.loads(line) for line in sorted(log.glob("*.json"))[-1].read_text().splitlines()]
    assert [a for a in actions if "remove" in a] == []
    added = [json.loads(a["add"]["stats"])["numRecords"] for a in actions if "add" in a]
    assert added and sum(added) == inc["run_b"].result.rows_out


def test_explain_shows_estimated_jaccard(spark, incremental):
    from pipelines.explain import explain

    doc = incremental["ids"]["b-near-a2"]
    jaccard = _rows(spark, incremental["root"], SILVER_DUPLICATE_CLUSTERS, ("doc_id", "method"))[(doc, "near")].jaccard
    exp = explain(incremental["lake"], doc)
    assert exp.verdict.startswith(f"removed: near duplicate of {incremental['a2']}")
    assert exp.verdict.endswith(f"estimated Jaccard {jaccard:.2f}")
    assert any(line.endswith(f"estimated Jaccard {jaccard:.2f}") for line in exp.lines())


def test_rerun_with_no_new_documents_changes_nothing(spark, incremental):
    from pipelines.runner import run_pipeline

    inc = incremental
    tables = (SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS, SILVER_DEDUP_INDEX)
    versions = {t.name: inc["lake"].version(t) for t in tables}
    (rerun,) = run_pipeline(inc["cfg"], stages=("dedup",))
    assert {t.name: inc["lake"].version(t) for t in tables} == versions
    notes = rerun.result.notes
    assert (notes["mode"], notes["new_documents"], notes["signatures_computed"]) == ("incremental", 0, 0)


# ---------------------------------------------------------------------------------- keep policy


def test_keep_policy_config_is_validated():
    assert load_config("local").dedup.keep == ["crawl_date asc", "text_length desc", "doc_id asc"]
    assert load_config("local", ["dedup.keep=[Text_Length  DESC]"]).dedup.keep == ["text_length desc", "doc_id asc"]
    for bad in ("[foo asc]", "[crawl_date up]", "[crawl_date]", "[crawl_date asc, crawl_date desc]", "crawl_date asc"):
        with pytest.raises(ConfigError, match="dedup.keep"):
            load_config("local", [f"dedup.keep={bad}"])


def test_keep_policy_picks_the_kept_document_and_a_change_rebuilds(spark, tmp_path):
    from pipelines.runner import run_pipeline
    from pipelines.sample import SAMPLE_PAGES
    from pipelines.lake import Lake

    text = next(p.text for p in SAMPLE_PAGES if p.kind == "article")
    template = {"warc_type": "response", "source_file": "test", "warc_filename": "test", "record_offset": 0}
    day = lambda d: dt.datetime(2020, 1, d)  # noqa: E731
    rows = [  # three exact duplicates (the same normalized text)
        _bronze_row(template, "k1", text, day(2), payload_bytes=100),
        _bronze_row(template, "k2", text.replace(".", "!!!"), day(3), payload_bytes=300),
        _bronze_row(template, "k3", text, day(1), payload_bytes=200),
        _bronze_row(template, "k4", "A different page altogether, with other words in it.", day(1), payload_bytes=1),
    ]
    cfg = lake_config(tmp_path)
    _write_bronze(spark, Lake(spark, cfg.lake), rows)
    k1, k2, k3, k4 = (_doc_id(f"k{i}") for i in range(1, 5))

    def kept(*overrides):
        (run,) = run_pipeline(lake_config(tmp_path, *overrides), stages=("dedup",))
        clusters = read_table(spark, tmp_path, "silver.duplicate_clusters").filter("kept").collect()
        docs = {r.doc_id for r in read_table(spark, tmp_path, "silver.documents_dedup").select("doc_id").collect()}
        assert docs == {k4, *(c.doc_id for c in clusters)}
        return run.result.notes["mode"], [c.doc_id for c in clusters]

    assert kept() == ("full", [k3])                                           # earliest crawl
    assert kept("dedup.keep=[payload_bytes desc]") == ("full", [k2])          # largest payload
    tie = min(k1, k3)                                                         # k1 = k3 in length: doc_id decides
    assert kept("dedup.keep=[text_length asc]") == ("full", [tie])
    assert kept("dedup.keep=[text_length asc]") == ("incremental", [tie])     # same settings: nothing to redo
    (forced,) = run_pipeline(lake_config(tmp_path, "dedup.keep=[text_length asc]"), stages=("dedup",), full=("dedup",))
    assert (forced.result.notes["mode"], forced.result.notes["full_because"], forced.result.rows_in) == ("full", "--full", 4)
    assert [r.doc_id for r in read_table(spark, tmp_path, "silver.duplicate_clusters").filter("kept").collect()] == [tie]
    sizes = read_table(spark, tmp_path, "silver.duplicate_clusters").select("cluster_size").distinct().collect()
    assert [r.cluster_size for r in sizes] == [3]
    assert read_table(spark, tmp_path, "silver.duplicate_clusters").filter(F.col("jaccard") != 1.0).count() == 0


@pytest.mark.parametrize("verify", ["true", "false"])
def test_incremental_run_links_new_to_kept_pairs(spark, tmp_path, verify):
    """An incremental run links a near copy to the kept document it shares LSH buckets with. With
    dedup.verify=true the candidate pair is verified by exact shingle Jaccard on the kept
    document's text from silver.documents_dedup; with false, the kept side's text is not read
    and the LSH candidate stands."""
    from pipelines.runner import run_pipeline
    from pipelines.sample import SAMPLE_PAGES
    from pipelines.lake import Lake

    text = max((p.text for p in SAMPLE_PAGES if p.kind == "article"), key=len)
    template = {"warc_type": "response", "source_file": "test", "warc_filename": "test", "record_offset": 0,
                "payload_bytes": 1}
    lake = Lake(spark, lake_config(tmp_path).lake)
    _write_bronze(spark, lake, [_bronze_row(template, "v-old", text, dt.datetime(2020, 1, 2))])
    (first,) = run_pipeline(lake_config(tmp_path, f"dedup.verify={verify}"), stages=("dedup",))
    _write_bronze(spark, lake, [_bronze_row(template, "v-near", _replace_word(text, 30, "quite"), EARLY)])
    (second,) = run_pipeline(lake_config(tmp_path, f"dedup.verify={verify}"), stages=("dedup",))
    assert (first.result.notes["mode"], second.result.notes["mode"]) == ("full", "incremental")
    assert second.result.notes["verified"] is (verify == "true")
    assert second.result.notes["signatures_computed"] == 1 and second.result.notes["near_removed"] == 1
    row = read_table(spark, tmp_path, "silver.duplicate_clusters").filter(F.col("doc_id") == _doc_id("v-near")).first()
    assert row.cluster_id == _doc_id("v-old") and not row.kept and row.method == "near"


def test_documents_that_left_bronze_leave_dedup_and_their_clusters_are_decided_again(spark, tmp_path):
    """A changed file re-ingested takes documents out of bronze. The next run takes them out of
    the three tables and decides their clusters' other members again: a removed kept document's
    copies get a new kept one, a removed copy's cluster shrinks, and the tables equal a full run's."""
    from pipelines.runner import run_pipeline
    from pipelines.sample import SAMPLE_PAGES
    from pipelines.lake import Lake

    first, second = [p.text for p in SAMPLE_PAGES if p.kind == "article"][:2]
    template = {"warc_type": "response", "source_file": "test", "warc_filename": "test", "record_offset": 0,
                "payload_bytes": 1}
    day = lambda d: dt.datetime(2020, 1, d)  # noqa: E731
    lake = Lake(spark, lake_config(tmp_path).lake)
    _write_bronze(spark, lake, [
        _bronze_row(template, "a1", first, day(1)), _bronze_row(template, "a2", first.replace(".", "!!"), day(2)),
        _bronze_row(template, "a3", first, day(3)),                    # a1 kept, a2 and a3 copies
        _bronze_row(template, "b1", second, day(1)), _bronze_row(template, "b2", second, day(2)),
        _bronze_row(template, "b3", second, day(3)),                   # b1 kept, b2 and b3 copies
        _bronze_row(template, "c1", "A different page altogether, with other words in it.", day(1))])
    a1, a2, a3, b1, b2, b3, c1 = (_doc_id(x) for x in ("a1", "a2", "a3", "b1", "b2", "b3", "c1"))

    def tables():
        return {spec.name: {k: tuple(v[c] for c in v.__fields__ if c not in ("params",))
                            for k, v in _rows(spark, tmp_path, spec, spec.keys).items()}
                for spec in (SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS, SILVER_DEDUP_INDEX)}

    run_pipeline(lake_config(tmp_path), stages=("dedup",))
    assert {k[0] for k in tables()["documents_dedup"]} == {a1, b1, c1}
    lake.delete_rows(BRONZE_DOCUMENTS, "doc_id", [a1, b3])             # as a re-ingest of their changed file does
    (run,) = run_pipeline(lake_config(tmp_path), stages=("dedup",))
    notes = run.result.notes
    assert (notes["mode"], notes["documents_removed"], notes["new_documents"]) == ("incremental", 2, 3)   # a2 a3 b2
    after = tables()
    assert {k[0] for k in after["documents_dedup"]} == {k[0] for k in after["dedup_index"]} == {a2, b1, c1}
    clusters = {k[0]: (r.cluster_id, r.cluster_size, r.kept) for k, r in _rows(
        spark, tmp_path, SILVER_DUPLICATE_CLUSTERS, ("doc_id", "method")).items()}
    assert clusters == {a2: (a2, 2, True), a3: (a2, 2, False), b1: (b1, 2, True), b2: (b1, 2, False)}
    run_pipeline(lake_config(tmp_path), stages=("dedup",), full=("dedup",))
    assert tables() == after


def test_a_run_that_died_after_dissolving_clusters_is_finished_by_the_next(spark, tmp_path):
    """A run that retired the documents that left bronze and dissolved their clusters, then died,
    leaves the other members undecided in bronze files older than the last successful run's
    version. The next run looks at all of bronze (rows left it since that version), not only at
    the files added since, and decides them as a full run would."""
    from pipelines.runner import run_pipeline
    from pipelines.sample import SAMPLE_PAGES
    from pipelines.lake import Lake
    from pipelines.stages.dedup import _retire_removed

    first, second = [p.text for p in SAMPLE_PAGES if p.kind == "article"][:2]
    template = {"warc_type": "response", "source_file": "test", "warc_filename": "test", "record_offset": 0,
                "payload_bytes": 1}
    day = lambda d: dt.datetime(2020, 1, d)  # noqa: E731
    lake = Lake(spark, lake_config(tmp_path).lake)
    # two commits, so that the documents that leave are in a file of their own
    _write_bronze(spark, lake, [_bronze_row(template, "a1", first, day(1)), _bronze_row(template, "b3", second, day(3))])
    _write_bronze(spark, lake, [_bronze_row(template, "a2", first, day(2)), _bronze_row(template, "a3", first, day(3)),
                                _bronze_row(template, "b1", second, day(1)), _bronze_row(template, "b2", second, day(2))])
    a1, a2, a3, b1, b2, b3 = (_doc_id(x) for x in ("a1", "a2", "a3", "b1", "b2", "b3"))

    def tables():
        return {spec.name: {k: tuple(v[c] for c in v.__fields__ if c not in ("params",))
                            for k, v in _rows(spark, tmp_path, spec, spec.keys).items()}
                for spec in (SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS, SILVER_DEDUP_INDEX)}

    run_pipeline(lake_config(tmp_path), stages=("dedup",))
    assert {k[0] for k in tables()["documents_dedup"]} == {a1, b1}
    lake.delete_rows(BRONZE_DOCUMENTS, "doc_id", [a1, b3])
    assert _retire_removed(lake) == 2   # what the run that died did before it died
    assert {k[0] for k in tables()["duplicate_clusters"]} == set()   # both clusters dissolved
    (run,) = run_pipeline(lake_config(tmp_path), stages=("dedup",))
    notes = run.result.notes
    assert (notes["mode"], notes["new_documents"]) == ("incremental", 3)   # a2 a3 b2
    after = tables()
    assert {k[0] for k in after["documents_dedup"]} == {a2, b1}
    run_pipeline(lake_config(tmp_path), stages=("dedup",), full=("dedup",))
    assert tables() == after
