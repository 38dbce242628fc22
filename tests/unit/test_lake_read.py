"""pipelines.lake.read: JVM-free reads of Delta tables that exit cleanly (no Spark)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.fs  # noqa: F401  (pa.fs)
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from conftest import REPO
from pipelines.config import load_config
from pipelines.lake import read
from schemas.catalog import SILVER_DUPLICATE_CLUSTERS

ROWS = [
    {"x": 1, "day": 0, "flag": True, "s": "a"},
    {"x": 2, "day": 0, "flag": False, "s": "b"},
    {"x": 3, "day": 1, "flag": None, "s": "c"},
    {"x": 4, "day": None, "flag": True, "s": None},
    {"x": 5, "day": 1, "flag": False, "s": "e"},
]
SCHEMA = pa.schema([("x", pa.int64()), ("day", pa.int32()), ("flag", pa.bool_()), ("s", pa.string())])


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """A table partitioned by ``day`` (a null partition among them), in two commits."""
    uri = str(tmp_path_factory.mktemp("read") / "t")
    write_deltalake(uri, pa.Table.from_pylist(ROWS[:3], SCHEMA), partition_by=["day"])
    write_deltalake(uri, pa.Table.from_pylist(ROWS[3:], SCHEMA), partition_by=["day"], mode="append")
    return uri


def rows(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["x"])


@pytest.mark.parametrize("native", [True, False])
def test_read_filters_and_projects(table, native, monkeypatch):
    if not native:  # as for a URL only deltalake reaches: files read whole on this thread
        monkeypatch.setattr(read, "native_filesystem", lambda uri, storage_options=None: None)
    assert rows(read.read(table)) == ROWS
    assert read.read(table).schema == SCHEMA
    assert rows(read.read(table, filter=[("flag", "=", True)])) == [ROWS[0], ROWS[3]]
    assert rows(read.read(table, filter=ds.field("flag") == False)) == [ROWS[1], ROWS[4]]  # noqa: E712
    assert rows(read.read(table, ["x", "day"], ds.field("day").is_null())) == [{"x": 4, "day": None}]
    assert rows(read.read(table, ["x"], [("day", "=", 1)])) == [{"x": 3}, {"x": 5}]
    assert rows(read.read(table, ["x"], [("x", ">", 100)])) == []
    assert rows(read.read(table, version=0)) == ROWS[:3]
    # limit: that many of the matching rows, or all of them when fewer match
    assert read.read(table, limit=2).num_rows == 2 and read.read(table, limit=2).schema == SCHEMA
    assert rows(read.read(table, ["x"], [("day", "=", 1)], limit=1))[0] in ({"x": 3}, {"x": 5})
    assert rows(read.read(table, limit=10)) == ROWS


def test_a_publish_selection_reads_the_rows_it_replaces(table):
    """``Rows`` as a pyarrow expression (``Lake.rows``' lookups) selects what its SQL predicate does."""
    from pipelines.lake import Rows

    assert rows(read.read(table, ["x"], Rows("s", ("a", "c", "e")).expression())) == [{"x": 1}, {"x": 3}, {"x": 5}]
    assert rows(read.read(table, ["x"], Rows("s", ("a", "c", "e"), {"day": [1]}).expression())) == [{"x": 3}, {"x": 5}]
    assert rows(read.read(table, ["x"], Rows("x", (1, 4), {"day": [None]}).expression())) == [{"x": 4}]
    assert rows(read.read(table, ["x"], Rows("x", (1, 4), {"day": [0, None]}).expression())) == [{"x": 1}, {"x": 4}]
    assert rows(read.read(table, ["x"], Rows("x", ()).expression())) == []
    assert Rows("x", (1, 4), {"day": [0, None]}).predicate() == "(`day` IN (0) OR `day` IS NULL) AND `x` IN (1, 4)"
    # ``where``: data columns equal to values, beside the key list (the index manifest: one model's revision)
    assert rows(read.read(table, ["x"], Rows("s", ("a", "b", "e"), where={"flag": False}).expression())) == [{"x": 2}, {"x": 5}]
    assert Rows("s", ("a",), where={"flag": False, "x": 2}).predicate() == "`s` IN ('a') AND `flag` = False AND `x` = 2"


def test_keys_by_a_second_column_replace_pairs(table):
    """``Keys(column, by=...)``: the staged (key, by) pairs, as one ``Rows`` per value of ``by``
    (``silver.duplicate_clusters``' (doc_id, method)); ``AnyRows`` selects their union."""
    from pipelines.lake import AnyRows, Keys, Rows

    keys = Keys("s", by="flag")
    assert keys.columns() == ["s", "flag"]
    pairs = keys.rows(["a", "b", "e", "a"], [True, False, False, True])
    assert pairs == AnyRows((Rows("s", ("b", "e"), where={"flag": False}), Rows("s", ("a",), where={"flag": True})))
    # s = "b" with flag True and s = "a" with flag False are other pairs: not selected
    assert rows(read.read(table, ["x"], pairs.expression())) == [{"x": 1}, {"x": 2}, {"x": 5}]
    assert pairs.predicate() == "(`s` IN ('b', 'e') AND `flag` = False) OR (`s` IN ('a') AND `flag` = True)"
    # ``also``: keys whose rows go with any value of ``by``
    assert Keys("s", ("c",), by="flag").rows([], []) == AnyRows((Rows("s", ("c",)),))
    assert AnyRows(()).predicate() == "false" and rows(read.read(table, ["x"], AnyRows(()).expression())) == []
    assert Keys("s").rows(["b", "a", "b"]) == Rows("s", ("a", "b"))
    with pytest.raises(ValueError, match="one key column"):
        AnyRows((Rows("s", ("a",)), Rows("x", (1,))))


def test_files_are_skipped_by_partition_and_bounds_but_not_by_missing_bounds(table):
    dt = read.open_table(table)
    data = read.dataset(dt)
    # pyarrow's own filesystem: no Python-owned buffer is ever handed to Arrow's IO threads
    assert isinstance(data.filesystem, pa.fs.LocalFileSystem)
    assert len(list(data.get_fragments())) == 4
    assert len(list(data.get_fragments(filter=ds.field("day") == 1))) == 2
    assert len(list(data.get_fragments(filter=ds.field("x") == 4))) == 1
    # no file is skipped by a bound the log does not have (`flag`: a null in one file, and Spark
    # keeps no min/max of booleans at all)
    assert len(list(data.get_fragments(filter=ds.field("flag") == False))) == 4  # noqa: E712
    files = read.data_files(dt)
    assert files.native and sorted(map(str, files.partition_values), key=str) == sorted(
        map(str, [{"day": 0}, {"day": 1}, {"day": None}, {"day": 1}]), key=str)
    assert all(Path(p).is_file() for p in files.paths) and sum(files.sizes) == sum(Path(p).stat().st_size for p in files.paths)


def test_table_uri_and_catalog_mode(tmp_path):
    cfg = load_config("local", [f"lake.root={tmp_path}"])
    assert read.table_uri(SILVER_DUPLICATE_CLUSTERS, cfg) == f"{tmp_path}/silver/duplicate_clusters"
    assert read.table_uri(SILVER_DUPLICATE_CLUSTERS, cfg.lake) == read.table_uri(SILVER_DUPLICATE_CLUSTERS, str(tmp_path))
    assert read.read_spec(SILVER_DUPLICATE_CLUSTERS, cfg) is None and read.read_rows(SILVER_DUPLICATE_CLUSTERS, cfg) == []
    catalog = load_config("local", ["lake.mode=catalog", "lake.catalog=main", "lake.schema=crawl"])
    with pytest.raises(ValueError, match="lake.mode=catalog.*main.crawl.<layer>_<name>.*only Spark"):
        read.table_uri(SILVER_DUPLICATE_CLUSTERS, catalog)
    assert read.under_root("/lake", "_index/m/r/shard-0.faiss") == "/lake/_index/m/r/shard-0.faiss"
    assert read.under_root("/lake", "s3://b/x") == "s3://b/x" and read.under_root("/lake", "/abs/x") == "/abs/x"


def test_single_files_native_and_fsspec(tmp_path):
    t = pa.table({"doc_id": ["a", "b"], "chunk_id": [0, 1]})
    pq.write_table(t, tmp_path / "ids.parquet")
    assert read.read_parquet(str(tmp_path / "ids.parquet")) == t
    assert read.read_bytes(f"file://{tmp_path}/ids.parquet") == (tmp_path / "ids.parquet").read_bytes()
    with fsspec.open("memory://clean-exit/ids.parquet", "wb") as f:   # no pyarrow filesystem for memory://
        pq.write_table(t, f)
    assert read.native_filesystem("memory://clean-exit/ids.parquet") is None
    assert read.read_parquet("memory://clean-exit/ids.parquet", ["doc_id"]) == t.select(["doc_id"])


def test_importable_without_pyspark():
    code = textwrap.dedent("""
        import sys
        sys.modules["pyspark"] = None  # any import of pyspark now raises ImportError
        import pipelines.lake.read, pipelines.search, pipelines.explain
        assert not any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules if sys.modules[m] is not None)
        assert not any(m.startswith("pipelines.stages.") for m in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


FIVE_TABLES = textwrap.dedent("""
    import sys
    from pipelines.lake import read
    for uri in sys.argv[1:]:
        print(read.read(uri).num_rows, read.read(uri, filter=[("x", ">", 2)]).num_rows)
""")


def test_a_script_reading_tables_exits_zero(table, tmp_path):
    """Five tables read in a fresh process, five times: exit 0 each time (the same script with
    deltalake's own ``to_pyarrow_table`` aborted at exit 3 runs of 20 on these tables, 8 of 8 on
    the sample pipeline's lake; tests/integration/test_clean_exit.py runs the commands 20 times)."""
    uris = [table]
    for i in range(4):
        uri = str(tmp_path / f"t{i}")
        write_deltalake(uri, pa.Table.from_pylist(ROWS, SCHEMA), partition_by=["day"])
        uris.append(uri)
    for _ in range(5):
        proc = subprocess.run([sys.executable, "-c", FIVE_TABLES, *uris], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.split() == ["5", "3"] * 5


def test_changes_between_reads_the_version_diff(tmp_path):
    """Appends remove nothing; a delete and an overwrite remove rows; a compaction (dataChange
    false) does not, and is a rewrite; a commit file cleaned up from the log means it cannot tell
    (both kinds)."""
    from deltalake import DeltaTable

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.Table.from_pylist(ROWS[:2], SCHEMA))                    # v0
    write_deltalake(uri, pa.Table.from_pylist(ROWS[2:4], SCHEMA), mode="append")    # v1
    write_deltalake(uri, pa.Table.from_pylist(ROWS[4:], SCHEMA), mode="append")     # v2
    assert "removed" not in read.changes_between(uri, 0, 2)
    DeltaTable(uri).optimize.compact()                                              # v3
    assert DeltaTable(uri).version() == 3
    assert "removed" not in read.changes_between(uri, 0, 3)
    # what changed besides appends: nothing, then a compaction's rewrite
    assert read.changes_between(uri, 0, 2) == frozenset()
    assert read.changes_between(uri, 0, 3) == read.changes_between(uri, 2, 3) == {"rewritten"}
    DeltaTable(uri).delete("x = 5")                                                 # v4
    assert "removed" in read.changes_between(uri, 0, 4) and "removed" in read.changes_between(uri, 3, 4)
    assert "removed" not in read.changes_between(uri, 4, 4)
    write_deltalake(uri, pa.Table.from_pylist(ROWS[:1], SCHEMA), mode="overwrite")  # v5
    assert "removed" in read.changes_between(uri, 4, 5)
    assert read.changes_between(uri, 3, 5) == {"removed"} and read.changes_between(uri, 2, 5) == {"removed", "rewritten"}
    (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").unlink()
    assert "removed" in read.changes_between(uri, 0, 2)
    assert read.changes_between(uri, 0, 2) == read.UNKNOWN_CHANGES == {"removed", "rewritten"}


def test_plain_snapshot_lists_the_live_files_of_plain_tables_only(table, tmp_path):
    """A Parquet read of the listed files gives the table's rows, as many as the log's counts
    say: files a later commit removed are not listed; a partitioned table (its values are in the
    log) gets None."""
    from pipelines.lake.commits import plain_snapshot

    assert plain_snapshot(str(tmp_path / "none")) is None
    assert plain_snapshot(table) is None   # partitioned by day
    uri = str(tmp_path / "plain")
    flat = pa.Table.from_pylist(ROWS, SCHEMA)
    write_deltalake(uri, flat.slice(0, 2))
    write_deltalake(uri, flat.slice(2), mode="append")
    write_deltalake(uri, flat.slice(4), mode="overwrite")
    schema_json, files, num_rows = plain_snapshot(uri)
    assert [f["name"] for f in json.loads(schema_json)["fields"]] == SCHEMA.names
    assert pa.concat_tables(pq.read_table(f) for f in files).to_pylist() == ROWS[4:]
    assert num_rows == len(ROWS[4:])


def test_plain_snapshot_added_since_lists_the_files_a_version_did_not_hold(tmp_path):
    """``added_since``: the rows committed after that version, plus the other rows of a file
    rewritten since (a superset); every file when the log can no longer give that version."""
    from deltalake import DeltaTable

    from pipelines.lake.commits import plain_snapshot

    def rows(snapshot):
        got = sorted(r["x"] for f in snapshot.files for r in pq.read_table(f).to_pylist())
        assert snapshot.num_rows == len(got)   # the log's counts agree with the files
        return got

    uri = str(tmp_path / "plain")
    flat = pa.Table.from_pylist(ROWS, SCHEMA)
    write_deltalake(uri, flat.slice(0, 2))            # v0: 1, 2
    write_deltalake(uri, flat.slice(2, 2), mode="append")   # v1: 3, 4
    write_deltalake(uri, flat.slice(4), mode="append")      # v2: 5
    assert rows(plain_snapshot(uri, 0)) == [3, 4, 5]
    assert rows(plain_snapshot(uri, 1)) == [5]
    assert plain_snapshot(uri, 2)[1:] == ([], 0)
    assert rows(plain_snapshot(uri, 7)) == [1, 2, 3, 4, 5]   # not in the log: all
    DeltaTable(uri).delete("x = 3")                   # v3 rewrites v1's file without 3
    assert rows(plain_snapshot(uri, 2)) == [4]     # 4 was not added, but its file was rewritten
    DeltaTable(uri).create_checkpoint()
    (Path(uri) / "_delta_log" / f"{0:020d}.json").unlink()
    for version in (0, 1):   # the checkpoint is v3's: v0 and v1 cannot be rebuilt, so every file
        assert rows(plain_snapshot(uri, version)) == [1, 2, 4, 5]
    assert rows(plain_snapshot(uri, 3)) == []
