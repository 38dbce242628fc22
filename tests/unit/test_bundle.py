"""Offline checks of the Databricks Asset Bundle (databricks.yml).

No network and no databricks CLI: the YAML is loaded with PyYAML (anchors resolved) and the job
definitions are checked against the Jobs API models of databricks-sdk (a lossless round trip, so a
misspelt field, which the SDK would silently drop, fails) and, when installed, against the strict
typed bundle models of databricks-bundles (unknown fields and bad enum values raise).
"""

from __future__ import annotations

import copy
import re
import tomllib
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest
import yaml
from databricks.sdk.service.jobs import JobSettings

from conftest import REPO as ROOT
BUNDLE_FILE = ROOT / "databricks.yml"
from pipelines.stages import CLICKS, PIPELINE, TOOLS   # the one list of stages the bundle follows

STAGES = [s.name for s in PIPELINE]
STAGE_JOBS = {f"crawlake_{s}": s for s in STAGES}
PIPELINE_JOB = "crawlake_pipeline"
# Click-log jobs: job -> its tasks in order, each running jobs/<task_key>.py.
CLICK_JOBS = {"crawlake_clicks_stream": ["stream_clicks"], "crawlake_clicks": [s.name for s in CLICKS]}
GPU_STAGES = {"embed"}
# Keys a bundle job accepts that are not part of the Jobs API JobSettings.
BUNDLE_ONLY_JOB_KEYS = {"permissions"}
REF = re.compile(r"\$\{([^}]+)\}")


@pytest.fixture(scope="module")
def bundle() -> dict:
    with BUNDLE_FILE.open() as f:
        data = yaml.safe_load(f)
    assert isinstance(data, dict), "databricks.yml is not a mapping"
    return data


@pytest.fixture(scope="module")
def jobs(bundle) -> dict:
    jobs = bundle.get("resources", {}).get("jobs")
    assert isinstance(jobs, dict) and jobs, "no resources.jobs in databricks.yml"
    return jobs


# ----------------------------------------------------------------------------- helpers


def _deep_merge(base, override):
    """Target overrides on top of the top-level config (mappings merge, other values replace)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = _deep_merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(override)


def _target_jobs(bundle: dict, target: str) -> dict:
    base = copy.deepcopy(bundle["resources"]["jobs"])
    override = (bundle["targets"][target] or {}).get("resources", {}).get("jobs", {})
    return _deep_merge(base, override)


def _refs(node):
    """Every ${...} reference anywhere in a YAML tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _refs(k)
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)
    elif isinstance(node, str):
        yield from REF.findall(node)


def _resolve_defaults(value: str, bundle: dict) -> str:
    """Substitute ${var.X} with the variable's default (enough to inspect cluster specs)."""
    variables = bundle["variables"]
    return REF.sub(
        lambda m: str(variables[m.group(1)[4:]]["default"]) if m.group(1).startswith("var.") else m.group(0),
        value,
    )


def _cluster(job: dict, key: str) -> dict:
    matches = [c for c in job.get("job_clusters", []) if c.get("job_cluster_key") == key]
    assert len(matches) == 1, f"job_cluster_key {key!r} declared {len(matches)} times"
    return matches[0]["new_cluster"]


def _stage_of(task: dict) -> str:
    return Path(task["spark_python_task"]["python_file"]).stem


def _params(task: dict) -> list[str]:
    return task["spark_python_task"].get("parameters", [])


def _flag(params: list[str], flag: str) -> list[str]:
    return [params[i + 1] for i, p in enumerate(params[:-1]) if p == flag]


def _all_tasks(jobs: dict):
    for job_name, job in jobs.items():
        for task in job.get("tasks", []):
            yield job_name, job, task


# ----------------------------------------------------------------------------- top level


