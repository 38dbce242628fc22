"""The ingest stage on local Spark: inputs, exactly-once per file, restarts, changed files."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import REPO, lake_config, read_table, real_file
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from pipelines.runner import run_pipeline
from pipelines.stages.ingest import resolve_inputs, select_files

REAL = ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz", "cc-main-2024-22-whirlwind.warc.gz",
        "cc-main-2024-22-whirlwind.warc.wet.gz", "cc-main-2024-22-whirlwind.warc.wat.gz")


def ingest_cfg(root: Path, inputs: list[str], *overrides: str):
    cfg = lake_config(root, "ingest.progress=false", *overrides)
    return cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": inputs})})


def doc_ids(spark, root: Path) -> list[str]:
    return sorted(r.doc_id for r in read_table(spark, root, "bronze.documents").select("doc_id").collect())


def test_listing_glob_folder_and_selection(tmp_path):
    crawl = tmp_path / "crawl" / "segments"
    crawl.mkdir(parents=True)
    for name in REAL[:3]:
        shutil.copy(real_file(name), crawl / name)
    listing = tmp_path / "warc.paths.gz"
    listing.write_bytes(gzip.compress(b"".join(f"segments/{n}\n".encode() for n in REAL[:3])))
    expected = sorted(str(crawl / n) for n in REAL[:3])
    assert resolve_inputs([str(listing)], paths_prefix=str(tmp_path / "crawl")) == expected
    assert resolve_inputs([str(tmp_path / "crawl" / "**" / "*.warc.gz")]) == expected
    assert resolve_inputs([str(tmp_path / "crawl")]) == expected
    with pytest.raises(FileNotFoundError, match="nope"):
        resolve_inputs([str(tmp_path / "nope*.warc.gz"), str(listing)])
    files = [f"s3://bucket/f{i:03d}.warc.gz" for i in range(200)]
    sample = select_files(files, sample_fraction=0.25, seed=7)
    assert sample == select_files(files, sample_fraction=0.25, seed=7) != select_files(files, sample_fraction=0.25, seed=8)
    assert 25 < len(sample) < 75 and select_files(files, max_files=5, sample_fraction=0.25, seed=7) == sample[:5]


def test_all_real_kinds_and_every_record_accounted_for(spark, tmp_path):
    root = tmp_path / "lake"
    (run,) = run_pipeline(ingest_cfg(root, [real_file(n) for n in REAL]), stages=("ingest",))
    docs = read_table(spark, root, "bronze.documents")
    quarantine = read_table(spark, root, "bronze.quarantine")
    notes = run.result.notes
    assert docs.count() == 16 + 134 + 1 + 1 and quarantine.count() == run.result.rows_quarantined == 127
    assert notes["skipped_by_type"] == {"dns": 38, "metadata": 279, "request": 279, "warcinfo": 5}
    assert run.result.rows_in == docs.count() + quarantine.count() + sum(notes["skipped_by_type"].values()) == 880
    assert notes["quarantined_by_reason"] == {"empty_text": 6, "non_html_payload": 121}
    log = read_table(spark, root, "ops.ingest_log")
    assert log.count() == 5 and log.filter("sha256 IS NULL").count() == 0
    assert docs.filter("warc_type = 'conversion'").count() == 1
    assert {r.crawl_id for r in docs.select("crawl_id").distinct().collect()} == {
        "CC-MAIN-2020-34", "CC-MAIN-2024-22", "archive.org-shallow"}
    # each file's documents (the WAT file has none) in one row group, all far under ROW_GROUP_BYTES,
    # not one per kernel batch
    files = DeltaTable(str(root / "bronze" / "documents")).file_uris()
    assert len(files) == 4 and {pq.ParquetFile(f).metadata.num_row_groups for f in files} == {1}


def test_changed_file_is_reingested_replacing_its_rows(spark, tmp_path, capsys):
    root, warc = tmp_path / "lake", tmp_path / "crawl.warc.gz"
    shutil.copy(real_file("ia-heritrix-2008-example.warc.gz"), warc)
    run_pipeline(ingest_cfg(root, [str(warc)], "ingest.progress=true"), stages=("ingest",))
    assert "1/1 files" in capsys.readouterr().err and len(doc_ids(spark, root)) == 134
    (again,) = run_pipeline(ingest_cfg(root, [str(warc)]), stages=("ingest",))
    assert again.result.notes["files_skipped"] == 1 and len(doc_ids(spark, root)) == 134
    (forced,) = run_pipeline(ingest_cfg(root, [str(warc)]), stages=("ingest",), full=("ingest",))
    assert (forced.result.notes["mode"], forced.result.notes["full_because"]) == ("full", "--full")
    assert forced.result.notes["files_skipped"] == 0 and forced.result.rows_out == 134   # read again, replaced
    assert len(doc_ids(spark, root)) == 134
    data = warc.read_bytes()
    warc.write_bytes(data[: len(data) // 2])            # the file changes: fewer records
    os.utime(warc, (time.time() + 10, time.time() + 10))
    run_pipeline(ingest_cfg(root, [str(warc)]), stages=("ingest",))
    from pipelines.kernels.warc import parse_warc_file

    fresh = {r["doc_id"] for r in parse_warc_file(str(warc)).rows if r["kind"] == "document"}
    assert doc_ids(spark, root) == sorted(fresh) and 0 < len(fresh) < 134
    assert read_table(spark, root, "bronze.quarantine").filter("reason = 'declared_length_mismatch'").count() == 1


def test_files_ingested_under_other_settings_are_read_again_and_later_stages_follow(spark, tmp_path):
    """A setting that shapes a file's rows (here min_text_chars) changed: ingest reads the logged
    files again (a full rebuild, in its notes), and dedup and filter, whose texts may have changed
    under the same doc_ids, rebuild in full after it; the next run is incremental again."""
    from pipelines.stages.ingest import settings_hash

    root, warc = tmp_path / "lake", real_file(REAL[0])
    stages = ("ingest", "dedup", "filter")

    def run(*overrides):
        runs = run_pipeline(ingest_cfg(root, [warc], *overrides), stages=stages)
        return {r.stage: (r.result.notes["mode"], r.result.notes["full_because"]) for r in runs}, runs[0].result

    run()
    before = doc_ids(spark, root)
    modes, ingest = run("ingest.min_text_chars=2000", "ingest.files_per_commit=3")
    assert modes == {"ingest": ("full", "ingest config changed"), "dedup": ("full", "ingest rebuilt in full"),
                     "filter": ("full", "ingest rebuilt in full")}
    assert ingest.notes["files_skipped"] == 0 and ingest.notes["quarantined_by_reason"]["empty_text"] > 0
    assert 0 < len(doc_ids(spark, root)) < len(before)
    log = read_table(spark, root, "ops.ingest_log").collect()
    assert [r.settings_hash for r in log] == [settings_hash(ingest_cfg(root, [], "ingest.min_text_chars=2000").ingest)]
    modes, ingest = run("ingest.min_text_chars=2000", "ingest.progress=true")   # not a shaping setting
    assert modes == dict.fromkeys(stages, ("incremental", None)) and ingest.notes["files_skipped"] == 1


def test_killed_run_restarted_yields_exactly_an_uninterrupted_run(spark, tmp_path):
    inputs = [real_file(n) for n in REAL if not n.startswith("ia-")]  # small files: one commit each
    reference = tmp_path / "reference"
    run_pipeline(ingest_cfg(reference, inputs), stages=("ingest",))

    root = tmp_path / "killed"
    cmd = [str(Path(sys.executable).parent / "crawlake"), "run", "--stages", "ingest", "--lake-root", str(root),
           "--set", "ingest.files_per_commit=1", "--input", *inputs]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = root / "ops" / "ingest_log"

    def committed_files() -> int:
        try:
            return DeltaTable(str(log)).to_pyarrow_table().num_rows
        except TableNotFoundError:  # not created yet, or its first commit is being written
            return 0

    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and committed_files() < 1:
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    committed = committed_files()
    assert 1 <= committed < len(inputs)

    (restart,) = run_pipeline(ingest_cfg(root, inputs), stages=("ingest",))
    assert restart.result.notes["files_skipped"] >= committed
    assert doc_ids(spark, root) == doc_ids(spark, reference)
    assert len(set(doc_ids(spark, root))) == len(doc_ids(spark, root))
    quarantine = lambda r: sorted((x.source_file, x.record_offset, x.reason) for x in read_table(spark, r, "bronze.quarantine").collect())
    assert quarantine(root) == quarantine(reference)


def test_a_reingest_after_optimize_rewrites_the_compacted_file(spark, tmp_path):
    """OPTIMIZE (by Spark) compacts the files of several sources into one; re-ingesting a changed
    file then retires its rows from that file by rewriting it without them, in the same deltalake
    commit as the new rows: the table's owner stays deltalake and no task file is left behind."""
    from pipelines.kernels.warc import parse_warc_file

    names = ("ia-heritrix-2008-example.warc.gz", "cc-main-2024-22-whirlwind.warc.gz")
    warcs = [tmp_path / n for n in names]
    for name, warc in zip(names, warcs):
        shutil.copy(real_file(name), warc)
    fresh = lambda: sorted(r["doc_id"] for w in warcs for r in parse_warc_file(str(w)).rows if r["kind"] == "document")  # noqa: E731
    root = tmp_path / "lake"
    run_pipeline(ingest_cfg(root, [str(w) for w in warcs]), stages=("ingest",))
    assert doc_ids(spark, root) == fresh()
    spark.sql(f"OPTIMIZE delta.`{root}/bronze/documents`")
    data = warcs[0].read_bytes()
    warcs[0].write_bytes(data[: len(data) // 2])
    os.utime(warcs[0], (time.time() + 10, time.time() + 10))
    (again,) = run_pipeline(ingest_cfg(root, [str(w) for w in warcs]), stages=("ingest",))
    assert doc_ids(spark, root) == fresh() and again.result.writers["bronze.documents"] == "deltalake"
    history = [json.loads(line) for log in sorted((root / "bronze" / "documents" / "_delta_log").glob("*.json"))
               for line in log.read_text().splitlines()]
    commits = [(h["commitInfo"].get("operation"), h["commitInfo"].get("engineInfo", "")) for h in history if "commitInfo" in h]
    assert commits[0][1].startswith("delta-rs") and commits[1][0] == "OPTIMIZE" and commits[-1][1].startswith("delta-rs")
    last = [h for h in history[-10:] if "add" in h or "remove" in h]
    assert any("remove" in h for h in last) and any("add" in h and len(h["add"]["path"].split("-")[1]) != 16 for h in last), \
        "the compacted file was not rewritten"
    folder = root / "bronze" / "documents"
    live = {h["add"]["path"] for h in history if "add" in h} - {h["remove"]["path"] for h in history if "remove" in h}
    on_disk = {p.name for p in folder.glob("part-*")}
    removed = {h["remove"]["path"] for h in history if "remove" in h}
    assert live <= on_disk and on_disk <= live | removed, "a staged file no commit names was left behind"
