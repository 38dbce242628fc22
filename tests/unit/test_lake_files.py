"""The task side of the lake (staged files) and its deltalake commits: add actions from footers,
rows retired by source or by statistics, set-transactions (no Spark here)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from pipelines.lake import commits as delta_files
from pipelines.lake.files import PartFile, TableFiles, Target, collect_staged

LONG = "s3://commoncrawl/crawl-data/CC-MAIN-2020-34/segments/x.warc.gz"   # over 32 characters
SCHEMA = pa.schema([("source_file", pa.string()), ("n", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
SCHEMA_JSON = json.dumps({"type": "struct", "fields": [
    {"name": "source_file", "type": "string", "nullable": True, "metadata": {}},
    {"name": "n", "type": "long", "nullable": True, "metadata": {}},
    {"name": "at", "type": "timestamp", "nullable": True, "metadata": {}}]})


def _write(root, name, source, ns):
    at = datetime(2026, 11, 22, 9, 26, 50, 626789, tzinfo=timezone.utc)
    f = PartFile(f"{root}/{name}", SCHEMA)
    for chunk in (ns[:2], ns[2:]):   # two row groups
        f.write(pa.RecordBatch.from_pydict({"source_file": [source] * len(chunk), "n": chunk, "at": [at] * len(chunk)},
                                           schema=SCHEMA))
    assert f.close()
    return delta_files.describe(str(root), name, {}, ["source_file", "n", "at"])


def test_statistics_from_the_footer(tmp_path):
    short = _write(tmp_path, "a.parquet", "/data/day_1", [5, None, -3, 9])
    stats = json.loads(short.stats)
    assert short.num_records == stats["numRecords"] == 4
    assert stats["minValues"] == {"source_file": "/data/day_1", "n": -3, "at": "2026-11-22T09:26:50.626Z"}
    assert stats["maxValues"] == {"source_file": "/data/day_1", "n": 9, "at": "2026-11-22T09:26:50.626Z"}
    assert stats["nullCount"] == {"source_file": 0, "n": 1, "at": 0}
    long = json.loads(_write(tmp_path, "b.parquet", LONG, [1, 2, 3]).stats)
    assert "source_file" not in long["minValues"] and long["nullCount"]["source_file"] == 0   # not stated: never skipped
    empty = PartFile(str(tmp_path / "c.parquet"), SCHEMA)
    assert not empty.close() and not (tmp_path / "c.parquet").exists()


def test_a_file_is_described_from_its_writer_as_from_its_footer(tmp_path):
    """TableFiles describe their files from what the writer wrote (size, footer), reading nothing
    back: the same add action as a description read from the file."""
    schema = pa.schema([("day", pa.int64()), ("s", pa.string()), ("n", pa.int64())])
    target = Target("t", str(tmp_path / "t"), schema, ("day",), ("s", "n"), (("row_group_bytes", 1),))
    with TableFiles({"t": target}) as files:
        for lo in (0, 3):   # two row groups per file, two partitions
            files.write("t", pa.table({"day": [1, 2, 1], "s": ["b", None, "a"], "n": [lo, lo + 1, lo + 2]}, schema=schema))
    staged = [delta_files.DataFile.from_json(d) for d in files.staged()["t"]]
    assert sorted(f.partition_values["day"] for f in staged) == ["1", "2"] and sum(f.num_records for f in staged) == 6
    for f in staged:
        assert pq.ParquetFile(tmp_path / "t" / f.path).metadata.num_row_groups == 2
        assert f == delta_files.describe(str(tmp_path / "t"), f.path, {"day": int(f.partition_values["day"])}, ["s", "n"])


def test_non_finite_floats_leave_no_bounds(tmp_path):
    """Delta statistics are JSON, which has no infinity or NaN: such a bound is left out (unknown)
    and the rest of the file's statistics stay valid JSON."""
    schema = pa.schema([("value", pa.float64()), ("threshold", pa.float64())])
    f = PartFile(str(tmp_path / "d.parquet"), schema)
    f.write(pa.table({"value": [0.5, 2.0], "threshold": [1.0, float("inf")]}, schema=schema))
    assert f.close()
    stats = json.loads(delta_files.describe(str(tmp_path), "d.parquet", {}, ["value", "threshold"]).stats)
    assert stats["minValues"] == {"value": 0.5} and stats["maxValues"] == {"value": 2.0}
    assert stats["nullCount"] == {"value": 0, "threshold": 0}


