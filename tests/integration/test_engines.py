"""One lake layer, three writers: the whole pipeline (ingest to index) and the click flow (ingest,
features) give the same tables on the real WARCs whether deltalake commits the tasks' files,
Spark's Delta writer does, or the tables live in Spark's session catalog; the engine used is
recorded; and each engine reads the logs the other wrote, checkpoints included."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import WRITERS, lake_config, read_lake
from deltalake import DeltaTable


# the module's lakes are three whole pipeline runs: minutes on two cores
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

#: Columns that differ between two runs by design (times, run ids, where files went).
VOLATILE = {"committed_at", "run_id", "ingest_time", "built_at", "build_s", "path", "mtime"}


@pytest.fixture(scope="module")
def lakes(engine_lakes):
    return engine_lakes


def _rows(spark, cfg, table: str) -> list[tuple]:
    df = read_lake(spark, cfg, table)
    keep = [c for c in df.columns if c not in VOLATILE]
    return sorted(tuple(r[c] for c in keep) for r in df.select(*keep).collect())


@pytest.mark.parametrize("table", [
    "bronze.documents", "bronze.quarantine", "ops.ingest_log", "silver.documents_dedup", "silver.duplicate_clusters",
    "silver.dedup_index", "silver.documents_clean", "silver.filter_decisions", "gold.token_sequences",
    "gold.document_tokens", "gold.index_manifest", "bronze.clicks", "bronze.clicks_quarantine",
    "silver.click_vocab", "silver.click_features", "ops.clicks_ingest_log"])
def test_every_table_is_the_same_whoever_commits(spark, lakes, table):
    reference = _rows(spark, lakes["deltalake"][0], table)
    assert reference, f"{table} is empty: nothing compared"
    for writer in WRITERS[1:]:
        assert _rows(spark, lakes[writer][0], table) == reference, f"{table} differs under {writer}"


def test_vectors_are_the_same_whoever_commits(spark, lakes):
    def vectors(cfg):
        rows = read_lake(spark, cfg, "gold.embeddings").collect()
        return {(r.doc_id, r.chunk_id, r.model, r.model_revision): r.vector for r in rows}

    reference = vectors(lakes["deltalake"][0])
    assert reference
    for writer in WRITERS[1:]:
        other = vectors(lakes[writer][0])
        assert other.keys() == reference.keys()
        assert max(abs(a - b) for k in reference for a, b in zip(reference[k], other[k])) <= 1e-5
        assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in other.values())


def test_the_engine_is_recorded_per_table(spark, lakes):
    task_tables = ("bronze.documents", "bronze.quarantine", "ops.ingest_log")
    for writer, (cfg, runs) in lakes.items():
        ingest = runs["ingest"].result.writers
        expected = "deltalake" if writer == "deltalake" else "spark"
        assert {t: ingest[t] for t in task_tables} == dict.fromkeys(task_tables, expected), writer
        assert runs["dedup"].result.writers["silver.documents_dedup"] == expected   # staged by Spark's tasks
        assert runs["index"].result.writers["gold.index_manifest"] == expected   # rows from the driver
        ledger = {r.stage: r.writers for r in read_lake(spark, cfg, "ops.runs").collect()}
        assert ledger["ingest"]["bronze.documents"] == expected and ledger["clicks_ingest"]["bronze.clicks"] == expected


def test_catalog_mode_tables_are_in_the_session_catalog(spark, lakes):
    cfg, _ = lakes["catalog"]
    names = {t.name for t in spark.catalog.listTables(f"spark_catalog.{cfg.lake.schema_}")}
    assert {"bronze_documents", "silver_documents_clean", "gold_token_sequences", "bronze_clicks", "ops_runs"} <= names
    assert not (Path(cfg.lake.root) / "bronze").exists()   # nothing written by path
    assert not (Path(cfg.lake.root) / "_staging").exists() or not any((Path(cfg.lake.root) / "_staging").iterdir())


def _quality_row(run_id: str) -> tuple:
    """An ``ops.quality`` row of run ``run_id``."""
    return (run_id, "dedup", "silver.documents_dedup", "s", "e", None, True, None, datetime.now(timezone.utc))


@pytest.mark.parametrize("writer", ["deltalake", "catalog"])
def test_the_version_diff_tells_appends_from_removals(spark, tmp_path, writer):
    """``Lake.removed_rows_since`` (what lets incremental dedup skip looking for documents that
    left bronze) on a log deltalake wrote and on one Spark wrote to a catalog table (found by its
    location): appends remove nothing, a compaction rewrites rows without removing any, a delete
    removes rows, and an unknown starting version or a missing table says True (look)."""
    from pipelines.lake import Lake
    from schemas.catalog import OPS_QUALITY

    lake = Lake(spark, lake_config(tmp_path, writer=writer).lake)   # a catalog schema named after tmp_path
    assert lake.removed_rows_since(OPS_QUALITY, 0)   # no table yet

    lake.append_rows(OPS_QUALITY, [_quality_row("r1")])
    first = lake.version(OPS_QUALITY)
    lake.append_rows(OPS_QUALITY, [_quality_row("r2")])
    lake.append_rows(OPS_QUALITY, [_quality_row("r3")])
    assert lake.version(OPS_QUALITY) == first + 2
    assert not lake.removed_rows_since(OPS_QUALITY, first)
    assert not lake.removed_rows_since(OPS_QUALITY, first + 2)
    assert lake.removed_rows_since(OPS_QUALITY, None)
    assert lake.changes_since(OPS_QUALITY, first) == frozenset()
    target = f"delta.`{lake.location(OPS_QUALITY)}`" if writer != "catalog" else lake.location(OPS_QUALITY)
    spark.sql(f"OPTIMIZE {target}")   # a compaction rewrites rows, removing none
    assert lake.changes_since(OPS_QUALITY, first) == {"rewritten"} and not lake.removed_rows_since(OPS_QUALITY, first)
    lake.delete_rows(OPS_QUALITY, "run_id", ["r2"])
    assert lake.removed_rows_since(OPS_QUALITY, first) and lake.removed_rows_since(OPS_QUALITY, first + 2)
    assert lake.changes_since(OPS_QUALITY, first) == {"removed", "rewritten"}
    assert sorted(r["run_id"] for r in lake.rows(OPS_QUALITY, ["run_id"])) == ["r1", "r3"]


def test_both_engines_read_each_others_logs_checkpoints_included(spark, tmp_path):
    """31 commits, the engine alternating within each run of ten. Both write checkpoints
    (``delta.checkpointInterval`` 10): Spark at versions 10 and 30, deltalake at 19 (delta-rs
    counts commits, Spark versions). After every commit both engines read every row, Spark from
    the newest checkpoint with its log cache cleared, and Hadoop's checksummed local file system
    reads ``_last_checkpoint`` (delta-rs rewrites it; a sidecar CRC left by Spark would fail every
    Spark read's checksum, which Delta retries with sleeps before listing the log)."""
    from pipelines.lake import Lake
    from schemas.catalog import OPS_QUALITY

    root = tmp_path / "lake"
    lakes = {w: Lake(spark, lake_config(root, writer=w).lake) for w in ("deltalake", "spark")}
    log = root / "ops" / "quality" / "_delta_log"
    clear = spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache
    jvm = spark._jvm
    hadoop_local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration())
    assert hadoop_local.getVerifyChecksum()   # Spark's default: a sidecar CRC is checked on read

    def read_checksummed(path: Path) -> bytes:
        stream = hadoop_local.open(jvm.org.apache.hadoop.fs.Path(str(path)))
        try:   # raises ChecksumException (through py4j) where the sidecar does not match
            return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    for version in range(31):
        writer = "deltalake" if version % 2 == (version // 10) % 2 else "spark"
        lakes[writer].append_rows(OPS_QUALITY, [(f"r{version}", "s", "t", "suite", "e", None, True, str(version),
                                                 datetime(2026, 1, 1, tzinfo=timezone.utc))])
        assert lakes[writer].written == {OPS_QUALITY.qualified_name: writer}
        lakes[writer].written.clear()
        clear()   # Spark's Delta reader, from the newest checkpoint (Lake.read reads plain tables' files)
        assert spark.read.format("delta").load(str(root / "ops" / "quality")).count() == version + 1
        assert DeltaTable(str(root / "ops" / "quality")).to_pyarrow_table().num_rows == version + 1
        if (log / "_last_checkpoint").exists():
            assert read_checksummed(log / "_last_checkpoint") == (log / "_last_checkpoint").read_bytes()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 30
    assert {int(p.name.split(".")[0]) for p in log.glob("*.checkpoint.parquet")} == {10, 19, 30}
    history = [json.loads(line) for p in sorted(log.glob("*.json")) for line in p.read_text().splitlines()]
    engines = [h["commitInfo"].get("engineInfo", "") for h in history if "commitInfo" in h]
    assert engines[19].startswith("delta-rs") and engines[10].startswith("Apache-Spark") and engines[30].startswith("Apache")
    observed = sorted(int(r.observed) for r in spark.read.format("delta").load(str(root / "ops" / "quality")).collect())
    assert observed == list(range(31))


def test_the_lake_reads_plain_tables_by_their_files_and_others_through_delta(spark, tmp_path):
    """``Lake.read`` of a path-mode table on local disk. A table whose files hold its rows as they
    are (reader version 1, unpartitioned) is read as the Parquet files its log lists: no Spark job
    runs until an action, a removed file is not read, a column added later reads as null from
    older files, and the rows and files are those of Spark's Delta reader. Once deletion vectors
    are on (reader version 3) Spark's Delta reader reads it, and the rows a vector deletes stay
    deleted."""
    from pipelines.lake import Lake
    from pipelines.lake.commits import local_path
    from schemas.catalog import OPS_QUALITY

    lake = Lake(spark, lake_config(tmp_path / "lake").lake)
    path = str(tmp_path / "lake" / "ops" / "quality")

    def ids(df):
        return sorted(r.run_id for r in df.collect())

    def delta():
        return spark.read.format("delta").load(path)

    for run_id in ("r0", "r1", "r2"):
        lake.append_rows(OPS_QUALITY, [_quality_row(run_id)])
    lake.delete_rows(OPS_QUALITY, "run_id", ["r1"])
    lake.append_rows(OPS_QUALITY, [_quality_row("r3"), _quality_row("r4")])   # one file, so deleting r4 leaves a vector
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (extra STRING)")
    sc = spark.sparkContext
    sc.setJobGroup("lake-read", "Lake.read, no action")
    try:
        df = lake.read(OPS_QUALITY)
        assert not sc.statusTracker().getJobIdsForGroup("lake-read")
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert ids(df) == ids(delta()) == ["r0", "r2", "r3", "r4"]
    assert df.columns == delta().columns and df.columns[-1] == "extra"
    assert [r.extra for r in df.collect()] == [None] * 4
    assert sorted(map(local_path, df.inputFiles())) == sorted(map(local_path, delta().inputFiles()))

    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE run_id = 'r4'")
    assert DeltaTable(path).protocol().min_reader_version == 3
    assert any("deletionVector" in line and '"add"' in line
               for p in sorted((tmp_path / "lake" / "ops" / "quality" / "_delta_log").glob("*.json"))
               for line in p.read_text().splitlines())
    assert ids(lake.read(OPS_QUALITY)) == ids(delta()) == ["r0", "r2", "r3"]


def _index_and_cluster_rows(spark):
    """Three documents' ``silver.dedup_index`` and ``silver.duplicate_clusters`` columns in one
    frame of two partitions (d0 kept, d1 and d2 its near duplicates)."""
    rows = [(f"d{i}", f"{i:064x}", bytes([i]) * 8, [i, i + 1], "p", "d0", 3, i == 0, "near", 1.0 - i / 10)
            for i in range(3)]
    return spark.createDataFrame(rows, "doc_id string, text_hash string, signature binary, band_hashes array<bigint>, "
                                       "params string, cluster_id string, cluster_size int, kept boolean, "
                                       "method string, jaccard double").repartition(2)


@pytest.mark.parametrize("writer", ["deltalake", "spark"])
def test_one_staging_pass_writes_each_row_to_several_tables(spark, tmp_path, writer):
    """``Staging.stage`` with several kinds (dedup stages its kept documents and their index rows
    so): each task writes every row once per table, with that table's columns, and each table
    publishes its own files. The frame must hold exactly the union of the tables' columns, and a
    column the tables type differently is an error before any job runs."""
    from pipelines.lake import ALL, Lake
    from schemas.catalog import SILVER_CLICK_VOCAB, SILVER_DEDUP_INDEX, SILVER_DUPLICATE_CLUSTERS, SILVER_FILTER_DECISIONS

    lake = Lake(spark, lake_config(tmp_path / "lake", writer=writer).lake)
    outputs = {"index": SILVER_DEDUP_INDEX, "clusters": SILVER_DUPLICATE_CLUSTERS}
    df = _index_and_cluster_rows(spark)
    with lake.staging(outputs) as staging:
        staging.stage(("index", "clusters"), df)
        assert {kind: len(files) for kind, files in staging.files.items()} == {"index": 2, "clusters": 2}
        for kind in outputs:
            staging.publish(kind, replace=ALL, operation="test")
    index = {r.doc_id: r for r in lake.read(SILVER_DEDUP_INDEX).collect()}
    clusters = {r.doc_id: r for r in lake.read(SILVER_DUPLICATE_CLUSTERS).collect()}
    assert index.keys() == clusters.keys() == {"d0", "d1", "d2"}
    assert lake.read(SILVER_DEDUP_INDEX).columns == SILVER_DEDUP_INDEX.columns
    assert (index["d1"].signature, index["d1"].band_hashes) == (bytes([1]) * 8, [1, 2])
    assert (clusters["d1"].cluster_id, clusters["d1"].kept, clusters["d0"].kept) == ("d0", False, True)

    with lake.staging(outputs) as staging:
        with pytest.raises(ValueError, match=r"missing columns \['cluster_id'\]"):
            staging.stage(("index", "clusters"), df.drop("cluster_id"))
        with pytest.raises(ValueError, match="unexpected"):
            staging.stage("index", df)
    with pytest.raises(ValueError, match="column value is string .* and double in silver.filter_decisions"):
        Lake.conform([SILVER_CLICK_VOCAB, SILVER_FILTER_DECISIONS], df)


@pytest.mark.parametrize("writer", ["deltalake", "spark"])
def test_staging_several_frames_side_by_side(spark, tmp_path, writer):
    """``Staging.stage_all`` runs each frame's job from its own driver thread, under the calling
    thread's job group, and adds each part's files as ``stage`` would. When one part's job fails,
    the other's files are still added, the first error is raised, and the end of the block removes
    every file nothing published."""
    from pyspark.sql import functions as F

    from pipelines.lake import ALL, Lake
    from pipelines.lake.commits import local_path
    from schemas.catalog import SILVER_DEDUP_INDEX, SILVER_DUPLICATE_CLUSTERS

    lake = Lake(spark, lake_config(tmp_path / "lake", writer=writer).lake)
    outputs = {"index": SILVER_DEDUP_INDEX, "clusters": SILVER_DUPLICATE_CLUSTERS}
    df = _index_and_cluster_rows(spark)
    clusters = df.select(*SILVER_DUPLICATE_CLUSTERS.columns)
    index = df.select(*SILVER_DEDUP_INDEX.columns)
    sc = spark.sparkContext
    sc.setJobGroup("stage-all", "Staging.stage_all")
    try:
        with lake.staging(outputs) as staging:
            staging.stage_all([("clusters", clusters), ("index", index)])
            assert {kind: len(files) for kind, files in staging.files.items()} == {"index": 2, "clusters": 2}
            for kind in outputs:
                staging.publish(kind, replace=ALL, operation="test")
        assert len(sc.statusTracker().getJobIdsForGroup("stage-all")) >= 2
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert {r.doc_id for r in lake.read(SILVER_DEDUP_INDEX).collect()} == {"d0", "d1", "d2"}
    assert {(r.doc_id, r.cluster_id) for r in lake.read(SILVER_DUPLICATE_CLUSTERS).collect()} == {
        ("d0", "d0"), ("d1", "d0"), ("d2", "d0")}

    failing = index.withColumn("doc_id", F.when(F.col("doc_id") == "d2", F.raise_error("a bad row"))
                               .otherwise(F.col("doc_id")))
    with lake.staging(outputs) as staging:
        with pytest.raises(Exception, match="a bad row"):
            staging.stage_all([("index", failing), ("clusters", clusters)])
        assert len(staging.files["clusters"]) == 2 and not staging.files["index"]
        left = [Path(local_path(p)) for p in staging.paths("clusters")]
        assert all(p.exists() for p in left)
    assert not any(p.exists() for p in left)
    assert {r.doc_id for r in lake.read(SILVER_DUPLICATE_CLUSTERS).collect()} == {"d0", "d1", "d2"}


def test_conform_gives_every_table_its_nullable_schema(spark):
    """``Lake.conform`` (one projection of SQL casts) types a frame of any catalog table as the
    nullable form of its schema, lists and maps included, from columns in another order; values
    of another type are cast."""
    from pyspark.sql.types import StructType

    from pipelines.lake import Lake
    from pipelines.lake.lake import nullable_schema
    from schemas.catalog import SILVER_DUPLICATE_CLUSTERS, TABLES

    for spec in TABLES.values():
        want = nullable_schema(spec)
        reordered = StructType(list(reversed(want.fields)))
        assert Lake.conform(spec, spark.createDataFrame([], reordered)).schema == want, spec.qualified_name
    as_text = spark.createDataFrame([("d1", "d0", "3", "false", "near", "0.75")],
                                    "doc_id string, cluster_id string, cluster_size string, kept string, "
                                    "method string, jaccard string")
    row = Lake.conform(SILVER_DUPLICATE_CLUSTERS, as_text).first()
    assert (row.cluster_size, row.kept, row.jaccard) == (3, False, 0.75)


@pytest.mark.parametrize("writer", WRITERS)
def test_the_driver_reads_a_tables_columns_as_arrow(spark, engine_lakes, writer):
    """``Lake.read_arrow`` and ``Lake.rows``: the same rows as Spark's read of those columns,
    whichever way the lake is kept (pyarrow over the log's files on a path lake, Spark in catalog
    mode); a table not written yet gives no rows (and read_arrow the columns asked for)."""
    from pipelines.lake import Lake, Rows
    from schemas.catalog import GOLD_TOKEN_SEQUENCES, OPS_TAKEDOWNS

    cfg, _ = engine_lakes[writer]
    lake = Lake(spark, cfg.lake)
    columns = ["pack_group", "seq_index"]
    got = lake.read_arrow(GOLD_TOKEN_SEQUENCES, columns)
    want = sorted(tuple(r) for r in lake.read(GOLD_TOKEN_SEQUENCES).select(*columns).collect())
    assert got.column_names == columns and want
    assert sorted(zip(*(got[c].to_pylist() for c in columns))) == want
    assert not lake.exists(OPS_TAKEDOWNS)
    empty = lake.read_arrow(OPS_TAKEDOWNS, ["takedown_id", "reason"])
    assert (empty.num_rows, empty.column_names) == (0, ["takedown_id", "reason"])
    assert sorted((r["pack_group"], r["seq_index"]) for r in lake.rows(GOLD_TOKEN_SEQUENCES, columns)) == want
    assert lake.rows(OPS_TAKEDOWNS, ["takedown_id"]) == []
    assert lake.rows(OPS_TAKEDOWNS, ["takedown_id"], Rows("takedown_id", ("t1",)), limit=1) == []
