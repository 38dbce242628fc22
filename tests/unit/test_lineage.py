"""Lineage without a JVM: the commit info every crawlake commit carries (one JSON shape, no
secrets), and ``crawlake lineage`` from a table version back to the input files, on a small lake
written with deltalake whose commits carry lineage as crawlake's do."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import report_lake as rl
from deltalake import CommitProperties, DeltaTable, write_deltalake

from pipelines import ledger
from pipelines.cli import main
from pipelines.config import load_config
from pipelines.lake import commits
from pipelines.lake import read as lake_read
from pipelines.lake.commits import LINEAGE_FIELD, Lineage
from pipelines.lineage import lineage
from schemas import catalog as c

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)


def test_one_json_shape_round_trips():
    lin = Lineage("r1", "dedup", "0123456789abcdef", {"silver.b": 3, "bronze.a": 0})
    assert json.loads(lin.to_json()) == {"run_id": "r1", "stage": "dedup", "config_hash": "0123456789abcdef",
                                         "inputs": {"bronze.a": 0, "silver.b": 3}}
    assert Lineage.from_commit_info({LINEAGE_FIELD: lin.to_json(), "operation": "MERGE"}) == lin
    for other in (None, {}, {LINEAGE_FIELD: "a note someone else wrote"}, {LINEAGE_FIELD: '{"run_id": 1}'},
                  {LINEAGE_FIELD: '["run_id"]'}):
        assert Lineage.from_commit_info(other) is None


def test_commit_lineage_is_the_ledgers_config_hash_and_holds_no_secret():
    cfg = load_config("local", ["spark.conf.spark.hadoop.fs.s3a.secret.key=PLANTED-LINEAGE-SECRET"])
    other = load_config("local", ["spark.conf.spark.hadoop.fs.s3a.secret.key=ANOTHER-SECRET"])
    lin = ledger.commit_lineage("r9", "filter", cfg, {"silver.documents_dedup": 4, "bronze.documents": None})
    assert lin.config_hash == cfg.hash() == other.hash()   # what ops.runs records; secrets left out
    assert lin.inputs == {"silver.documents_dedup": 4}     # a table not there yet is left out, as in ops.runs
    assert "PLANTED" not in lin.to_json()


def test_a_deltalake_commit_carries_its_lineage(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    schema = json.dumps({"type": "struct", "fields": [{"name": "n", "type": "long", "nullable": True, "metadata": {}}]})
    lin = Lineage("r1", "ingest", "h" * 16, {})
    for k in range(2):
        path = commits.part_name()
        pq.write_table(pa.table({"n": pa.array([k], pa.int64())}), root / path)
        commits.commit(str(root), schema, (), [commits.describe(str(root), path, {}, ["n"])],
                       lineage=lin if k == 0 else None)
    history = {h["version"]: h for h in DeltaTable(str(root)).history()}
    assert Lineage.from_commit_info(history[0]) == lin and history[0]["crawlake.operation"] == "WRITE"
    assert Lineage.from_commit_info(history[1]) is None        # no lineage given: none written
    assert lake_read.commit_lineage(str(root), 0) == lin
    assert lake_read.commit_info(str(root), 1)["operation"] == "WRITE"
    assert lake_read.commit_info(str(root), 7) is None          # no such commit
    with pytest.raises(ValueError):
        lake_read.commit_info(str(root), -1)


# -- a lake whose commits carry lineage --------------------------------------------------------

def _write(root: Path, spec: c.TableSpec, rows: list[dict], lin: Lineage, mode: str = "append") -> None:
    write_deltalake(spec.path_under(str(root)), pa.Table.from_pylist(rows, schema=spec.nullable_arrow), mode=mode,
                    commit_properties=CommitProperties(custom_metadata={LINEAGE_FIELD: lin.to_json()}))


def _log(source: str, run: str, documents: int) -> dict:
    return {"source_file": source, "size_bytes": 10, "mtime": 1.0, "sha256": "ab" * 32, "run_id": run,
            "documents": documents, "quarantined": 0, "skipped": 0, "committed_at": T0, "records": documents,
            "duplicates": 0}


def _run(run: str, stage: str, status: str, inputs: dict, outputs: dict, minutes: int) -> dict:
    return {"run_id": run, "stage": stage, "started_at": T0 + timedelta(minutes=minutes), "duration_s": 1.0,
            "status": status, "rows_in": 2, "rows_out": 2, "rows_quarantined": 0,
            "input_versions": list(inputs.items()), "output_versions": list(outputs.items()), "config_hash": "h",
            "code_version": "test"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """Run A ingests a.warc.gz; run B ingests b.warc.gz and dedups; run C's dedup commits
    silver.documents_dedup v1 and then fails (its ops.runs row names no output versions): the
    ledger alone would credit v1 to run B."""
    root = tmp_path_factory.mktemp("lineage_lake")
    a, b = "/data/a.warc.gz", "/data/b.warc.gz"
    ingest_a, ingest_b = Lineage("A", "ingest", "ha", {}), Lineage("B", "ingest", "hb", {})
    _write(root, c.BRONZE_DOCUMENTS, [{**rl._document("d00"), "source_file": a}], ingest_a)
    _write(root, c.OPS_INGEST_LOG, [_log(a, "A", 1)], ingest_a)
    _write(root, c.BRONZE_DOCUMENTS, [{**rl._document("d01"), "source_file": b}], ingest_b)
    _write(root, c.OPS_INGEST_LOG, [_log(a, "A", 1), _log(b, "B", 1)], ingest_b, mode="overwrite")
    dedup_b = Lineage("B", "dedup", "hb", {"bronze.documents": 1})
    dedup_c = Lineage("C", "dedup", "hc", {"bronze.documents": 1})
    _write(root, c.SILVER_DOCUMENTS_DEDUP, [rl._document("d00"), rl._document("d01")], dedup_b)
    _write(root, c.SILVER_DOCUMENTS_DEDUP, [rl._document("d01")], dedup_c, mode="overwrite")
    _write(root, c.SILVER_DOCUMENTS_DEDUP, [rl._document("d01")], Lineage("D", "upgrade", "hd", {}), mode="overwrite")
    _write(root, c.OPS_RUNS, [
        _run("A", "ingest", "succeeded", {}, {"bronze.documents": 0, "ops.ingest_log": 0}, 0),
        _run("B", "ingest", "succeeded", {}, {"bronze.documents": 1, "ops.ingest_log": 1}, 10),
        _run("B", "dedup", "succeeded", {"bronze.documents": 1}, {"silver.documents_dedup": 0}, 11),
        {**_run("C", "dedup", "failed", {}, {}, 20), "input_versions": None, "output_versions": None}],
        Lineage("B", "dedup", "hb", {"bronze.documents": 1}))
    return root


def test_the_commit_names_the_run_where_the_ledger_is_ambiguous(lake):
    link = lineage(lake, "silver.documents_dedup")   # v2, an upgrade's commit after C's
    assert (link.version, link.written_version, link.run_id, link.stage, link.status) == (2, 1, "C", "dedup", "failed")
    assert link.source == "commit" and link.config_hash == "hc"
    (bronze,) = link.inputs
    assert (bronze.table, bronze.version, bronze.run_id, bronze.stage) == ("bronze.documents", 1, "B", "ingest")
    assert [r["source_file"] for r in bronze.files.rows] == ["/data/a.warc.gz", "/data/b.warc.gz"]
    assert (bronze.files.log, bronze.files.version) == ("ops.ingest_log", 1)
    text = "\n".join(link.lines())
    assert text.splitlines()[0].startswith("silver.documents_dedup v2: dedup in run C (wrote v1), ")
    assert "failed" in text and "config hc" in text
    assert "    ← input files (ops.ingest_log v1): 2" in text and "      /data/b.warc.gz (1 documents" in text

    older = lineage(lake, "silver.documents_dedup", 0)
    assert (older.run_id, older.status, older.inputs[0].version) == ("B", "succeeded", 1)


def test_an_older_version_names_only_the_files_ingested_by_then(lake):
    link = lineage(lake, "bronze.documents", 0)
    assert (link.run_id, link.stage, link.files.version) == ("A", "ingest", 0)
    assert [r["source_file"] for r in link.files.rows] == ["/data/a.warc.gz"]


def test_without_lineage_in_the_commits_the_ledger_still_answers(tmp_path):
    root = rl.build(tmp_path / "lake")   # written with no lineage in its commits
    link = lineage(root, "silver.documents_clean")
    assert (link.run_id, link.source) == ("r2", "ledger") and link.files is None   # no ops.ingest_log there


def test_the_cli_prints_the_chain_to_the_files(lake, capsys):
    assert main(["lineage", "silver.documents_dedup", "--lake-root", str(lake)]) == 0
    out = capsys.readouterr().out
    assert "← bronze.documents v1: ingest in run B" in out and "/data/a.warc.gz" in out and "/data/b.warc.gz" in out


def test_a_long_file_list_is_cut_and_counted():
    from pipelines.lineage import InputFiles, Link

    link = Link("bronze.documents", 3, "R", "ingest", T0, "succeeded", 1, 1, 3,
                files=InputFiles("ops.ingest_log", 5, [{"source_file": f"/f{i:02d}"} for i in range(25)]))
    lines = link.lines(max_files=20)
    assert lines[1] == "  ← input files (ops.ingest_log v5): 25" and lines[-1] == "    … and 5 more in ops.ingest_log v5"
    assert len(lines) == 2 + 20 + 1