def test_bundle_name_and_wheel_artifact(bundle):
    assert bundle["bundle"]["name"] == "crawlake"
    artifacts = bundle.get("artifacts") or {}
    wheels = [a for a in artifacts.values() if a.get("type") == "whl"]
    assert len(wheels) == 1, f"expected one whl artifact, got {artifacts}"
    art = wheels[0]
    assert (ROOT / art.get("path", ".")).resolve() == ROOT, "the wheel is built from the repo root"
    pyproject = ROOT / "pyproject.toml"
    assert pyproject.is_file(), "no pyproject.toml to build the wheel from"
    assert tomllib.loads(pyproject.read_text())["project"]["name"] == "crawlake"
    build = art.get("build", "")
    assert "wheel" in build and ("build" in build or "pip" in build), build
    # the tasks' library glob must point at where that build leaves the wheel
    out_dir = "dist"
    m = re.search(r"(?:--wheel-dir|-w|--outdir|-o)[ =](\S+)", build)
    if m:
        out_dir = m.group(1)
    assert out_dir.strip("./") == "dist", build


def test_job_set_is_the_pipeline_plus_one_job_per_stage_plus_the_click_jobs(jobs):
    assert set(jobs) == {PIPELINE_JOB, *STAGE_JOBS, *CLICK_JOBS}
    stage_jobs = {name for name in jobs if name != PIPELINE_JOB and name not in CLICK_JOBS}
    assert {STAGE_JOBS[n] for n in stage_jobs} == set(STAGES)
    for name, job in jobs.items():
        assert job.get("name") == name, f"{name}: job name {job.get('name')!r}"


# ----------------------------------------------------------------------------- schema


@pytest.mark.parametrize("target", [None, "dev", "prod"])
def test_jobs_round_trip_through_sdk_job_settings(bundle, target):
    """Every job is a valid JobSettings: nothing is dropped on from_dict -> as_dict."""
    jobs = bundle["resources"]["jobs"] if target is None else _target_jobs(bundle, target)
    for name, job in jobs.items():
        api_part = {k: v for k, v in job.items() if k not in BUNDLE_ONLY_JOB_KEYS}
        settings = JobSettings.from_dict(copy.deepcopy(api_part))
        assert settings.tasks and len(settings.tasks) == len(job["tasks"]), name
        assert [t.task_key for t in settings.tasks] == [t["task_key"] for t in job["tasks"]]
        assert settings.as_dict() == api_part, f"{name}: fields lost or changed by JobSettings (misspelt key?)"


@pytest.mark.parametrize("target", [None, "dev", "prod"])
def test_jobs_validate_against_typed_bundle_models(bundle, target):
    bundles_jobs = pytest.importorskip("databricks.bundles.jobs")
    jobs = bundle["resources"]["jobs"] if target is None else _target_jobs(bundle, target)
    for name, job in jobs.items():
        model = bundles_jobs.Job.from_dict(copy.deepcopy(job))  # raises on unknown fields / bad enums
        assert len(model.tasks) == len(job["tasks"]), name
        assert model.as_dict() == job, f"{name}: changed by the bundle Job model"


# ----------------------------------------------------------------------------- tasks and files


def test_every_python_file_exists(jobs):
    for job_name, _, task in _all_tasks(jobs):
        spt = task.get("spark_python_task")
        assert spt, f"{job_name}/{task['task_key']} is not a spark_python_task"
        rel = spt["python_file"]
        assert not rel.startswith("/") and "${" not in rel, rel
        assert (ROOT / rel).is_file(), f"{job_name}/{task['task_key']}: {rel} does not exist"


def test_every_stage_has_its_job_entry_and_jobs_has_no_other():
    """jobs/<name>.py for each stage of the list (and the whole pipeline, the stream), nothing else."""
    entries = {p.stem for p in (ROOT / "jobs").glob("*.py") if not p.stem.startswith("_")}
    assert entries == {s.name for s in (*PIPELINE, *CLICKS, *TOOLS)} | {"run_all", "stream_clicks"}


def test_each_stage_job_runs_its_stage(jobs):
    for job_name, stage in STAGE_JOBS.items():
        tasks = jobs[job_name]["tasks"]
        assert len(tasks) == 1, job_name
        assert tasks[0]["task_key"] == stage
        assert Path(tasks[0]["spark_python_task"]["python_file"]) == Path("jobs") / f"{stage}.py"


