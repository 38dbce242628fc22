"""Object storage settings without a JVM: the schemes each engine gets, the Spark settings taken
from the standard AWS variables, the log store per lake.s3_commits, crawlake-submit's command
line, a missing credential, and secrets scrubbed from what crawlake records."""

from __future__ import annotations

import sys

import pytest

from pipelines.config import REDACTED, LakeConfig, load_config
from pipelines.lake.objectstore import for_arrow, for_spark, require_credentials
from pipelines.session import S3_LOG_STORES, class_path, object_store_settings


def test_each_engine_gets_its_scheme():
    assert for_spark("s3://b/lake") == for_spark("s3a://b/lake") == for_spark("s3n://b/lake") == "s3a://b/lake"
    assert for_arrow("s3a://b/t") == for_arrow("s3://b/t") == "s3://b/t"
    assert for_spark("/data/lake") == for_arrow("/data/lake") == "/data/lake"
    assert for_spark("gs://b/x") == "gs://b/x"


def test_spark_settings_come_from_the_aws_variables_and_carry_no_credential():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1",
           "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "not-in-spark-conf"}
    out = object_store_settings(LakeConfig(root="s3a://b/lake"), env)
    assert out["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert out["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert out["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert out["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert out["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert out["spark.delta.logStore.s3a.impl"] == out["spark.delta.logStore.s3.impl"] == \
        "io.crawlake.delta.S3ConditionalPutLogStore"
    assert not any(v in ("AKIDEXAMPLE", "not-in-spark-conf") for v in out.values())
    # AWS itself: no endpoint, virtual-host style left to S3A
    assert "spark.hadoop.fs.s3a.endpoint" not in object_store_settings(LakeConfig(), {})
    single = object_store_settings(LakeConfig(s3_commits="single_driver"), {})
    assert single["spark.delta.logStore.s3a.impl"] == S3_LOG_STORES["single_driver"]


def test_jars_go_on_the_class_paths_not_spark_jars():
    out = class_path(["/x/a.jar", "/x/b.jar"])
    assert out == {"spark.driver.extraClassPath": "/x/a.jar:/x/b.jar", "spark.executor.extraClassPath": "/x/a.jar:/x/b.jar"}


def test_crawlake_submit_adds_the_class_paths_the_interpreter_and_its_daemon_unless_given():
    from pipelines.submit import command

    cmd = command(["--master", "spark://127.0.0.1:7077", "jobs/run_all.py", "--lake-root", "s3a://b/lake"])
    assert cmd[0].endswith("bin/spark-submit") and cmd[-5:] == ["--master", "spark://127.0.0.1:7077", "jobs/run_all.py",
                                                               "--lake-root", "s3a://b/lake"]
    assert "--driver-class-path" in cmd and any(a.startswith("spark.executor.extraClassPath=") for a in cmd)
    assert f"spark.pyspark.python={sys.executable}" in cmd and f"spark.pyspark.driver.python={sys.executable}" in cmd
    assert "spark.python.daemon.module=pipelines.spark_daemon" in cmd
    assert "spark.python.unix.domain.socket.enabled=true" in cmd
    assert "--jars" not in cmd
    given = command(["--conf", "spark.pyspark.python=/opt/py", "--conf", "spark.python.daemon.module=pyspark.daemon",
                     "jobs/ingest.py"])
    assert f"spark.pyspark.python={sys.executable}" not in given and "spark.pyspark.python=/opt/py" in given
    assert "spark.python.daemon.module=pipelines.spark_daemon" not in given


def test_a_missing_credential_names_what_to_set(monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ValueError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        require_credentials(["/local/in.warc.gz", "s3a://b/lake"])
    require_credentials(["/local/in.warc.gz", "lake"])   # nothing on S3: nothing asked
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    require_credentials(["s3://b/crawl/*.warc.gz"])


def test_secrets_are_redacted_and_scrubbed():
    cfg = load_config("local", ["spark.conf.spark.hadoop.fs.s3a.secret.key=PLANTED-SET-SECRET",
                                "spark.conf.spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:9"])
    conf = cfg.redacted()["spark"]["conf"]
    assert conf["spark.hadoop.fs.s3a.secret.key"] == REDACTED
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9"   # not a secret
    other = load_config("local", ["spark.conf.spark.hadoop.fs.s3a.secret.key=ANOTHER-SECRET",
                                  "spark.conf.spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:9"])
    assert other.hash() == cfg.hash()   # the hash's input holds no secret
    text = "failed: key PLANTED-SET-SECRET token ENV-TOKEN-123 at http://127.0.0.1:9"
    scrubbed = cfg.scrub(text, env={"AWS_SESSION_TOKEN": "ENV-TOKEN-123", "HOME": "/root"})
    assert "PLANTED-SET-SECRET" not in scrubbed and "ENV-TOKEN-123" not in scrubbed
    assert scrubbed.count(REDACTED) == 2 and "http://127.0.0.1:9" in scrubbed


def test_progress_off_is_off_as_typed_on_the_command_line():
    # YAML reads a bare `off` as false; `--set tracking.progress=off` is what a user types
    assert load_config("local", ["tracking.progress=off"]).tracking.progress == "off"
    with pytest.raises(Exception, match="tracking.progress"):
        load_config("local", ["tracking.progress=true"])
