"""The embedding kernel, the embed stage on Spark and on Dask, refresh, and model revisions.

One lake per module: the Common Crawl 2020 excerpt (16 real pages, Chinese and Russian among
them) and the Internet Archive 2008 crawl's FAQ answers (short English pages) ingested and
published as clean, then embedded with the default model on CPU.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import lake_config, read_table, real_file

from pipelines.config import EmbedConfig
from pipelines.kernels.embed import EmbedParams, chunk_documents, load_model, resolve_model

CPU = EmbedParams(EmbedConfig(device="cpu"))


def with_inputs(cfg, *names):
    return cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": [real_file(n) for n in names]})})


# -- kernel (compiled forward pass: slow, so here rather than in tests/unit) -----------------------

def test_auto_compile_switches_after_the_token_threshold_and_keeps_the_vectors(monkeypatch):
    import warnings

    import pipelines.kernels.embed as kernel
    from pipelines.kernels.warc import parse_warc_file

    texts = [r["text"] for r in parse_warc_file(real_file("ia-heritrix-2008-example.warc.gz")).rows
             if r["kind"] == "document" and r["text"]][:12]
    doc_index, spans = chunk_documents(texts, CPU)
    # Of the 240 chunks, every one shorter than a full window (padded batches) and 16 full ones
    # (their batches need no padding): both batch forms, seconds per encode.
    full = max(n for _, _, n in spans)
    short = [texts[d][s:e] for d, (s, e, n) in zip(doc_index, spans) if n < full]
    chunks = short + [texts[d][s:e] for d, (s, e, n) in zip(doc_index, spans) if n == full][:16]
    assert len(short) >= 8 and len(chunks) >= 24
    eager = load_model("default", "cpu", "auto")
    lengths = kernel._tokenize(eager, chunks)[1]
    want = eager.encode(chunks, normalize_embeddings=True, batch_size=32)
    auto = EmbedParams(EmbedConfig(device="cpu", compile="auto"))
    monkeypatch.setattr(kernel, "_tokens_embedded", 0)
    monkeypatch.setattr(kernel, "AUTO_COMPILE_AFTER_TOKENS", int(lengths.sum()))
    assert kernel._forward(auto, on_gpu=False) is eager
    first = kernel.encode_chunks(chunks, auto)
    assert kernel._tokens_embedded == lengths.sum()
    assert kernel._forward(auto, on_gpu=False) is not eager
    import torch._dynamo

    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)   # one graph for every batch
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a failed compile would fall back with a warning
        compiled = kernel.encode_chunks(chunks, auto)
    assert not kernel._compile_failed
    np.testing.assert_allclose(first, want, atol=1e-5)
    np.testing.assert_allclose(compiled, want, atol=1e-5)
    assert kernel._forward(EmbedParams(EmbedConfig(device="cpu", compile=False)), on_gpu=False) is eager
    with pytest.raises(ValueError, match="compile"):
        kernel._forward(EmbedParams(EmbedConfig(device="cpu", compile="yes")), on_gpu=False)


# -- stage -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    """The excerpt and the FAQ pages ingested and published as clean, embedded on Spark."""
    from pyspark.sql import functions as F

    from pipelines.runner import run_pipeline
    from pipelines.lake import Lake
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_CLEAN

    root = tmp_path_factory.mktemp("embed_lake")
    # shards this small would be exact scans: graphs (HNSW, tuned) here, as a large lake's are
    cfg = with_inputs(lake_config(root, "embed.device=cpu", "index.flat_max_rows=0"), "cc-main-2020-34-excerpt.warc.gz",
                      "ia-heritrix-2008-example.warc.gz")
    run_pipeline(cfg, stages=("ingest",))
    lake = Lake(spark, cfg.lake)
    docs = lake.read(BRONZE_DOCUMENTS).filter(
        F.col("source_file").endswith("cc-main-2020-34-excerpt.warc.gz") | F.col("url").contains("/faq.php?faq_id="))
    lake.overwrite(SILVER_DOCUMENTS_CLEAN, docs.select(
        "*", F.lit(None).cast("string").alias("language"), F.lit(None).cast("double").alias("language_score")))
    runs = run_pipeline(cfg, stages=("embed",))
    return cfg, lake, runs[-1]


def vectors(spark, root, where="true"):
    rows = read_table(spark, root, "gold.embeddings").filter(where).collect()
    return {(r.doc_id, r.chunk_id): (r.char_start, r.char_end, np.asarray(r.vector, np.float32)) for r in rows}


def copy_lake(spark, cfg, tmp_path):
    """A copy of the module's lake to change: (its config, its Lake)."""
    from pipelines.lake import Lake

    root = tmp_path / "lake"
    shutil.copytree(cfg.lake.root, root)
    cfg2 = cfg.model_copy(update={"lake": cfg.lake.model_copy(update={"root": str(root)})})
    return cfg2, Lake(spark, cfg2.lake)


