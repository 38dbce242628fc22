"""Batch ingest of click logs on local Spark: every line once, quarantine = planted bad lines, re-runs."""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import pytest
from pyspark.sql import functions as F

from pipelines.cli import main
from pipelines.clicks.generate import generate, generate_file
from pipelines.clicks.ingest import ingest_files, resolve_inputs
from pipelines.ledger import new_run_id
from pipelines.stage import QualityGateError, StageContext
from pipelines.lake import Lake
from schemas.catalog import BRONZE_CLICKS
from tests.conftest import lake_config, read_table


def _ctx(spark, root, *overrides):
    cfg = lake_config(root, *overrides)
    return StageContext(spark, cfg, Lake(spark, cfg.lake), new_run_id())


def expected_rows(made) -> set[tuple[str, int]]:
    return {(f.path, n) for f in made for n in range(1 + f.header_lines, f.lines + 1) if n not in f.bad}


def expected_bad(made) -> dict[tuple[str, int], str]:
    return {(f.path, n): reason for f in made for n, reason in f.bad.items()}


def assert_exactly(spark, root, made, extra_files=()):
    """bronze.clicks holds exactly the valid lines of ``made``, the quarantine exactly the bad ones."""
    bronze = read_table(spark, root, "bronze.clicks")
    got = [(r.source_file, r.line_number, r.row_key) for r in bronze.select("source_file", "line_number", "row_key").collect()]
    assert len({k for _, _, k in got}) == len(got), "duplicate row keys"
    assert Counter((f, n) for f, n, _ in got) == Counter(expected_rows(made)), "bronze rows differ from the files"
    quarantine = read_table(spark, root, "bronze.clicks_quarantine")
    bad = {(r.source_file, r.line_number): r.reason for r in quarantine.select("source_file", "line_number", "reason").collect()}
    assert quarantine.count() == len(bad) == len(expected_bad(made))
    assert bad == expected_bad(made)
    per_file = Counter(f for f, _, _ in got) + Counter(f for f, _ in bad)
    for f in made:  # nothing lost: rows in = rows in bronze + rows quarantined, per file
        assert per_file[f.path] + f.header_lines == f.lines


