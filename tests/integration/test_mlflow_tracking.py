"""MLflow tracking against a local file store: ``crawlake run --set tracking.mlflow=true`` on a copy
of the sample lake (filter and tokenize again) makes one run with a nested run per stage: the
config as params with secrets redacted, metrics, table versions as tags, Delta tables as dataset
inputs, the HTML report as an artifact."""

from __future__ import annotations

import json
import shutil

import pytest

from pipelines.cli import main

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow", reason="the crawlake[mlflow] extra (make setup installs it)")


@pytest.fixture(scope="module")
def tracked(sample_lake, tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow") / "lake"
    shutil.copytree(sample_lake, root)
    store = root.parent / "mlruns"
    # --full: filter is incremental, and every document of the copy is decided already
    code = main(["run", "--stages", "filter,tokenize", "--full", "filter", "--lake-root", str(root),
                 "--set", "tracking.mlflow=true", "--set", f"tracking.mlflow_uri={store}",
                 "--set", "spark.conf.spark.hadoop.fs.s3a.secret.key=do-not-log-me"])
    assert code == 0
    client = mlflow.MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("crawlake")
    runs = client.search_runs([experiment.experiment_id])
    return root, client, runs


def test_one_run_with_a_nested_run_per_stage(tracked):
    _, _, runs = tracked
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {"filter", "tokenize"}
    assert parent.info.status == "FINISHED" and all(c.info.status == "FINISHED" for c in children.values())
    assert parent.info.run_name == parent.data.tags["crawlake.run_id"]
    assert parent.data.tags["crawlake.stages"] == "filter,tokenize"
    assert parent.data.metrics["stages_succeeded"] == 2


def test_params_are_the_config_with_secrets_redacted(tracked):
    _, _, runs = tracked
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    params = parent.data.params
    assert params["tracking.mlflow"] == "true" and params["dedup.threshold"] == "0.8"
    assert params["filter.preset"] == "fineweb"
    assert params["spark.conf.spark.hadoop.fs.s3a.secret.key"].startswith("***")
    assert "do-not-log-me" not in json.dumps(params)


def test_stage_metrics_versions_and_datasets(tracked):
    root, client, runs = tracked
    filt = next(r for r in runs if r.info.run_name == "filter")
    m = filt.data.metrics
    assert m["rows_in"] > m["rows_out"] > 0 and m["seconds"] > 0
    assert m["funnel.input.documents"] == m["rows_in"] and m["funnel.pii.documents"] == m["rows_out"]
    tags = filt.data.tags
    assert int(tags["input_version.silver.documents_dedup"]) >= 0
    assert int(tags["output_version.silver.documents_clean"]) >= 1, "the copy's table was written again"
    datasets = {(d.dataset.name, d.dataset.source_type, next(t.value for t in d.tags if t.key == "mlflow.data.context"),
                 json.loads(d.dataset.source)["delta_table_version"], json.loads(d.dataset.source)["path"])
                for d in filt.inputs.dataset_inputs}
    assert ("silver.documents_dedup", "delta_table", "input", int(tags["input_version.silver.documents_dedup"]),
            str(root / "silver" / "documents_dedup")) in datasets
    assert any(name == "silver.documents_clean" and ctx == "output" for name, _, ctx, _, _ in datasets)


def test_the_report_is_an_artifact(tracked, tmp_path):
    _, client, runs = tracked
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert [a.path for a in client.list_artifacts(parent.info.run_id)] == ["report.html"]
    local = client.download_artifacts(parent.info.run_id, "report.html", str(tmp_path))
    page = open(local, encoding="utf-8").read()
    assert "crawlake report" in page and 'data-section="funnel"' in page
    assert parent.data.metrics["report_seconds"] > 0