def test_spark_vectors_equal_sentence_transformers_encode(spark, lake):
    cfg, _, run = lake
    root = Path(cfg.lake.root)
    texts = {r.doc_id: r.text for r in read_table(spark, root, "silver.documents_clean").collect()}
    got = vectors(spark, root)
    assert {d for d, _ in got} == {d for d, t in texts.items() if t.strip()}
    keys = sorted(got)
    chunks = [texts[d][got[(d, c)][0]:got[(d, c)][1]] for d, c in keys]
    want = load_model("default", "cpu", "auto").encode(chunks, normalize_embeddings=True, batch_size=32)
    np.testing.assert_allclose(np.stack([got[k][2] for k in keys]), want, atol=1e-5)
    assert run.result.notes["documents_embedded"] == len(texts)


def test_rerun_embeds_nothing_and_changes_nothing(spark, lake):
    from pipelines.runner import run_pipeline

    cfg, _, _ = lake
    before = vectors(spark, Path(cfg.lake.root))
    run = run_pipeline(cfg, stages=("embed",))[-1]
    assert run.result.notes["documents_embedded"] == 0
    assert run.result.notes["documents_unchanged"] == run.result.rows_in
    after = vectors(spark, Path(cfg.lake.root))
    assert after.keys() == before.keys()
    assert all(np.array_equal(after[k][2], before[k][2]) for k in before)


@pytest.mark.parametrize("writer", ["deltalake", "spark"])
def test_refresh_embeds_new_documents_and_drops_removed_ones(spark, lake, tmp_path, writer):
    from pyspark.sql import functions as F

    from pipelines.runner import run_pipeline
    from schemas.catalog import SILVER_DOCUMENTS_CLEAN

    cfg2, lake2 = copy_lake(spark, lake[0], tmp_path)
    cfg2 = cfg2.model_copy(update={"lake": cfg2.lake.model_copy(update={"writer": writer})})
    root = Path(cfg2.lake.root)
    clean = lake2.read(SILVER_DOCUMENTS_CLEAN).localCheckpoint()
    ids = sorted(r.doc_id for r in clean.select("doc_id").collect())
    removed, changed = ids[0], ids[1]
    new_clean = (clean.filter(F.col("doc_id") != removed)
                 .withColumn("doc_id", F.when(F.col("doc_id") == changed, F.lit("new-doc")).otherwise(F.col("doc_id"))))
    lake2.overwrite(SILVER_DOCUMENTS_CLEAN, new_clean)
    before = vectors(spark, root)
    run = run_pipeline(cfg2, stages=("embed",))[-1]
    assert run.result.notes["documents_embedded"] == 1 and run.result.notes["documents_removed"] == 2
    assert run.result.writers["gold.embeddings"] == writer
    after = vectors(spark, root)
    assert {d for d, _ in after} == (set(ids) - {removed, changed}) | {"new-doc"}
    for key in after:
        if key[0] != "new-doc":  # untouched documents keep their vectors bit for bit
            assert np.array_equal(after[key][2], before[key][2])
    moved = sorted(k for k in after if k[0] == "new-doc")
    assert [c for _, c in moved] == sorted(c for d, c in before if d == changed)
    for _, c in moved:  # re-embedded in another batch: equal up to float rounding
        np.testing.assert_allclose(after[("new-doc", c)][2], before[(changed, c)][2], atol=1e-5)


