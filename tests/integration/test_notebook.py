"""Runs notebooks/explore_tables.py top to bottom on local Spark against the sample lake."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from conftest import REPO as ROOT
NOTEBOOK = ROOT / "notebooks" / "explore_tables.py"
TABLES = [
    "bronze.documents", "bronze.quarantine", "silver.documents_dedup", "silver.duplicate_clusters",
    "silver.dedup_index", "silver.documents_clean", "silver.filter_decisions", "gold.token_sequences", "gold.document_tokens", "gold.embeddings", "gold.index_manifest",
    "ops.runs", "ops.quality", "ops.ingest_log",
]
STAGES = ["ingest", "dedup", "filter", "tokenize", "embed", "index"]


def _load_runner():
    # tests/ is not a package: load the sibling module by path, whatever pytest's import mode.
    name = "crawlake_tests_notebook_runner"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent.parent / "notebook_runner.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


runner = _load_runner()


# ----------------------------------------------------------------------------- no Spark needed


def test_notebook_is_databricks_source_format():
    text = NOTEBOOK.read_text()
    assert text.splitlines()[0] == "# Databricks notebook source"
    cells = runner.parse_notebook(NOTEBOOK)
    code = [c for c in cells if c.kind == "code"]
    magic = [c for c in cells if c.kind == "magic"]
    assert len(code) >= 8 and len(magic) >= 5
    assert all(c.source.lstrip().startswith("# MAGIC %md") for c in magic)
    for c in code:
        compile(c.source, f"cell {c.index}", "exec")
    assert 'dbutils.widgets.text("lake_root", "./lake")' in code[0].source
    assert 'dbutils.widgets.get("lake_root")' in code[0].source
    assert "DESCRIBE HISTORY delta.`" in text
    assert "raise AssertionError" in code[-1].source


def test_runner_on_a_tiny_notebook(tmp_path):
    nb = tmp_path / "nb.py"
    nb.write_text(
        "# Databricks notebook source\n"
        "# MAGIC %md\n# MAGIC # Title\n\n"
        "# COMMAND ----------\n\n"
        'dbutils.widgets.text("x", "default")\nx = dbutils.widgets.get("x")\n\n'
        "# COMMAND ----------\n\n"
        "# MAGIC %md\n# MAGIC this is not python\n\n"
        "# COMMAND ----------\n\n"
        "display(x * 2)\n"
    )
    run = runner.run_notebook(nb, spark=None, widgets={"x": "ab"})
    assert [c.kind for c in run.cells] == ["magic", "code", "magic", "code"]
    assert run.executed == [1, 3]
    assert [(d.cell, d.obj) for d in run.displayed] == [(3, "abab")]

    undeclared = tmp_path / "bad.py"
    undeclared.write_text('# Databricks notebook source\ndbutils.widgets.get("nope")\n')
    with pytest.raises(KeyError, match="InputWidgetNotDefined"):
        runner.run_notebook(undeclared, spark=None)
    with pytest.raises(ValueError, match="first line"):
        (tmp_path / "plain.py").write_text("print(1)\n")
        runner.parse_notebook(tmp_path / "plain.py")


# ----------------------------------------------------------------------------- on the sample lake


@pytest.mark.slow
def test_notebook_runs_on_the_sample_lake(spark, sample_lake):
    run = runner.run_notebook(NOTEBOOK, spark, widgets={"lake_root": str(sample_lake)})

    assert run.executed == [c.index for c in run.code_cells], "not every code cell ran"
    assert run.namespace["lake_root"] == str(sample_lake).rstrip("/")
    frames = [d for d in run.displayed if d.rows is not None]
    assert len(frames) >= 8, f"display() called on {len(frames)} DataFrames"
    assert len(frames) == len(run.displayed), "display() got something other than a DataFrame"
    assert all(d.rows for d in frames), [d.cell for d in frames if not d.rows]

    counts = {r["table"]: r["rows"] for r in frames[0].rows}
    assert set(counts) == set(TABLES)
    assert all(n > 0 for n in counts.values()), counts

    ledger = next(d for d in frames if "rows_quarantined" in d.rows[0].asDict())
    assert {r["stage"] for r in ledger.rows} == set(STAGES)

    emb = next(d for d in frames if "dimensions" in d.rows[0].asDict())
    for r in emb.rows:
        assert len(r["dimensions"]) == 1 and r["dimensions"][0] > 0, r
        assert r["avg_norm"] == pytest.approx(1.0, abs=1e-3), r

    history = next(d for d in frames if "operationMetrics" in d.rows[0].asDict())
    assert history.rows[-1]["version"] >= 0


@pytest.mark.slow
def test_notebook_final_cell_fails_on_an_empty_table(spark, sample_lake, tmp_path):
    lake = tmp_path / "lake"
    shutil.copytree(sample_lake, lake)
    path = str(lake / "ops" / "quality")
    df = spark.read.format("delta").load(path)
    df.limit(0).write.format("delta").mode("overwrite").save(path)
    assert spark.read.format("delta").load(path).count() == 0

    with pytest.raises(AssertionError, match=r"ops\.quality"):
        runner.run_notebook(NOTEBOOK, spark, widgets={"lake_root": str(lake)})
