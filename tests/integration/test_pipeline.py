"""The whole pipeline on local Spark with real Delta tables: the built-in sample and real archives."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REAL_LAKE_INPUTS, RENAMED_COPY, lake_config, read_table, real_file
from pyspark.sql import functions as F

from schemas.catalog import WARC_FLOW_TABLES

pytestmark = pytest.mark.slow
REAL_INPUTS = REAL_LAKE_INPUTS


def counts(spark, root: Path) -> dict[str, int]:
    return {t.qualified_name: read_table(spark, root, t.qualified_name).count() for t in WARC_FLOW_TABLES}


def test_sample_run_fills_every_table(spark, sample_lake):
    assert all(n > 0 for n in counts(spark, sample_lake).values()), counts(spark, sample_lake)


def test_sample_run_every_stage_does_something(spark, sample_lake):
    clusters = read_table(spark, sample_lake, "silver.duplicate_clusters")
    assert clusters.filter("method = 'exact' AND NOT kept").count() >= 1
    assert clusters.filter("method = 'near' AND NOT kept").count() >= 1
    reasons = {r.reason for r in read_table(spark, sample_lake, "bronze.quarantine").select("reason").collect()}
    assert "non_html_payload" in reasons
    failed = {r.filter for r in read_table(spark, sample_lake, "silver.filter_decisions").filter("NOT passed").collect()}
    assert {"http_status_2xx", "gopher_min_doc_words"} <= failed
    clean = read_table(spark, sample_lake, "silver.documents_clean")
    assert clean.count() < read_table(spark, sample_lake, "silver.documents_dedup").count()
    assert {"en", "de", "fr", "es", "ru", "zh"} <= {r.language for r in clean.select("language").distinct().collect()}
    emb = read_table(spark, sample_lake, "gold.embeddings")
    assert emb.select("dim").distinct().collect()[0].dim == 384
    assert emb.select("doc_id").distinct().count() == clean.count()


def test_sample_run_ledger_and_quality_results(spark, sample_lake):
    runs = read_table(spark, sample_lake, "ops.runs")
    assert sorted(r.stage for r in runs.filter("status = 'succeeded'").collect()) == sorted(
        ["ingest", "dedup", "filter", "tokenize", "embed", "index"])
    quality = read_table(spark, sample_lake, "ops.quality")
    assert quality.filter("table_name = 'bronze.documents'").count() >= 5
    assert quality.filter("NOT success").count() == 0


def test_token_conservation(spark, sample_lake):
    from pipelines.kernels.tokens import count_tokens

    texts = [r.text for r in read_table(spark, sample_lake, "silver.documents_clean").select("text").collect()]
    seqs = read_table(spark, sample_lake, "gold.token_sequences")
    total = seqs.agg(F.sum("num_tokens")).first()[0]
    assert total == sum(count_tokens(texts)) + len(texts)  # one separator after each document
    assert seqs.select(F.size("input_ids").alias("n")).distinct().collect()[0].n == 2049


@pytest.fixture(scope="module")
def real_lake(spark, submitted_lake):
    """The session's real-archive lake (conftest.submitted_lake: the README's crawlake-submit line);
    returns (root, counts before this module's tests)."""
    root, _ = submitted_lake
    return root, counts(spark, root)


def test_real_archives_reach_bronze(spark, real_lake):
    root, _ = real_lake
    docs = read_table(spark, root, "bronze.documents")
    by_file = {Path(r.source_file).name: r["count"] for r in docs.groupBy("source_file").count().collect()}
    # the excerpt's pages are kept from one of its two copies (the path that sorts first)
    by_file = {REAL_INPUTS[0] if name == RENAMED_COPY else name: n for name, n in by_file.items()}
    assert by_file == {"cc-main-2020-34-excerpt.warc.gz": 16, "ia-heritrix-2008-example.warc.gz": 134}
    assert docs.filter("text IS NULL OR length(text) = 0").count() == 0
    assert docs.filter("url LIKE 'dns:%' OR content_type LIKE 'image/%'").count() == 0
    quarantine = read_table(spark, root, "bronze.quarantine")
    assert quarantine.filter("reason = 'non_html_payload' AND detail LIKE 'image/%'").count() == 55
    assert quarantine.filter("reason = 'empty_text'").count() == 6
    assert quarantine.filter("reason = 'duplicate_record'").count() == 16   # the other copy's pages
    log = {Path(r.source_file).name: r for r in read_table(spark, root, "ops.ingest_log").collect()}
    assert log["ia-heritrix-2008-example.warc.gz"].skipped == 38 + 261 + 261 + 1  # dns, request, metadata, warcinfo


@pytest.mark.parametrize("lake", ["submitted", "spark"])
def test_every_commit_carries_its_run_stage_config_and_inputs(spark, real_lake, engine_lakes, lake):
    """Every commit of every table says in its commit info which run and stage made it, under which
    config hash, from which input versions: those ``ops.runs`` records. The README's submitted lake
    (path mode on local disk: deltalake commits every table) and a ``lake.writer=spark`` lake
    (Spark's Delta writer commits every table); each commit of a stage's output was made by the
    engine its run recorded in ``ops.runs.writers``."""
    from deltalake import DeltaTable

    from pipelines.lake.commits import Lineage

    root = real_lake[0] if lake == "submitted" else Path(engine_lakes["spark"][0].lake.root)
    runs = {(r.run_id, r.stage): r for r in read_table(spark, root, "ops.runs").collect()}
    engines = set()
    for spec in WARC_FLOW_TABLES:
        uri = spec.path_under(str(root))
        if not DeltaTable.is_deltatable(uri):
            continue
        for commit in DeltaTable(uri).history():
            lineage = Lineage.from_commit_info(commit)
            assert lineage is not None, (spec.qualified_name, commit)
            run = runs[(lineage.run_id, lineage.stage)]
            assert lineage.config_hash == run.config_hash, (spec.qualified_name, commit)
            assert lineage.inputs == dict(run.input_versions or {}), (spec.qualified_name, commit)
            engine = "spark" if "Apache-Spark" in commit.get("engineInfo", "") else "deltalake"
            recorded = dict(run.writers or {})   # the tables its stage wrote (ops.runs: the ledger's own)
            assert engine == recorded.get(spec.qualified_name, engine), (spec.qualified_name, commit)
            engines.add(engine)
    assert engines == {"deltalake" if lake == "submitted" else "spark"}


@pytest.mark.parametrize("lake", ["submitted", "spark"])
def test_the_logs_row_counts_agree_with_the_tables(spark, real_lake, engine_lakes, lake):
    """``Lake.read_counted`` adds up the log's per-file numRecords (no Spark job): on every table of a
    lake committed by deltalake and of one committed by Spark's Delta writer, the log's count is
    the table's row count."""
    from pipelines.lake.commits import plain_snapshot

    root = real_lake[0] if lake == "submitted" else Path(engine_lakes["spark"][0].lake.root)
    checked = {}
    for spec in WARC_FLOW_TABLES:
        snapshot = plain_snapshot(spec.path_under(str(root)))
        if snapshot is not None:
            checked[spec.qualified_name] = (snapshot.num_rows, read_table(spark, root, spec.qualified_name).count())
    assert len(checked) >= 10 and all(log == rows for log, rows in checked.values()), checked


@pytest.mark.parametrize("writer", ["spark", "catalog"])
def test_spark_commands_carry_the_lineage_and_leave_the_session_as_it_was(spark, real_lake, tmp_path, writer):
    """A DataFrame write (the writer option), MERGE and a delete (the session conf, set only around
    the command) on a path and a catalog lake."""
    from pipelines.lake import Lake
    from pipelines.lake.commits import Lineage
    from pipelines.lake.lake import USER_METADATA_CONF
    from schemas.catalog import SILVER_DUPLICATE_CLUSTERS as spec

    cfg = lake_config(tmp_path / "lake", writer=writer)
    lake = Lake(spark, cfg.lake)
    rows = read_table(spark, real_lake[0], spec.qualified_name)
    lineages = [Lineage(f"r{k}", "dedup", cfg.hash(), {"bronze.documents": k}) for k in range(3)]
    lake.lineage = lineages[0]
    lake.overwrite(spec, rows)
    lake.lineage = lineages[1]
    lake.merge(spec, rows.limit(3))
    lake.lineage = lineages[2]
    lake.delete_matching(spec, rows.limit(1), ("doc_id",))
    assert spark.conf.get(USER_METADATA_CONF, None) is None
    name = lake.location(spec) if writer == "catalog" else f"delta.`{lake.location(spec)}`"
    history = spark.sql(f"DESCRIBE HISTORY {name}")
    got = sorted((r.version, r.operation, Lineage.from_commit_info({"userMetadata": r.userMetadata}))
                 for r in history.collect())
    assert [lin for _, _, lin in got] == lineages and [op for _, op, _ in got][1:] == ["MERGE", "MERGE"]


def test_lineage_names_the_input_warcs(real_lake, capsys):
    from pipelines.cli import main

    root, _ = real_lake
    assert main(["lineage", "gold.token_sequences", "--lake-root", str(root)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    chain = ["gold.token_sequences v", "← silver.documents_clean v", "← silver.documents_dedup v",
             "← bronze.documents v", "← input files (ops.ingest_log v"]
    at = [next((i for i, line in enumerate(lines) if part in line), None) for part in chain]
    assert None not in at and at == sorted(at), out
    for name in REAL_INPUTS:
        assert real_file(name) in out, out


def test_a_loader_state_does_not_resume_over_a_newer_version(real_lake, tmp_path):
    import shutil

    from deltalake import write_deltalake

    from pipelines.lake import read as lake_read
    from pipelines.loaders import DeltaLoader, TokenSequenceDataset
    from schemas.catalog import OPS_RUNS

    root, _ = real_lake
    uri = str(tmp_path / "token_sequences")
    shutil.copytree(root / "gold" / "token_sequences", uri)   # the shared lake stays as it is
    run_hash = {r["stage"]: r["config_hash"] for r in lake_read.read_rows(OPS_RUNS, str(root), ["stage", "config_hash"])}
    kw = dict(extra_columns=["seq_id"], batch_size=2, shuffle_buffer=4, seed=3)
    full = [s for b in DeltaLoader(TokenSequenceDataset(uri, **kw)) for s in b["seq_id"]]
    first = TokenSequenceDataset(uri, **kw)
    head = [s for _, b in zip(range(2), DeltaLoader(first)) for s in b["seq_id"]]
    state = first.state_dict()
    assert state["config_hash"] == run_hash["tokenize"] and len(full) > len(head) > 0
    v = state["version"]
    write_deltalake(uri, lake_read.read(uri).slice(0, 1), mode="append")   # a newer version
    again = TokenSequenceDataset(uri, **kw)
    assert again.version == v + 1
    with pytest.raises(ValueError, match=rf"state is for version {v} of .*this dataset reads version {v + 1}"):
        again.load_state_dict(state)
    again.load_state_dict(state, repin=True)
    assert again.version == v
    assert head + [s for b in DeltaLoader(again) for s in b["seq_id"]] == full


def test_rerun_is_idempotent(spark, real_lake, submitted_lake):
    from pipelines.runner import run_pipeline

    root, before = real_lake
    cfg = lake_config(root).model_copy()
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": submitted_lake[1]})})
    runs = run_pipeline(cfg)
    assert runs[0].result.notes["files_skipped"] == 3
    after = counts(spark, root)
    after.pop("ops.runs"), before.pop("ops.runs")
    after.pop("ops.quality"), before.pop("ops.quality")
    assert after == before


def test_explain_says_why_each_document_went(spark, sample_lake):
    from pipelines.explain import explain
    from pipelines.lake import Lake

    lake = Lake(spark, lake_config(sample_lake).lake)
    dup = read_table(spark, sample_lake, "silver.duplicate_clusters").filter("NOT kept AND method = 'exact'").first()
    exp = explain(lake, dup.doc_id)
    assert not exp.in_clean and exp.duplicate_of[0]["cluster_id"] == dup.cluster_id
    assert exp.verdict.startswith(f"removed: exact duplicate of {dup.cluster_id}")
    failed = read_table(spark, sample_lake, "silver.filter_decisions").filter("NOT passed").first()
    exp = explain(lake, failed.doc_id)
    assert failed.filter in exp.verdict and any(d["filter"] == failed.filter and not d["passed"] for d in exp.decisions)
    kept = read_table(spark, sample_lake, "silver.documents_clean").first()
    assert explain(lake, kept.doc_id).verdict.startswith("kept") and not explain(lake, "nope").ingested


def test_dedup_with_verification_keeps_the_true_near_duplicates(spark, sample_lake, tmp_path):
    import shutil

    from pipelines.runner import run_pipeline

    root = tmp_path / "lake"
    shutil.copytree(sample_lake, root)
    clusters = lambda: sorted((r.doc_id, r.cluster_id, r.kept, r.method)
                              for r in read_table(spark, root, "silver.duplicate_clusters").collect())
    before = clusters()
    (run,) = run_pipeline(lake_config(root, "dedup.verify=true"), stages=("dedup",))
    assert run.result.notes["verified"] is True
    assert clusters() == before and any(m == "near" for *_, m in before)  # the planted ones are > 0.85
    (strict,) = run_pipeline(lake_config(root, "dedup.verify=true", "dedup.threshold=0.99"), stages=("dedup",))
    assert strict.result.notes["near_removed"] == 0