def test_refresh_reads_only_the_rows_added_unless_vectors_left(spark, lake, tmp_path):
    """A document added to the clean table is found in the rows added since the last run (a
    version diff: the other documents' texts are not read); vectors deleted outside a run make
    the next one look at every document again and embed the documents that lost theirs."""
    from pyspark.sql import functions as F

    from pipelines.runner import run_pipeline
    from schemas.catalog import GOLD_EMBEDDINGS, SILVER_DOCUMENTS_CLEAN

    cfg2, lake2 = copy_lake(spark, lake[0], tmp_path)
    root = Path(cfg2.lake.root)
    clean = lake2.read(SILVER_DOCUMENTS_CLEAN).localCheckpoint()
    total = clean.count()
    first = sorted(r.doc_id for r in clean.select("doc_id").collect())[0]
    lake2.insert_new(SILVER_DOCUMENTS_CLEAN, clean.filter(F.col("doc_id") == first).withColumn("doc_id", F.lit("added-doc")))
    before = vectors(spark, root)
    added = run_pipeline(cfg2, stages=("embed",))[-1].result
    assert added.notes["mode"] == "incremental"
    assert (added.notes["documents_looked_at"], added.notes["documents_embedded"]) == (1, 1)
    assert added.notes["documents_unchanged"] == total and added.notes["documents_removed"] == 0
    after = vectors(spark, root)
    assert {k for k in after if k[0] != "added-doc"} == before.keys()
    copies = sorted(k for k in after if k[0] == "added-doc")
    assert [c for _, c in copies] == sorted(c for d, c in before if d == first)
    for _, c in copies:   # the same text: the same vectors, up to float rounding
        np.testing.assert_allclose(after[("added-doc", c)][2], before[(first, c)][2], atol=1e-5)

    lake2.delete_rows(GOLD_EMBEDDINGS, "doc_id", [first])   # not through a run of the stage
    again = run_pipeline(cfg2, stages=("embed",))[-1].result
    assert (again.notes["documents_looked_at"], again.notes["documents_embedded"]) == (total + 1, 1)
    assert vectors(spark, root).keys() == after.keys()
    assert run_pipeline(cfg2, stages=("embed",))[-1].result.notes["documents_looked_at"] == 0


def test_full_or_a_chunking_change_embeds_every_document_again(spark, lake, tmp_path):
    """``--full embed`` and a changed chunking re-embed the whole revision (its old vectors go
    first, so two chunkings never mix); the same settings again embed nothing."""
    from pipelines.runner import run_pipeline

    cfg2, _ = copy_lake(spark, lake[0], tmp_path)
    root = Path(cfg2.lake.root)
    before = vectors(spark, root)
    forced = run_pipeline(cfg2, stages=("embed",), full=("embed",))[-1].result
    assert (forced.notes["mode"], forced.notes["full_because"]) == ("full", "--full")
    assert forced.notes["documents_embedded"] == forced.rows_in > 0
    after = vectors(spark, root)   # same settings: the same vectors, bit for bit (batch-invariant)
    assert after.keys() == before.keys() and all(np.array_equal(after[k][2], before[k][2]) for k in before)

    overlap = cfg2.model_copy(update={"embed": cfg2.embed.model_copy(update={"chunk_overlap_tokens": 8})})
    changed = run_pipeline(overlap, stages=("embed",))[-1].result
    assert (changed.notes["mode"], changed.notes["full_because"]) == ("full", "embed config changed")
    assert changed.notes["documents_embedded"] == changed.rows_in
    assert changed.notes["vector_config_hash"] != forced.notes["vector_config_hash"]
    rechunked = vectors(spark, root)
    spans = lambda got: {k: v[:2] for k, v in got.items()}  # noqa: E731  (char_start, char_end) per chunk
    assert {d for d, _ in rechunked} == {d for d, _ in before} and spans(rechunked) != spans(before)
    again = run_pipeline(overlap, stages=("embed",))[-1].result
    assert (again.notes["mode"], again.notes["documents_embedded"]) == ("incremental", 0)


