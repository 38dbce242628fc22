"""The loaders read a table on S3 by its ``s3://`` URI with nothing but the standard AWS
variables set (an S3-compatible server on 127.0.0.1: moto's, from pipelines.servers), through
pyarrow's native S3 filesystem."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import write_deltalake

from pipelines.lake.read import delta_options
from pipelines.loaders import DeltaLoader, TokenSequenceDataset


@pytest.fixture(scope="module")
def s3():
    from pipelines.servers import start_s3

    server = start_s3()
    yield server
    server.stop()


def test_token_loader_reads_an_s3_table_with_the_standard_aws_variables(s3, monkeypatch):
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    uri = f"{s3.create_bucket('loaders')}/gold/token_sequences"
    rows = pa.table({"seq_id": [f"s{i:03d}" for i in range(90)],
                     "input_ids": pa.array([[i] * 9 for i in range(90)], pa.list_(pa.int32())),
                     "num_tokens": pa.array([9] * 90, pa.int32())})
    for k in range(3):   # the writer is told explicitly; the reader only has the environment
        write_deltalake(uri, rows.slice(30 * k, 30), mode="append",
                        storage_options={"AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"})
    ds = TokenSequenceDataset(uri, batch_size=8, extra_columns=["seq_id"], seed=1)
    assert isinstance(ds.snapshot.filesystem, pafs.S3FileSystem) and ds.version == 2
    got = [s for batch in DeltaLoader(ds, num_workers=2) for s in batch["seq_id"]]
    assert sorted(got) == rows.column("seq_id").to_pylist()


def test_delta_options_allow_http_only_for_an_http_s3_endpoint(monkeypatch):
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(key, raising=False)
    assert delta_options("s3://b/t") is None
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert delta_options("s3://b/t") == {"AWS_ALLOW_HTTP": "true"}
    assert delta_options("s3://b/t", {"x": "1"}) == {"x": "1", "AWS_ALLOW_HTTP": "true"}
    assert delta_options("/local/t") is None
    assert delta_options("s3://b/t", {"aws_allow_http": "false"}) == {"aws_allow_http": "false"}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.example.org")
    assert delta_options("s3://b/t") is None


def test_cache_dir_keeps_a_remote_tables_files_locally(s3, monkeypatch, tmp_path):
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    uri = f"{s3.create_bucket('cached')}/t"
    rows = pa.table({"seq_id": [f"s{i:03d}" for i in range(40)],
                     "input_ids": pa.array([[i] * 5 for i in range(40)], pa.list_(pa.int32())),
                     "num_tokens": pa.array([5] * 40, pa.int32())})
    for k in range(2):
        write_deltalake(uri, rows.slice(20 * k, 20), mode="append", storage_options={"AWS_ALLOW_HTTP": "true"})
    ds = TokenSequenceDataset(uri, batch_size=4, extra_columns=["seq_id"], cache_dir=tmp_path / "cache")
    first = [s for b in DeltaLoader(ds, num_workers=2) for s in b["seq_id"]]
    cached = sorted(p.name for p in (tmp_path / "cache").rglob("*.parquet"))
    assert len(cached) == 2 and not list((tmp_path / "cache").rglob("*.part"))
    # the cached copies are what a second epoch reads: remove the remote files and read again
    client = s3.client()
    for obj in client.list_objects_v2(Bucket="cached", Prefix="t/")["Contents"]:
        if obj["Key"].endswith(".parquet"):
            client.delete_object(Bucket="cached", Key=obj["Key"])
    ds.set_epoch(0)
    assert [s for b in DeltaLoader(ds, num_workers=2) for s in b["seq_id"]] == first
    assert sorted(first) == rows.column("seq_id").to_pylist()