@pytest.fixture(scope="module")
def batch_lake(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("clicks_batch")
    made = generate(base / "logs", rows=1200, files=2, bad_lines=15, seed=21)
    root = base / "lake"
    result = ingest_files(_ctx(spark, root), resolve_inputs([str(base / "logs")]))
    return root, made, result


def test_batch_ingest_holds_every_line_exactly_once(spark, batch_lake):
    root, made, result = batch_lake
    assert (result.rows_in, result.rows_out, result.rows_quarantined) == (2400, 2370, 30)
    assert_exactly(spark, root, made)
    bronze = read_table(spark, root, "bronze.clicks")
    assert {r.day for r in bronze.select("day").distinct().collect()} == {0, 1}
    assert bronze.where(F.col("ingest_time").isNull()).count() == 0
    log = {r.source_file: r for r in read_table(spark, root, "ops.clicks_ingest_log").collect()}
    for f in made:
        assert (log[f.path].lines, log[f.path].rows, log[f.path].quarantined) == (f.lines, f.rows, len(f.bad))
        assert log[f.path].size_bytes == os.path.getsize(f.path)


def test_rerun_skips_and_a_changed_file_is_replaced(spark, batch_lake, tmp_path):
    root, made, _ = batch_lake
    lake = Lake(spark, lake_config(root).lake)
    before = lake.version(BRONZE_CLICKS)
    again = ingest_files(_ctx(spark, root), resolve_inputs([f.path for f in made]))
    assert again.notes["files_skipped"] == 2 and again.rows_out == 0
    assert lake.version(BRONZE_CLICKS) == before

    # a file rewritten in place with fewer lines: its rows are replaced, not added to
    changed = generate_file(made[1].path, 500, seed=99, bad_lines=4)
    os.utime(changed.path, (1_700_000_000, 1_700_000_000))
    result = ingest_files(_ctx(spark, root), resolve_inputs([f.path for f in made]))
    assert result.notes["files_skipped"] == 1 and result.rows_out == 496
    assert_exactly(spark, root, [made[0], changed])


def test_kaggle_csv_through_the_cli(spark, tmp_path):
    made = generate(tmp_path / "kaggle", rows=900, files=1, fmt="kaggle_csv", gzip=True, bad_lines=6, seed=4)
    root = tmp_path / "lake"
    code = main(["clicks", "ingest", "--input", made[0].path, "--format", "kaggle_csv", "--lake-root", str(root)])
    assert code == 0
    assert_exactly(spark, root, made)
    runs = read_table(spark, root, "ops.runs").where("stage = 'clicks_ingest'").collect()
    assert [(r.status, r.rows_in, r.rows_out, r.rows_quarantined) for r in runs] == [("succeeded", 900, 894, 6)]


def test_cli_errors_before_spark(tmp_path, capsys):
    assert main(["clicks", "ingest", "--input", str(tmp_path / "nope"), "--lake-root", str(tmp_path / "lake")]) == 2
    assert "clicks input not found" in capsys.readouterr().err
    assert main(["clicks", "ingest", "--lake-root", str(tmp_path / "lake")]) == 2
    assert "no input" in capsys.readouterr().err
    assert main(["clicks", "ingest", "--input", str(tmp_path), "--format", "parquet"]) == 2
    assert "clicks.format" in capsys.readouterr().err
    assert main(["clicks", "stream", "--landing", str(tmp_path), "--available-now", "--processing-time", "5s"]) == 2
    assert main(["clicks", "stream", "--landing", str(tmp_path / "missing"), "--available-now"]) == 2
    assert "landing folder not found" in capsys.readouterr().err
    assert not (tmp_path / "lake").exists()


def _bad_frames(spark, root):
    """(20 good bronze rows, the same with every other label 2, the 20 plus a repeated row)."""
    rows = read_table(spark, root, "bronze.clicks").limit(20)
    broken = rows.withColumn("label", F.when(F.col("line_number") % 2 == 0, F.lit(2)).otherwise(F.col("label")))
    return rows, broken, rows.unionByName(rows.limit(1))


@pytest.mark.parametrize("driver_max_rows", [0, 50_000], ids=["gx-spark-engine", "driver"])
def test_bronze_gate_rejects_bad_rows(spark, batch_lake, tmp_path, driver_max_rows):
    from pipelines import quality

    root, _, _ = batch_lake
    rows, broken, dup = _bad_frames(spark, root)
    ctx = _ctx(spark, tmp_path / "gate_lake", f"quality.driver_max_rows={driver_max_rows}")
    with pytest.raises(QualityGateError, match="label"):
        quality.audit(ctx, "clicks_ingest", BRONZE_CLICKS, broken)
    with pytest.raises(QualityGateError, match="row_key"):
        quality.audit(ctx, "clicks_ingest", BRONZE_CLICKS, dup)


def test_the_gate_gives_the_same_results_on_the_driver_and_with_the_spark_engine(spark, batch_lake):
    """quality.driver_max_rows picks where a suite runs, never what it finds: every expectation's
    success and unexpected count agree (passing, failing values, a repeated key)."""
    from pipelines import quality

    root, _, _ = batch_lake
    for df in _bad_frames(spark, root):
        on_spark = quality._validate(df, BRONZE_CLICKS, driver_max_rows=0)
        on_driver = quality._validate(df, BRONZE_CLICKS, driver_max_rows=50_000)
        assert sorted(on_driver) == sorted(on_spark)
        # at the bound: all rows on the driver; one row fewer allowed: the Spark engine
        n = df.count()
        for bound in (n, n - 1):
            assert sorted(quality._validate(df, BRONZE_CLICKS, driver_max_rows=bound)) == sorted(on_spark)
    assert not all(ok for _, _, ok, _ in on_spark)  # the last frame fails a check on both


@pytest.mark.parametrize("writer", ["spark", "deltalake"])
def test_both_writers_replace_a_changed_file_even_after_optimize(spark, tmp_path, writer):
    """Both engines hold every line once, through a re-ingest after OPTIMIZE put two sources'
    rows in one file (both land in the null-day partition here): Spark replaces them with
    ``replaceWhere``, deltalake by rewriting that file without the changed source's rows."""
    made = generate(tmp_path / "logs", rows=700, files=2, bad_lines=5, seed=8)
    root = tmp_path / "lake"
    settings = (f"lake.writer={writer}", "clicks.day_pattern=null")
    ctx = _ctx(spark, root, *settings)
    ingest_files(ctx, resolve_inputs([f.path for f in made]))
    assert ctx.lake.written["bronze.clicks"] == writer
    assert_exactly(spark, root, made)
    assert {r.day for r in read_table(spark, root, "bronze.clicks").select("day").distinct().collect()} == {None}

    spark.sql(f"OPTIMIZE delta.`{root}/bronze/clicks`")
    live = read_table(spark, root, "bronze.clicks").select(F.input_file_name().alias("f")).distinct().count()
    assert live == 1, "OPTIMIZE should have merged both sources' rows into one file"
    changed = generate_file(made[0].path, 300, seed=5, bad_lines=2)
    os.utime(changed.path, (1_700_000_000, 1_700_000_000))
    ctx = _ctx(spark, root, *settings)
    again = ingest_files(ctx, resolve_inputs([f.path for f in made]))
    assert ctx.lake.written["bronze.clicks"] == writer and again.rows_out == 298
    assert_exactly(spark, root, [changed, made[1]])
    # nothing left behind: no staging folder, and every file the tasks staged into the tables'
    # folders (part-<file key>-<uuid>) is one a Delta commit added (uncommitted ones are deleted)
    assert not (root / "_staging").exists() or not any((root / "_staging").iterdir())
    ours = re.compile(r"part-[0-9a-f]{16}-[0-9a-f]{32}\.c000\.snappy\.parquet")
    for table in ("clicks", "clicks_quarantine"):
        folder = root / "bronze" / table
        added = {json.loads(line)["add"]["path"] for log in (folder / "_delta_log").glob("*.json")
                 for line in log.read_text().splitlines() if '"add"' in line}
        written = {str(p.relative_to(folder)) for p in folder.rglob("*.parquet") if ours.fullmatch(p.name)}
        assert written <= added
        assert bool(written) == (writer == "deltalake")
