"""Delta add actions from task-written Parquet files, committed with deltalake (no Spark here)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.lake import commits as delta_files

LONG = "s3://commoncrawl/crawl-data/CC-MAIN-2020-34/segments/x.warc.gz"   # over 32 characters
SCHEMA = pa.schema([("source_file", pa.string()), ("n", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
SCHEMA_JSON = json.dumps({"type": "struct", "fields": [
    {"name": "source_file", "type": "string", "nullable": True, "metadata": {}},
    {"name": "n", "type": "long", "nullable": True, "metadata": {}},
    {"name": "at", "type": "timestamp", "nullable": True, "metadata": {}}]})


def _write(root, name, source, ns):
    at = datetime(2026, 11, 22, 9, 26, 50, 626789, tzinfo=timezone.utc)
    f = delta_files.PartFile(f"{root}/{name}", SCHEMA)
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
    empty = delta_files.PartFile(str(tmp_path / "c.parquet"), SCHEMA)
    assert not empty.close() and not (tmp_path / "c.parquet").exists()


def test_non_finite_floats_leave_no_bounds(tmp_path):
    """Delta statistics are JSON, which has no infinity or NaN: such a bound is left out (unknown)
    and the rest of the file's statistics stay valid JSON."""
    schema = pa.schema([("value", pa.float64()), ("threshold", pa.float64())])
    f = delta_files.PartFile(str(tmp_path / "d.parquet"), schema)
    f.write(pa.table({"value": [0.5, 2.0], "threshold": [1.0, float("inf")]}, schema=schema))
    assert f.close()
    stats = json.loads(delta_files.describe(str(tmp_path), "d.parquet", {}, ["value", "threshold"]).stats)
    assert stats["minValues"] == {"value": 0.5} and stats["maxValues"] == {"value": 2.0}
    assert stats["nullCount"] == {"value": 0, "threshold": 0}


def test_part_files_close_together_or_abort_together(tmp_path):
    """A task's files, one per table: conformed to each schema, closed at the end of the block,
    all aborted (no file left) when the block raises; add actions only for files with rows."""
    roots = {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}
    schemas = {"a": pa.schema([("n", pa.int64())]), "b": pa.schema([("s", pa.string())])}
    with delta_files.PartFiles(roots, schemas) as files:
        files.write("a", pa.table({"extra": ["x", "y"], "n": pa.array([1, 2], pa.int32())}))
        files.write("b", pa.table({"s": pa.array([], pa.string())}))
    assert files.written == {"a": True, "b": False}
    adds = files.adds({"a": ["n"], "b": ["s"]})
    assert list(adds) == ["a"] and json.loads(json.loads(adds["a"])["stats"])["maxValues"] == {"n": 2}
    assert [p.name for p in (tmp_path / "a").iterdir()] == [files.name]

    with pytest.raises(RuntimeError):
        with delta_files.PartFiles(roots, schemas, "part-failed.parquet") as failed:
            failed.write("a", pa.table({"n": [3]}))
            failed.write("b", pa.table({"s": ["z"]}))
            raise RuntimeError("task died")
    assert not any(p.name.startswith((".part-failed", "part-failed")) for root in roots.values()
                   for p in (tmp_path / root).iterdir())


def test_uncommitted_files_are_removed_unless_their_commit_succeeded(tmp_path):
    roots = {kind: str(tmp_path / kind) for kind in ("a", "b", "c")}
    schemas = {kind: pa.schema([("n", pa.int64())]) for kind in roots}
    with delta_files.PartFiles(roots, schemas) as files:
        for kind in roots:
            files.write(kind, pa.table({"n": [1]}))
    adds = {kind: [delta_files.DataFile.from_json(j)] for kind, j in files.adds({k: ["n"] for k in roots}).items()}
    with pytest.raises(RuntimeError):
        with delta_files.Uncommitted(roots, adds) as written:
            written.committed("a")
            raise RuntimeError("the commit of b failed")  # c never got its commit
    assert [p.name for p in (tmp_path / "a").iterdir()] == [files.name]
    assert [list((tmp_path / kind).iterdir()) for kind in ("b", "c")] == [[], []]


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
    assert delta_files.table_version(str(root)) == 0 and delta_files.writable(str(root), SCHEMA_JSON)
    assert not delta_files.writable(str(root), SCHEMA_JSON.replace('"long"', '"integer"'))

    replaced = delta_files.files_of_sources(str(root), [one])
    assert [r["path"] for r in replaced] == [first[0].path]
    again = _write(root, delta_files.part_name(one), one, [7])
    assert delta_files.commit(str(root), SCHEMA_JSON, (), [again], replaced, txn=("app", 4))
    assert not delta_files.commit(str(root), SCHEMA_JSON, (), [again], txn=("app", 4))   # a replay: skipped
    table = DeltaTable(str(root))
    assert sorted(table.to_pyarrow_table().column("n").to_pylist()) == [1, 2, 3, 7]
    assert delta_files.already_committed(str(root), ("app", 4)) and not delta_files.already_committed(str(root), ("app", 5))
    assert table.version() == 1

    # a file written by another engine (no source key in its name) whose source_file range may
    # hold `one`: only a row-level rewrite can replace `one`'s rows
    foreign = _write(root, "part-00000-0a1b.c000.snappy.parquet", "/data/a", [1])
    widened = json.loads(foreign.stats)
    widened["maxValues"]["source_file"] = "/data/z"
    foreign = delta_files.DataFile(foreign.path, foreign.size_bytes, {}, 1, json.dumps(widened))
    delta_files.commit(str(root), SCHEMA_JSON, (), [foreign])
    assert delta_files.files_of_sources(str(root), [one]) is None
    assert [r["path"] for r in delta_files.files_of_sources(str(root), ["/zzz/three"])] == []


def test_replace_rows_is_skipped_for_a_committed_transaction(tmp_path):
    root = str(tmp_path / "log")
    rows = lambda n: pa.table({"source_file": ["a", "b"], "n": [n, n]})  # noqa: E731
    delta_files.replace_rows(root, rows(1), "source_file", ["a", "b"], txn=("q", 0))
    delta_files.replace_rows(root, rows(2).slice(0, 1), "source_file", ["a"], txn=("q", 1))
    delta_files.replace_rows(root, rows(3), "source_file", ["a", "b"], txn=("q", 1))   # a replay: skipped
    assert sorted(DeltaTable(root).to_pyarrow_table().to_pylist(), key=lambda r: r["source_file"]) == \
        [{"source_file": "a", "n": 2}, {"source_file": "b", "n": 1}]
    with pytest.raises(OSError):
        delta_files.describe(str(tmp_path), "missing.parquet", {}, ["n"])