def test_small_batches_held_for_larger_row_groups(tmp_path):
    """With ``row_group_bytes`` a file's small batches are written as row groups of at least that
    many Arrow bytes (the last one whatever is left at close), every row kept in order; without
    it each batch is a row group. An aborted file leaves nothing, what it held included."""
    batches = [pa.RecordBatch.from_pydict({"source_file": ["f"] * 10, "n": list(range(i, i + 10)), "at": [None] * 10},
                                          schema=SCHEMA) for i in range(0, 100, 10)]
    per_batch, held = PartFile(str(tmp_path / "a.parquet"), SCHEMA), PartFile(
        str(tmp_path / "b.parquet"), SCHEMA, row_group_bytes=4 * batches[0].nbytes)
    for batch in batches:
        per_batch.write(batch)
        held.write(batch)
    assert per_batch.close() and held.close()
    assert pq.ParquetFile(tmp_path / "a.parquet").metadata.num_row_groups == 10
    grouped = pq.ParquetFile(tmp_path / "b.parquet")
    assert [grouped.metadata.row_group(g).num_rows for g in range(grouped.metadata.num_row_groups)] == [40, 40, 20]
    assert grouped.read().column("n").to_pylist() == list(range(100))
    aborted = PartFile(str(tmp_path / "c.parquet"), SCHEMA, row_group_bytes=1 << 30)
    aborted.write(batches[0])
    aborted.abort()
    assert not aborted.close() and not (tmp_path / "c.parquet").exists()


def test_table_files_close_together_or_abort_together(tmp_path):
    """A task's files, one per table (and partition value): conformed to each schema, closed at
    the end of the block, all aborted (no file left) when the block raises; staged descriptions
    only of files with rows, partition columns in folder names and not in the files."""
    targets = {"a": Target("t.a", str(tmp_path / "a"), pa.schema([("n", pa.int64())]), stats_columns=("n",)),
               "b": Target("t.b", str(tmp_path / "b"), pa.schema([("s", pa.string())])),
               "c": Target("t.c", str(tmp_path / "c"), pa.schema([("day", pa.int32()), ("n", pa.int64())]), ("day",))}
    with TableFiles(targets) as files:
        files.write("a", pa.table({"extra": ["x", "y"], "n": pa.array([1, 2], pa.int32())}))
        files.write("b", pa.table({"s": pa.array([], pa.string())}))
        files.write("c", pa.table({"day": pa.array([1, None, 1], pa.int32()), "n": [5, 6, 7]}))
    staged = collect_staged([{"staged": files.staged()}], ["a", "b", "c"])
    assert [f.path for f in staged["a"]] == [files.name] and staged["b"] == []
    assert json.loads(staged["a"][0].stats)["maxValues"] == {"n": 2}
    assert sorted((f.path, f.partition_values["day"], f.num_records) for f in staged["c"]) == [
        (f"day=1/{files.name}", "1", 2), (f"day=__HIVE_DEFAULT_PARTITION__/{files.name}", None, 1)]
    assert pq.read_schema(tmp_path / "c" / "day=1" / files.name).names == ["n"]

    with pytest.raises(RuntimeError):
        with TableFiles(targets, "part-failed.parquet") as failed:
            failed.write("a", pa.table({"n": [3]}))
            failed.write("b", pa.table({"s": ["z"]}))
            raise RuntimeError("task died")
    assert not any(p.name.startswith((".part-failed", "part-failed")) for kind in ("a", "b")
                   for p in (tmp_path / kind).iterdir())


def test_partition_folders_and_indexed_columns():
    assert delta_files.partition_folder({"day": 3}) == "day=3"
    assert delta_files.partition_folder({"day": None}) == "day=__HIVE_DEFAULT_PARTITION__"
    assert delta_files.partition_folder({"p": "a/b=c%", "q": True}) == "p=a%2Fb%3Dc%25/q=true"
    cols = ["a", "day", "b", "c"]
    assert delta_files.indexed_columns(cols, ["day"], {}) == ["a", "b", "c"]
    assert delta_files.indexed_columns(cols, ["day"], {"delta.dataSkippingNumIndexedCols": "2"}) == ["a", "b"]
    assert delta_files.indexed_columns(cols, ["day"], {"delta.dataSkippingNumIndexedCols": "-1"}) == ["a", "b", "c"]
    assert delta_files.indexed_columns(cols, ["day"], {"delta.dataSkippingStatsColumns": "c, `a`"}) == ["c", "a"]