def test_another_model_revision_writes_alongside(spark, lake, tmp_path):
    from pipelines.runner import run_pipeline

    cfg, _, _ = lake
    root = tmp_path / "lake"
    shutil.copytree(cfg.lake.root, root)
    model = tmp_path / "retrained"
    shutil.copytree(resolve_model("default").source, model)
    (model / "config.json").write_text((model / "config.json").read_text() + "\n")  # a new revision
    cfg2 = lake_config(root, "embed.device=cpu", f"embed.model={model}")
    run_pipeline(cfg2, stages=("embed",))
    emb = read_table(spark, root, "gold.embeddings")
    per_model = {(r.model, r.model_revision): r["count"] for r in emb.groupBy("model", "model_revision").count().collect()}
    assert len(per_model) == 2 and len(set(per_model.values())) == 1, per_model
    # each revision gets its own index: one's manifest rows are replaced without touching the other's
    first = lake_config(root, "embed.device=cpu")
    for c in (first, cfg2, first):
        run_pipeline(c, stages=("index",))
    manifest = read_table(spark, root, "gold.index_manifest").collect()
    shards = {}
    for r in manifest:
        shards.setdefault((r.model, r.model_revision), []).append(r.shard)
    assert shards.keys() == per_model.keys(), shards
    assert all(sorted(v) == list(range(first.index.shards)) for v in shards.values()), shards


@pytest.mark.parametrize("writer,cluster", [("deltalake", "local"), ("spark", "scheduler")])
def test_dask_engine_writes_the_same_vectors_as_spark(spark, lake, tmp_path, writer, cluster):
    """``embed.engine=dask``: Dask workers run the kernel and stage the vectors, the lake commits
    them (either engine): the Spark path's vectors, and a re-run embeds nothing. On the engine's
    own LocalCluster (``embed.dask_workers``), and on a running cluster by its scheduler's address
    (``embed.dask_scheduler``: a scheduler and two worker processes on 127.0.0.1, as a GPU box's
    dask-cuda cluster would be reached)."""
    from pipelines.runner import run_pipeline
    from pipelines.servers import start_dask
    from schemas.catalog import SILVER_DOCUMENTS_CLEAN

    cfg, lake_, _ = lake
    spark_rows = vectors(spark, Path(cfg.lake.root))
    cfg2, _ = copy_lake(spark, cfg, tmp_path)
    shutil.rmtree(Path(cfg2.lake.root) / "gold" / "embeddings")
    with contextlib.ExitStack() as stack:
        where = "embed.dask_workers=2"
        if cluster == "scheduler":
            where = f"embed.dask_scheduler={stack.enter_context(start_dask(2)).address}"
        cfg2 = lake_config(Path(cfg2.lake.root), "embed.device=cpu", "embed.engine=dask", where, f"lake.writer={writer}")
        run = run_pipeline(cfg2, stages=("embed",))[-1]
    assert run.result.notes["documents_embedded"] == lake_.read(SILVER_DOCUMENTS_CLEAN).count()
    assert run.result.writers["gold.embeddings"] == writer
    dask_rows = vectors(spark, Path(cfg2.lake.root))
    assert dask_rows.keys() == spark_rows.keys()
    for key, (start, end, vec) in dask_rows.items():
        assert (start, end) == spark_rows[key][:2]
        np.testing.assert_allclose(vec, spark_rows[key][2], atol=1e-6)
    assert run_pipeline(cfg2, stages=("embed",))[-1].result.notes["documents_embedded"] == 0