def test_task_parameters_and_wheel(bundle, jobs):
    conf_keys = yaml.safe_load((ROOT / "conf" / "base.yaml").read_text())
    assert (ROOT / "conf" / "databricks.yaml").is_file()
    for job_name, _, task in _all_tasks(jobs):
        where = f"{job_name}/{task['task_key']}"
        params = _params(task)
        assert all(isinstance(p, str) for p in params), f"{where}: parameters must be strings"
        assert _flag(params, "--env") == ["databricks"], where
        assert _flag(params, "--conf-dir") == ["${workspace.file_path}/conf"], where
        assert _flag(params, "--lake-root") == ["${var.lake_root}"], where
        if _stage_of(task) == "ingest":
            assert _flag(params, "--input") == ["${var.input_glob}"], where
        elif _stage_of(task) == "clicks_ingest":
            assert _flag(params, "--input") == ["${var.clicks_input_glob}"], where
        else:
            assert "--input" not in params, where
        if _stage_of(task) == "stream_clicks":
            assert _flag(params, "--landing") == ["${var.clicks_landing}"], where
        else:
            assert "--landing" not in params, where
        # --set overrides must name keys that exist in conf/base.yaml (unknown keys are errors)
        for kv in _flag(params, "--set"):
            key, _, _ = kv.partition("=")
            node = conf_keys
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"{where}: --set {key} not in conf/base.yaml"
                node = node[part]
        assert {"whl": "./dist/*.whl"} in task.get("libraries", []), f"{where}: wheel not attached"


def test_click_jobs_run_their_entries_in_order(jobs):
    for job_name, task_keys in CLICK_JOBS.items():
        tasks = jobs[job_name]["tasks"]
        assert [t["task_key"] for t in tasks] == task_keys, job_name
        for i, task in enumerate(tasks):
            assert Path(task["spark_python_task"]["python_file"]) == Path("jobs") / f"{task['task_key']}.py"
            assert [d["task_key"] for d in task.get("depends_on", [])] == task_keys[i - 1:i], task["task_key"]
    stream = jobs["crawlake_clicks_stream"]
    (task,) = stream["tasks"]
    trigger = _flag(_params(task), "--processing-time")
    assert len(trigger) == 1 and "--available-now" not in _params(task), "the stream job runs continuously"
    assert stream.get("max_concurrent_runs") == 1, "two queries on one checkpoint must never run at once"


# ----------------------------------------------------------------------------- pipeline graph


def test_pipeline_is_the_stage_chain(jobs):
    tasks = jobs[PIPELINE_JOB]["tasks"]
    keys = [t["task_key"] for t in tasks]
    assert sorted(keys) == sorted(STAGES) and len(set(keys)) == len(keys), keys
    deps = {t["task_key"]: [d["task_key"] for d in t.get("depends_on", [])] for t in tasks}
    for key, ds in deps.items():
        for d in ds:
            assert d in deps, f"{key} depends on unknown task {d}"
    try:
        order = list(TopologicalSorter(deps).static_order())
    except CycleError as exc:  # pragma: no cover - the assertion message is the point
        pytest.fail(f"task graph has a cycle: {exc}")
    assert order == STAGES
    expected = {s: ([STAGES[i - 1]] if i else []) for i, s in enumerate(STAGES)}
    assert deps == expected
    for t in tasks:
        assert _stage_of(t) == t["task_key"], f"task {t['task_key']} runs {t['spark_python_task']['python_file']}"


def test_job_cluster_keys_are_declared(jobs):
    for job_name, job in jobs.items():
        declared = [c["job_cluster_key"] for c in job.get("job_clusters", [])]
        assert len(declared) == len(set(declared)), f"{job_name}: duplicate job_cluster_key"
        used = set()
        for task in job["tasks"]:
            key = task.get("job_cluster_key")
            assert key, f"{job_name}/{task['task_key']}: no job_cluster_key"
            assert key in declared, f"{job_name}/{task['task_key']}: job_cluster_key {key!r} not declared"
            used.add(key)
        assert used == set(declared), f"{job_name}: unused job clusters {set(declared) - used}"


