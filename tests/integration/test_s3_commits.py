"""Delta commits on S3 are safe with several writers. Both committers create each commit file with
a conditional PUT (If-None-Match: *, lake.s3_commits=conditional_put), so of writers racing for one
version exactly one wins and the others learn it and retry at the next version or fail on a real
conflict: Spark through crawlake's log store (io.crawlake.delta.S3ConditionalPutLogStore,
FileAlreadyExistsException), deltalake through its object store (``conditional_put: etag``,
:func:`pipelines.lake.commits.storage_options`). Tested on an S3-compatible server: the log store
under racing threads, deltalake commits from racing processes, a replace by rows on S3, and two
``crawlake run``s on one s3a:// lake at once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import pytest
from conftest import DELTALAKE_COMMITTER, REPO, real_file, s3_env, use_s3

from pipelines.lake import read as lake_read
from pipelines.lake.commits import storage_options as commits_options
from schemas.catalog import BRONZE_DOCUMENTS, GOLD_INDEX_MANIFEST, OPS_INGEST_LOG, OPS_RUNS, SILVER_DOCUMENTS_DEDUP

pytestmark = pytest.mark.slow

BUCKET = "commits"
#: two disjoint sets of archives (real ones, and the built-in sample), one per concurrent run
FIRST = ("cc-main-2020-34-excerpt.warc.gz", "cc-main-2024-22-whirlwind.warc.gz")
SECOND = ("cc-main-2024-22-whirlwind.warc.wet.gz", "crawlake-sample.warc.gz")


@pytest.fixture(scope="module")
def bucket(s3_server, tmp_path_factory):
    from pipelines.sample import write_sample_warc

    s3_server.create_bucket(BUCKET)
    sample = write_sample_warc(tmp_path_factory.mktemp("commits") / "crawlake-sample.warc.gz")
    for path in (*(real_file(n) for n in FIRST + SECOND[:1]), sample):
        s3_server.upload(path, f"s3://{BUCKET}/crawl/{Path(path).name}")
    with pytest.MonkeyPatch.context() as mp:   # for the JVM-free reads below
        for key, value in s3_server.env().items():
            mp.setenv(key, value)
        yield s3_server


def test_of_writers_racing_for_one_version_exactly_one_wins(spark, bucket):
    use_s3(spark, bucket)
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    store = jvm.io.crawlake.delta.S3ConditionalPutLogStore(conf)
    path = jvm.org.apache.hadoop.fs.Path(f"s3a://{BUCKET}/race/_delta_log/00000000000000000007.json")
    outcomes: dict[int, str] = {}

    def commit(writer: int) -> None:
        actions = jvm.java.util.ArrayList()
        actions.add(json.dumps({"commitInfo": {"writer": writer}}))
        try:
            store.write(path, actions.iterator(), False, conf)
            outcomes[writer] = "won"
        except Exception as exc:   # py4j wraps the Java exception
            outcomes[writer] = exc.java_exception.getClass().getName()

    threads = [threading.Thread(target=commit, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [w for w, outcome in outcomes.items() if outcome == "won"]
    assert len(winners) == 1, outcomes
    assert set(outcomes.values()) == {"won", "java.nio.file.FileAlreadyExistsException"}, outcomes
    body = bucket.client().get_object(Bucket=BUCKET, Key="race/_delta_log/00000000000000000007.json")["Body"].read()
    assert json.loads(body) == {"commitInfo": {"writer": winners[0]}}   # the winner's commit, whole
    # overwriting (Delta does it for _last_checkpoint) stays unconditional
    actions = jvm.java.util.ArrayList()
    actions.add("{}")
    store.write(path, actions.iterator(), True, conf)


def test_the_s3_commit_mechanism_picks_the_writer(spark, bucket):
    """deltalake commits task-staged tables on S3 only where commits are conditional PUTs; with
    single_driver (a store without them) Spark commits every table, and asking for deltalake there
    is an error naming the setting."""
    from pipelines.config import LakeConfig
    from pipelines.lake import Lake

    for mode, staged in (("conditional_put", "deltalake"), ("single_driver", "spark")):
        lake = Lake(spark, LakeConfig(root=f"s3://{BUCKET}/pick", s3_commits=mode))
        assert (lake.writer(BRONZE_DOCUMENTS), lake.writer(SILVER_DOCUMENTS_DEDUP), lake.writer(GOLD_INDEX_MANIFEST)) \
            == (staged, staged, staged)
    lake = Lake(spark, LakeConfig(root=f"s3://{BUCKET}/pick", s3_commits="single_driver", writer="deltalake"))
    with pytest.raises(ValueError, match="lake.s3_commits=conditional_put"):
        lake.writer(BRONZE_DOCUMENTS)


def test_deltalake_writers_racing_on_s3_lose_no_commit(bucket):
    uri = f"s3a://{BUCKET}/deltalake_race"
    procs = [subprocess.Popen([sys.executable, "-c", DELTALAKE_COMMITTER, uri, str(100 * (w + 1)), "12"], cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for w in range(3)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    versions = _log_versions(bucket.client(), "deltalake_race/_delta_log/")
    assert versions == list(range(36))   # every process's 12 commits, one version each, no gap
    values = lake_read.read(uri, ["n"]).column("n").to_pylist()
    assert sorted(values) == [100 * (w + 1) + i for w in range(3) for i in range(12)]


def test_deltalake_replaces_rows_on_s3(bucket):
    """Replace by source on S3: a file named for one source is retired unread; a file holding two
    sources' rows (as another engine writes them) is rewritten on S3 without the replaced one's."""
    from pipelines.lake import commits

    uri = f"s3a://{BUCKET}/deltalake_replace"
    schema_json = json.dumps({"type": "struct", "fields": [
        {"name": name, "type": kind, "nullable": True, "metadata": {}} for name, kind in (("source_file", "string"), ("n", "long"))]})
    fs = bucket.client()

    def put(name: str, rows: dict) -> commits.DataFile:
        buf = pa.BufferOutputStream()
        pq.write_table(pa.table(rows, schema=pa.schema([("source_file", pa.string()), ("n", pa.int64())])), buf)
        fs.put_object(Bucket=BUCKET, Key=f"deltalake_replace/{name}", Body=buf.getvalue().to_pybytes())
        return commits.describe(uri, name, {}, ["source_file", "n"])

    one, two = "s3://crawl/one.warc.gz", "s3://crawl/two.warc.gz"
    named = put(commits.part_name(one), {"source_file": [one], "n": [1]})
    mixed = put("part-00000-mixed.c000.snappy.parquet", {"source_file": [one, two], "n": [2, 3]})
    assert commits.table_state(uri).writable and commits.commit(uri, schema_json, (), [named, mixed])
    removes, rewritten = commits.retire_rows(uri, "source_file", [one], None, ["source_file", "n"])
    assert sorted(r["path"] for r in removes) == sorted([named.path, mixed.path]) and len(rewritten) == 1
    again = put(commits.part_name(one), {"source_file": [one], "n": [7]})
    assert commits.commit(uri, schema_json, (), [again, *rewritten], removes)
    rows = lake_read.read(uri).to_pylist()
    assert sorted((r["source_file"], r["n"]) for r in rows) == [(one, 7), (two, 3)]
    assert commits.table_version(uri) == 1 and commits.files_in(uri).num_rows == 2
    assert commits.plain_snapshot(uri).num_rows == 2   # the log's counts, its S3 paths paired up


def _run(root: str, names: tuple[str, ...], log: Path, s3_server) -> subprocess.Popen:
    cmd = [str(Path(sys.executable).parent / "crawlake"), "run", "--stages", "ingest", "--lake-root", root,
           "--set", "ingest.progress=false",
           "--input", *(f"s3://{BUCKET}/crawl/{n}" for n in names)]
    with log.open("w") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=s3_env(s3_server), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _log_versions(client, prefix: str) -> list[int]:
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for o in page.get("Contents", [])]
    return sorted(int(k.rsplit("/", 1)[1].split(".")[0]) for k in keys if k.endswith(".json") and "/0" in k)


def test_two_runs_on_one_s3_lake_at_once_lose_no_commit(spark, bucket, tmp_path):
    root = f"s3a://{BUCKET}/lake"
    procs = [_run(root, names, tmp_path / f"run{i}.log", bucket) for i, names in enumerate((FIRST, SECOND))]
    codes = [p.wait(timeout=900) for p in procs]
    logs = [(tmp_path / f"run{i}.log").read_text() for i in range(2)]
    # each run ends cleanly: success, or one error line naming the conflict (never a hang or a crash)
    for code, text in zip(codes, logs):
        assert code == 0 or (code == 1 and re.search(r"error: stage ingest failed: \S+: (io\.delta\.exceptions\.\w+|"
                                                     r"Failed to commit transaction)", text)
                             and "\tat org.apache" not in text), text[-4000:]
    assert 0 in codes, logs
    for i, code in enumerate(codes):
        if code:   # the loser, run again on its own, completes
            names = (FIRST, SECOND)[i]
            rerun = _run(root, names, tmp_path / "rerun.log", bucket)
            assert rerun.wait(timeout=900) == 0, (tmp_path / "rerun.log").read_text()[-4000:]

    client = bucket.client()
    for spec in (BRONZE_DOCUMENTS, OPS_INGEST_LOG):
        prefix = f"lake/{spec.layer}/{spec.name}/_delta_log/"
        versions = _log_versions(client, prefix)
        assert versions == list(range(len(versions))), f"{spec.qualified_name}: a gap in the log: {versions}"
        for v in versions:   # every commit file whole: each line one JSON action
            body = client.get_object(Bucket=BUCKET, Key=f"{prefix}{v:020d}.json")["Body"].read().decode()
            assert all(json.loads(line) for line in body.splitlines() if line)
    # no lost commit: every file is in the ingest log once, and bronze holds exactly the documents
    # the log says each file gave, each once
    docs = lake_read.read_spec(BRONZE_DOCUMENTS, root, columns=["doc_id", "source_file"]).to_pylist()
    ids = [d["doc_id"] for d in docs]
    assert len(ids) == len(set(ids))
    files = lake_read.read_spec(OPS_INGEST_LOG, root).to_pylist()
    assert sorted(r["source_file"].rsplit("/", 1)[1] for r in files) == sorted(FIRST + SECOND)
    per_file = {}
    for d in docs:
        per_file[d["source_file"]] = per_file.get(d["source_file"], 0) + 1
    assert per_file == {r["source_file"]: r["documents"] for r in files if r["documents"]}
    # on S3 with conditional PUTs deltalake commits the tables tasks stage (files written once)
    runs = lake_read.read_spec(OPS_RUNS, root, columns=["writers"]).to_pylist()
    assert runs and all(dict(r["writers"])["bronze.documents"] == "deltalake" for r in runs), runs
    # Spark reads the same table, through the same log
    use_s3(spark, bucket)
    assert spark.read.format("delta").load(f"{root}/bronze/documents").count() == len(ids)


def test_a_table_on_s3_written_before_a_new_column_gets_it(spark, bucket):
    """A run's schema upgrade on an s3a:// lake: the columns are read from one load of the log
    (deltalake), and the missing one is added at its catalog place by Spark's ALTER TABLE."""
    from deltalake import write_deltalake

    from pipelines.config import LakeConfig
    from pipelines.lake import Lake, arrow_schema

    use_s3(spark, bucket)
    lake = Lake(spark, LakeConfig(root=f"s3a://{BUCKET}/upgrade"))
    old = pa.schema([f for f in arrow_schema(OPS_INGEST_LOG) if f.name != "duplicates"])
    uri = lake.location(OPS_INGEST_LOG)
    write_deltalake(uri, old.empty_table(), storage_options=commits_options(uri))
    assert lake.add_missing_columns(OPS_INGEST_LOG) == ["duplicates"]
    assert lake.add_missing_columns(OPS_INGEST_LOG) == []   # now complete: nothing to alter
    names = lake_read.read(uri).schema.names
    assert names == list(arrow_schema(OPS_INGEST_LOG).names)
    assert lake.add_missing_columns(OPS_RUNS) == []          # no table: left alone
    assert not lake.exists(OPS_RUNS)