# -- index and search ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def indexed(lake):
    from pipelines.runner import run_pipeline

    cfg, _, _ = lake
    return run_pipeline(cfg, stages=("index",))[-1]


def english_queries(texts: dict[str, str]) -> dict[str, str]:
    """For each English page (the default model's language), its longest sentence found in no
    other page."""
    import re

    from pipelines.kernels.filters.language import detect_language

    ids = sorted(texts)
    out = {}
    for doc_id, (lang, _) in zip(ids, detect_language([texts[d] for d in ids])):
        sentences = [x.strip() for x in re.split(r"(?<=[.!?])\s+|\n+", texts[doc_id]) if x.strip()]
        sentences = [x for x in sentences if not any(x in t for d, t in texts.items() if d != doc_id)]
        if lang == "en" and sentences:
            out[doc_id] = max(sentences, key=lambda x: (len(x.split()), x))
    return out


def test_index_manifest_covers_every_vector_once(spark, lake, indexed):
    import pyarrow.parquet as pq

    from pipelines.stages.index import shard_uri

    cfg, _, _ = lake
    root = Path(cfg.lake.root)
    manifest = read_table(spark, root, "gold.index_manifest").collect()
    assert 1 <= len(manifest) <= cfg.index.shards
    assert {m.index_type for m in manifest} <= {"hnsw", "flat"}
    emb = vectors(spark, root)
    mapped = []
    for m in manifest:
        assert not Path(m.path).is_absolute()  # relative to the lake root, which holds _index
        path = shard_uri(str(root), m.path)
        assert Path(path).is_file() and m.dim == 384
        ids = pq.read_table(path + ".ids.parquet")
        assert ids.num_rows == m.rows
        mapped += list(zip(ids.column("doc_id").to_pylist(), ids.column("chunk_id").to_pylist()))
    assert sorted(mapped) == sorted(emb)
    assert indexed.result.notes["shards_rebuilt"] == len(manifest)


def test_index_rerun_rebuilds_nothing(spark, lake, indexed):
    from pipelines.runner import run_pipeline

    cfg, _, _ = lake
    run = run_pipeline(cfg, stages=("index",))[-1]
    assert run.result.notes["shards_rebuilt"] == 0
    assert run.result.notes["shards_unchanged"] == indexed.result.notes["shards"]


def test_search_finds_the_page_a_sentence_came_from(spark, lake, indexed):
    from pipelines.search import Searcher

    cfg, _, _ = lake
    texts = {r.doc_id: r.text for r in read_table(spark, Path(cfg.lake.root), "silver.documents_clean").collect()}
    queries = english_queries(texts)
    assert len(queries) >= 5, queries
    searcher = Searcher(cfg)
    for doc_id, sentence in queries.items():
        hits = searcher.search(sentence, k=5)
        assert hits[0].doc_id == doc_id, (sentence, [(h.doc_id, round(h.score, 3)) for h in hits])
        assert len({h.doc_id for h in hits}) == len(hits)  # one hit per document
        assert hits[0].url and hits[0].snippet
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))


def test_small_shards_are_exact_scans(spark, lake, indexed, tmp_path):
    """At the default ``index.flat_max_rows`` every shard of this small lake is an exact (flat)
    scan: the changed setting rebuilds every shard, each with recall 1.0, and search still finds
    each sentence's page first."""
    from pipelines.config import IndexConfig
    from pipelines.runner import run_pipeline
    from pipelines.search import Searcher
    from schemas.catalog import GOLD_INDEX_MANIFEST

    cfg2, lake2 = copy_lake(spark, lake[0], tmp_path)
    default = IndexConfig().flat_max_rows
    cfg2 = cfg2.model_copy(update={"index": cfg2.index.model_copy(update={"flat_max_rows": default})})
    run = run_pipeline(cfg2, stages=("index",))[-1].result
    assert (run.notes["mode"], run.notes["full_because"]) == ("full", "index config changed")
    assert run.notes["shards_rebuilt"] == indexed.result.notes["shards"] and run.notes["built_types"] == "flat"
    manifest = lake2.read(GOLD_INDEX_MANIFEST).collect()
    assert all(m.index_type == "flat" and m.rows <= default and m.tuned_recall == 1.0 for m in manifest)
    texts = {r.doc_id: r.text for r in read_table(spark, Path(cfg2.lake.root), "silver.documents_clean").collect()}
    searcher = Searcher(cfg2)
    for doc_id, sentence in english_queries(texts).items():
        assert searcher.search(sentence, k=5)[0].doc_id == doc_id, sentence