def test_commit_replace_by_source_and_the_mixed_file_case(tmp_path):
    root = tmp_path / "t"
    one, two = "/data/one.warc.gz", "/data/two.warc.gz"
    first = [_write(root, delta_files.part_name(s), s, [1, 2, 3]) for s in (one, two)]
    delta_files.commit(str(root), SCHEMA_JSON, (), first, configuration={"delta.dataSkippingNumIndexedCols": "3"})
    assert delta_files.table_version(str(root)) == 0 and delta_files.table_state(str(root)).writable

    removes, rewritten = delta_files.retire_rows(str(root), "source_file", [one], None, ["n"])
    assert [r["path"] for r in removes] == [first[0].path] and rewritten == []   # by its name, unread
    again = _write(root, delta_files.part_name(one), one, [7])
    assert delta_files.commit(str(root), SCHEMA_JSON, (), [again], removes, txn=("app", 4))
    assert not delta_files.commit(str(root), SCHEMA_JSON, (), [again], txn=("app", 4))   # a replay: skipped
    table = DeltaTable(str(root))
    assert sorted(table.to_pyarrow_table().column("n").to_pylist()) == [1, 2, 3, 7]
    assert delta_files.already_committed(str(root), ("app", 4)) and not delta_files.already_committed(str(root), ("app", 5))
    assert table.version() == 1

    # a file another engine wrote (no source key in its name) holding `one` and `/data/a`: the
    # rows of `one` are retired by rewriting the file without them. Spark's timestamps are INT96
    # (UTC instants that pyarrow reads as naive nanoseconds); the rewrite keeps deltalake's type.
    mixed = "part-00000-0a1b.c000.snappy.parquet"
    at = datetime(2026, 11, 25, 12, 0, 0, 123456, tzinfo=timezone.utc)
    pq.write_table(pa.table({"source_file": ["/data/a", one], "n": [8, 9], "at": [at, None]}, schema=SCHEMA),
                   root / mixed, use_deprecated_int96_timestamps=True)
    assert pq.ParquetFile(root / mixed).schema.column(2).physical_type == "INT96"
    delta_files.commit(str(root), SCHEMA_JSON, (), [delta_files.describe(str(root), mixed, {}, ["source_file", "n"])])
    assert delta_files.retire_rows(str(root), "source_file", ["/zzz/three"], None, ["n"]) == ([], [])
    removes, rewritten = delta_files.retire_rows(str(root), "source_file", [one], None, ["n"])
    assert sorted(r["path"] for r in removes) == sorted([again.path, mixed]) and len(rewritten) == 1
    assert rewritten[0] == delta_files.describe(str(root), rewritten[0].path, {}, ["n"])   # as read back from the file
    delta_files.commit(str(root), SCHEMA_JSON, (), rewritten, removes)
    assert pq.read_schema(root / rewritten[0].path).field("at").type == pa.timestamp("us", tz="UTC")
    rows = DeltaTable(str(root)).to_pyarrow_table().to_pylist()
    assert sorted((r["source_file"], r["n"]) for r in rows) == [("/data/a", 8), (two, 1), (two, 2), (two, 3)]
    assert [r["at"] for r in rows if r["n"] == 8] == [at]
    # by key with a condition: the rows of `two` whose n is 2 (a delete)
    removes, rewritten = delta_files.retire_rows(str(root), "n", [2], None, ["n"], where={"source_file": two})
    assert len(removes) == 1 and rewritten[0].num_records == 2
    # several clauses, one read of each file: (n 1 of two) and (n 8 of /data/a), not n 2 of two
    removes, rewritten = delta_files.retire_any(str(root), "n", [([1], {"source_file": two}), ([8, 2], {"source_file": "/data/a"})],
                                                None, ["n"])
    assert len(removes) == 2 and [f.num_records for f in rewritten] == [2]   # /data/a's file goes whole
    delta_files.commit(str(root), SCHEMA_JSON, (), rewritten, removes)
    assert sorted((r["source_file"], r["n"]) for r in DeltaTable(str(root)).to_pyarrow_table().to_pylist()) == [
        (two, 2), (two, 3)]
    with pytest.raises(OSError):
        delta_files.describe(str(tmp_path), "missing.parquet", {}, ["n"])