def _is_gpu_cluster(spec: dict, bundle: dict) -> bool:
    conf = spec.get("spark_conf", {})
    return (
        conf.get("spark.task.resource.gpu.amount") == "1"
        and conf.get("spark.executor.resource.gpu.amount") == "1"
        and "gpu" in _resolve_defaults(spec["spark_version"], bundle)
    )


def test_embed_runs_on_the_gpu_cluster_and_nothing_else_does(bundle, jobs):
    seen_embed = 0
    for job_name, job, task in _all_tasks(jobs):
        spec = _cluster(job, task["job_cluster_key"])
        gpu = _is_gpu_cluster(spec, bundle)
        if _stage_of(task) in GPU_STAGES:
            seen_embed += 1
            assert gpu, f"{job_name}/{task['task_key']} does not run on a GPU cluster: {spec}"
            assert spec["node_type_id"] == "${var.gpu_node_type_id}"
        else:
            assert not gpu, f"{job_name}/{task['task_key']} runs on the GPU cluster"
            assert spec["node_type_id"] == "${var.node_type_id}"
            assert spec["spark_version"] == "${var.spark_version}"
    assert seen_embed == 2  # the pipeline's embed task and crawlake_embed


def test_stage_jobs_use_the_pipelines_clusters(jobs):
    pipeline = jobs[PIPELINE_JOB]
    for task in pipeline["tasks"]:
        stage_job = jobs[f"crawlake_{task['task_key']}"]
        (stage_task,) = stage_job["tasks"]
        assert _cluster(stage_job, stage_task["job_cluster_key"]) == _cluster(pipeline, task["job_cluster_key"])
        assert _params(stage_task) == _params(task)


# ----------------------------------------------------------------------------- targets and variables


def test_targets(bundle):
    targets = bundle.get("targets") or {}
    assert {"dev", "prod"} <= set(targets)
    defaults = [name for name, t in targets.items() if (t or {}).get("default") is True]
    assert defaults == ["dev"]
    assert targets["dev"]["mode"] == "development"
    prod = targets["prod"]
    assert prod["mode"] == "production"
    prod_lake = prod.get("variables", {}).get("lake_root")
    assert prod_lake and prod_lake != bundle["variables"]["lake_root"]["default"]
    run_as = prod.get("run_as") or {}
    assert run_as.get("service_principal_name") or run_as.get("user_name"), "prod needs run_as"
    assert any(p.get("level") == "CAN_MANAGE" for p in prod.get("permissions", []))
    schedule = _target_jobs(bundle, "prod")[PIPELINE_JOB].get("schedule")
    assert schedule and schedule["pause_status"] == "PAUSED", schedule


def test_every_variable_reference_is_declared(bundle):
    declared = set(bundle.get("variables") or {})
    for name, spec in (bundle.get("variables") or {}).items():
        assert isinstance(spec, dict) and "default" in spec, f"variable {name} has no default"
    refs = set(_refs(bundle))
    used = {r[len("var."):] for r in refs if r.startswith("var.")}
    assert used, "no ${var.*} references found"
    assert used <= declared, f"undeclared variables: {sorted(used - declared)}"
    assert declared <= used, f"declared but unused variables: {sorted(declared - used)}"
    required = {"lake_root", "catalog", "schema", "input_glob", "node_type_id", "gpu_node_type_id", "spark_version"}
    assert required <= declared
    for ref in refs:
        assert ref.split(".")[0] in {"var", "workspace", "bundle", "resources"}, f"unknown reference ${{{ref}}}"
    for tname, target in bundle["targets"].items():
        overrides = set((target or {}).get("variables") or {})
        assert overrides <= declared, f"target {tname} sets undeclared variables {overrides - declared}"