def test_search_cli_prints_the_page_first(spark, lake, indexed):
    import json

    from typer.testing import CliRunner

    from pipelines.cli import app

    cfg, _, _ = lake
    texts = {r.doc_id: r.text for r in read_table(spark, Path(cfg.lake.root), "silver.documents_clean").collect()}
    doc_id, sentence = next(iter(english_queries(texts).items()))
    result = CliRunner().invoke(app, ["search", sentence, "--k", "3", "--json", "--lake-root", cfg.lake.root,
                                      "--set", "embed.device=cpu"])
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines()]  # stderr has the model-loading bar
    assert [h["rank"] for h in hits] == [1, 2, 3] and hits[0]["doc_id"] == doc_id


def test_search_without_an_index_is_a_clear_error(tmp_path):
    from pipelines.search import Searcher

    with pytest.raises(FileNotFoundError, match="run the index stage"):
        Searcher(lake_config(tmp_path, "embed.device=cpu"))


def test_index_rebuilds_only_the_shard_whose_documents_changed_and_adds_a_segment_to_one_that_only_gained(spark, lake, indexed, tmp_path):
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from pipelines.runner import run_pipeline
    from pipelines.search import Searcher
    from pipelines.stages.index import shard_uri
    from schemas.catalog import GOLD_INDEX_MANIFEST, SILVER_DOCUMENTS_CLEAN

    cfg2, lake2 = copy_lake(spark, lake[0], tmp_path)
    clean = lake2.read(SILVER_DOCUMENTS_CLEAN).localCheckpoint()
    texts = {r.doc_id: r.text for r in clean.collect()}
    removed, sentence = next(iter(english_queries(texts).items()))
    lake2.overwrite(SILVER_DOCUMENTS_CLEAN, clean.filter(F.col("doc_id") != removed))
    run_pipeline(cfg2, stages=("embed",))
    run = run_pipeline(cfg2, stages=("index",))[-1]
    assert run.result.notes["shards_rebuilt"] == 1
    assert run.result.notes["shards_unchanged"] == indexed.result.notes["shards"] - 1
    # the unchanged shards are the copy's own files, not the original lake's
    paths = [shard_uri(cfg2.lake.root, r.path) for r in lake2.read(GOLD_INDEX_MANIFEST).collect()]
    assert paths and all(p.startswith(f"{cfg2.lake.root}/_index/") and Path(p).is_file() for p in paths)
    assert removed not in {h.doc_id for h in Searcher(cfg2).search(sentence, k=10)}
    forced = run_pipeline(cfg2, stages=("index",), full=("index",))[-1].result   # --full index: every shard
    assert (forced.notes["mode"], forced.notes["full_because"]) == ("full", "--full")
    assert forced.notes["shards_rebuilt"] == indexed.result.notes["shards"] and forced.notes["shards_unchanged"] == 0
    assert removed not in {h.doc_id for h in Searcher(cfg2).search(sentence, k=10)}
    # the document comes back: its shard only gains rows, which become a new segment of it
    lake2.overwrite(SILVER_DOCUMENTS_CLEAN, clean)
    run_pipeline(cfg2, stages=("embed",))
    back = run_pipeline(cfg2, stages=("index",))[-1].result
    assert (back.notes["shards_extended"], back.notes["shards_rebuilt"]) == (1, 0)
    assert back.notes["mode"] == "incremental"
    assert back.notes["segments"] == back.notes["shards"] + 1
    added = len(vectors(spark, Path(cfg2.lake.root), f"doc_id = '{removed}'"))
    assert back.rows_in == added   # the added rows alone
    manifest = lake2.read(GOLD_INDEX_MANIFEST).collect()
    (grown,) = {r.shard for r in manifest if r.segment == 1}
    assert sorted(r.segment for r in manifest if r.shard == grown) == [0, 1]
    assert next(r.rows for r in manifest if r.shard == grown and r.segment == 1) == added

    def per_shard(rows):   # the shard's rows and row-hash sum, whatever its segments
        from pipelines.stages.index import hash_sum
        return {s: (sum(r.rows for r in rows if r.shard == s), hash_sum(r.row_hash_sum for r in rows if r.shard == s))
                for s in {r.shard for r in rows}}

    built_once = read_table(spark, Path(lake[0].lake.root), "gold.index_manifest").collect()
    assert per_shard(manifest) == per_shard(built_once)
    for s in {r.shard for r in manifest}:   # the segments' row maps map every vector of the shard once
        mapped = []
        for r in (r for r in manifest if r.shard == s):
            assert r.tuned_recall >= cfg2.index.target_recall, r   # and each graph reaches them
            ids = pq.read_table(shard_uri(cfg2.lake.root, r.path) + ".ids.parquet")
            assert ids.num_rows == r.rows
            mapped += list(zip(ids.column("doc_id").to_pylist(), ids.column("chunk_id").to_pylist()))
        assert len(mapped) == len(set(mapped))
    assert Searcher(cfg2).search(sentence, k=1)[0].doc_id == removed
    # a full pass over every vector (another segment limit changes the config, not the settings)
    # finds every shard, segments and all, unchanged
    cfg3 = cfg2.model_copy(update={"index": cfg2.index.model_copy(update={"max_segments": 4})})
    again = run_pipeline(cfg3, stages=("index",))[-1].result
    assert (again.notes["full_because"], again.notes["shards_unchanged"]) == ("index config changed", again.notes["shards"])
    key = lambda r: (r.shard, r.segment)   # noqa: E731
    assert sorted(lake2.read(GOLD_INDEX_MANIFEST).collect(), key=key) == sorted(manifest, key=key)