def test_table_state_and_a_commit_that_replaces_every_file(tmp_path):
    root = str(tmp_path / "t")
    assert delta_files.table_state(root) == delta_files.TableState(True, None)   # no table yet
    assert delta_files.commit(root, SCHEMA_JSON, (), [_write(root, delta_files.part_name(s), s, [1, 2]) for s in ("a", "b")],
                              configuration={"delta.dataSkippingNumIndexedCols": "2"})
    state = delta_files.table_state(root)
    assert state.writable and state.configuration == {"delta.dataSkippingNumIndexedCols": "2"}
    assert delta_files.table_state("gs://bucket/t") == delta_files.TableState(False, None)   # not a store we commit to
    new = _write(root, delta_files.part_name("c"), "c", [5])
    assert delta_files.commit(root, SCHEMA_JSON, (), [new], remove_all=True)
    assert DeltaTable(root).to_pyarrow_table().column("n").to_pylist() == [5]
    assert delta_files.files_in(root).column("path").to_pylist() == [new.path]
    # nothing staged and nothing left to remove but that file: an overwrite with no rows empties the table
    assert delta_files.commit(root, SCHEMA_JSON, (), [], remove_all=True)
    assert DeltaTable(root).to_pyarrow_table().num_rows == 0 and DeltaTable(root).version() == 2
    assert not delta_files.commit(root, SCHEMA_JSON, (), [], remove_all=True)   # already empty: no commit


def test_a_run_loads_each_log_once_and_sees_every_later_commit(tmp_path):
    """Inside ``loaded_logs`` (a run) a table is loaded once, and each later use brings that load
    up to date: a commit made through it, or by another writer, is seen; a table created inside
    the block is found after its first commit. Outside the block every use is a fresh load."""
    from deltalake import write_deltalake

    root, later = str(tmp_path / "t"), str(tmp_path / "later")
    assert delta_files.commit(root, SCHEMA_JSON, (), [_write(root, delta_files.part_name("a"), "a", [1])])
    with delta_files.loaded_logs():
        loaded = delta_files.latest_table(root)
        assert delta_files.table_version(root) == 0
        assert delta_files.commit(root, SCHEMA_JSON, (), [_write(root, delta_files.part_name("b"), "b", [2])])
        assert delta_files.table_version(root) == 1
        other = DeltaTable(root).to_pyarrow_table().slice(0, 1)   # another writer, not through this run's load
        write_deltalake(root, other, mode="append")
        assert delta_files.table_version(root) == 2 and len(delta_files.files_in(root)) == 3
        assert delta_files.latest_table(root) is loaded
        assert delta_files.table_version(later) is None and delta_files.table_state(later).configuration is None
        assert delta_files.commit(later, SCHEMA_JSON, (), [_write(later, delta_files.part_name("c"), "c", [3])])
        assert delta_files.table_version(later) == 0
    assert delta_files.latest_table(root) is not loaded and delta_files.table_version(root) == 2


def test_writers_racing_to_create_a_table_make_one_create_and_append_after_it(tmp_path):
    """delta-rs retries a create that lost version 0 at version 1 with a second protocol and
    metadata, and a writer appending in between then fails ("Metadata changed since last commit";
    seen in CI on S3). Exactly one create wins; every other writer appends after it."""
    import subprocess
    import sys
    import time

    from conftest import DELTALAKE_COMMITTER, REPO

    for race in range(3):   # two writers per race (one per core here): the race is tight
        root = tmp_path / f"t{race}"
        start = time.time() + 2   # past both processes' imports
        procs = [subprocess.Popen([sys.executable, "-c", DELTALAKE_COMMITTER, str(root), str(w), "1", str(start)], cwd=REPO,
                                  stderr=subprocess.PIPE, text=True) for w in range(2)]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errors
        logs = sorted((root / "_delta_log").glob("*.json"))
        assert [int(p.stem) for p in logs] == [0, 1]
        assert [any("metaData" in json.loads(line) for line in p.read_text().splitlines()) for p in logs] == [True, False]
        assert sorted(DeltaTable(str(root)).to_pyarrow_table().column("n").to_pylist()) == [0, 1]