def test_a_shard_at_its_segment_limit_is_rebuilt_from_all_its_rows(spark, lake, indexed, tmp_path):
    """``index.max_segments: 1``: a shard that gains rows cannot take a new segment, so it is
    rebuilt from all its rows as one (compacted)."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from pipelines.runner import run_pipeline
    from pipelines.stages.index import shard_uri
    from schemas.catalog import GOLD_INDEX_MANIFEST, SILVER_DOCUMENTS_CLEAN

    cfg2, lake2 = copy_lake(spark, lake[0], tmp_path)
    cfg2 = cfg2.model_copy(update={"index": cfg2.index.model_copy(update={"max_segments": 1})})
    clean = lake2.read(SILVER_DOCUMENTS_CLEAN).localCheckpoint()
    removed = sorted(r.doc_id for r in clean.select("doc_id").collect())[0]
    lake2.overwrite(SILVER_DOCUMENTS_CLEAN, clean.filter(F.col("doc_id") != removed))
    run_pipeline(cfg2, stages=("embed",))
    first = run_pipeline(cfg2, stages=("index",))[-1].result
    assert (first.notes["full_because"], first.notes["shards_rebuilt"]) == ("index config changed", 1)
    lake2.overwrite(SILVER_DOCUMENTS_CLEAN, clean)
    run_pipeline(cfg2, stages=("embed",))
    back = run_pipeline(cfg2, stages=("index",))[-1].result
    assert back.notes["mode"] == "incremental"
    assert (back.notes["shards_extended"], back.notes["shards_rebuilt"]) == (0, 1)
    assert back.notes["shards_unchanged"] == back.notes["shards"] - 1
    manifest = lake2.read(GOLD_INDEX_MANIFEST).collect()
    assert {m.segment for m in manifest} == {0} and len(manifest) == back.notes["shards"]
    mapped = []
    for m in manifest:
        ids = pq.read_table(shard_uri(cfg2.lake.root, m.path) + ".ids.parquet")
        assert ids.num_rows == m.rows
        mapped += list(zip(ids.column("doc_id").to_pylist(), ids.column("chunk_id").to_pylist()))
    assert sorted(mapped) == sorted(vectors(spark, Path(cfg2.lake.root)))
    rebuilt = next(m for m in manifest if m.rows > 0 and removed in pq.read_table(
        shard_uri(cfg2.lake.root, m.path) + ".ids.parquet").column("doc_id").to_pylist())
    added = len(vectors(spark, Path(cfg2.lake.root), f"doc_id = '{removed}'"))
    assert back.rows_in == added + rebuilt.rows   # the added rows, then all of the shard's


def test_an_index_written_before_segments_gets_them(spark, lake, indexed, tmp_path):
    """A manifest without ``segment`` and ``row_hash_sum`` (an earlier crawlake): its rows read as
    segment 0 of their shard. A shard that gained vectors gets segment 1 beside its stored one (its
    row map has the row hashes); a full pass, which cannot tell an unchanged shard without its
    row-hash sums, rebuilds the others once, and then the grown one."""
    from pyspark.sql import functions as F

    from pipelines.runner import run_pipeline
    from pipelines.search import Searcher
    from schemas.catalog import GOLD_INDEX_MANIFEST, SILVER_DOCUMENTS_CLEAN

    cfg2, lake2 = copy_lake(spark, lake[0], tmp_path)
    clean = lake2.read(SILVER_DOCUMENTS_CLEAN).localCheckpoint()
    texts = {r.doc_id: r.text for r in clean.collect()}
    removed, sentence = next(iter(english_queries(texts).items()))
    lake2.overwrite(SILVER_DOCUMENTS_CLEAN, clean.filter(F.col("doc_id") != removed))
    run_pipeline(cfg2, stages=("embed", "index"))
    path = str(Path(cfg2.lake.root) / "gold" / "index_manifest")   # as an earlier crawlake left it
    before = spark.read.format("delta").load(path).drop("segment", "row_hash_sum")
    spark.createDataFrame(before.collect(), before.schema).write.format("delta").mode("overwrite") \
        .option("overwriteSchema", "true").save(path)
    lake2.overwrite(SILVER_DOCUMENTS_CLEAN, clean)
    back = [r.result for r in run_pipeline(cfg2, stages=("embed", "index"))][-1]
    shards = back.notes["shards"]
    assert (back.notes["mode"], back.notes["shards_extended"], back.notes["shards_rebuilt"]) == ("full", 1, shards - 1)
    manifest = lake2.read(GOLD_INDEX_MANIFEST).collect()
    assert sorted(r.segment for r in manifest) == [0] * shards + [1]
    (grown,) = {r.shard for r in manifest if r.segment == 1}
    assert {r.shard for r in manifest if r.row_hash_sum is None} == {grown}   # its segment 0, from before
    assert Searcher(cfg2).search(sentence, k=1)[0].doc_id == removed
    cfg3 = cfg2.model_copy(update={"index": cfg2.index.model_copy(update={"max_segments": 4})})
    full = run_pipeline(cfg3, stages=("index",))[-1].result
    assert (full.notes["shards_rebuilt"], full.notes["shards_unchanged"], full.notes["segments"]) == (1, shards - 1, shards)
    assert all(r.row_hash_sum is not None for r in lake2.read(GOLD_INDEX_MANIFEST).collect())
    assert Searcher(cfg3).search(sentence, k=1)[0].doc_id == removed
