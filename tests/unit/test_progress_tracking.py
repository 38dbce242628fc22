"""Progress display choices, the run summary's notes as tables, and what MLflow is given (no JVM)."""

from __future__ import annotations

import io

from rich.console import Console

from pipelines.config import REDACTED, load_config
from pipelines.progress import Snapshot, notes_tables, progress_mode
from pipelines.tracking import config_params, flatten, note_metrics, tracking_uri

FILTER_NOTES = {
    "preset": "fineweb", "steps": ["http_status", "language", "gopher_quality"],
    "funnel": [{"step": "input", "documents": 101, "words": 184949}, {"step": "language", "documents": 87, "words": 183384}],
    "languages": {"en": {"documents": 84, "kept": 32}, "zh": {"documents": 11, "kept": 0}},
    "failed_by_filter": {"gopher_min_doc_words": 10, "language": 9}, "pii_replaced": {"pii_emails": 13},
}


def _text(parts, width=100) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    for part in parts:
        console.print(part)
    return out.getvalue()


def test_filter_notes_print_as_small_tables_not_dicts():
    text = _text(notes_tables("filter", FILTER_NOTES))
    assert "{" not in text and "[" not in text, text
    for title in ("filter: funnel", "filter: languages", "filter: failed by filter", "filter: pii replaced"):
        assert title in text
    assert "184,949" in text and "gopher_min_doc_words" in text
    assert "http_status, language, gopher_quality" in text   # a list of names is one cell
    header = next(line for line in text.splitlines() if "filter" in line and "failed" in line and "┃" in line)
    assert header.split("┃")[1].strip() == "filter", "a mapping's key column is named after its 'by_' part"


def test_many_scalar_notes_turn_into_a_note_value_table_when_too_wide():
    notes = {"mode": "full", "new_documents": 152, "signatures_computed": 103, "bands_x_rows": "9x12",
             "verified": False, "exact_removed": 49, "near_removed": 2}
    wide = _text(notes_tables("dedup", notes, width=200), 200)
    assert "exact removed" in wide.splitlines()[2] and len([ln for ln in wide.splitlines() if "│" in ln]) == 1
    narrow = _text(notes_tables("dedup", notes, width=60), 60)
    assert any(ln.split("│")[1].strip() == "exact removed" and ln.split("│")[2].strip() == "49"
               for ln in narrow.splitlines() if ln.count("│") == 3)


def test_progress_mode():
    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    assert progress_mode("auto", Stream(True), {}) == "bar"
    assert progress_mode("auto", Stream(False), {}) == "lines"
    assert progress_mode("auto", Stream(True), {"CI": "true"}) == "lines"
    assert progress_mode("auto", Stream(True), {"CI": "0"}) == "bar"
    assert progress_mode("off", Stream(True), {}) == "off"
    assert progress_mode("bar", Stream(False), {"CI": "1"}) == "bar"


def test_snapshot_line():
    snap = Snapshot(jobs=3, tasks_done=12, tasks_total=40, rows=35210, elapsed_s=8.5)
    assert snap.line("filter") == "  filter: 12/40 tasks (3 jobs), 35,210 rows, 4,142 rows/s, 8.5 s"
    assert Snapshot(rows=None, elapsed_s=2).line("embed") == "  embed: 0/0 tasks (0 jobs), 2.0 s"


def test_note_metrics_flatten_numbers_and_name_funnel_rows_by_step():
    metrics = note_metrics({**FILTER_NOTES, "verified": True, "mode": "full"})
    assert metrics["funnel.language.documents"] == 87 and metrics["funnel.input.words"] == 184949
    assert metrics["languages.en.kept"] == 32 and metrics["failed_by_filter.language"] == 9
    assert "verified" not in metrics and "mode" not in metrics and "preset" not in metrics


def test_config_params_are_flat_strings_with_secrets_redacted():
    cfg = load_config("local", ["spark.conf.spark.hadoop.fs.s3a.secret.key=abc123",
                                "spark.conf.spark.hadoop.fs.s3a.access.key=AKIAXYZ"])
    params = config_params(cfg)
    assert params["spark.conf.spark.hadoop.fs.s3a.secret.key"] == REDACTED
    assert params["spark.conf.spark.hadoop.fs.s3a.access.key"] == REDACTED
    assert "abc123" not in str(params) and "AKIAXYZ" not in str(params)
    assert params["dedup.threshold"] == "0.8" and params["tokenize.separator_token"] == "null"
    assert params["filter.preset"] == "fineweb" and params["ingest.input"] == "[]"
    assert params["tracking.mlflow"] == "false"
    assert all(len(k) <= 250 and len(v) <= 6000 for k, v in params.items())


def test_flatten_and_tracking_uri(tmp_path):
    assert flatten({"a": {"b": 1, "c": {}}, "d": [1, 2]}) == {"a.b": 1, "a.c": "{}", "d": [1, 2]}
    assert tracking_uri(None, {}) .startswith("file:///") and tracking_uri(None, {}).endswith("/mlruns")
    assert tracking_uri(None, {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}) == "http://127.0.0.1:5000"
    assert tracking_uri(str(tmp_path / "runs"), {}) == f"file://{tmp_path / 'runs'}"
    assert tracking_uri("databricks", {}) == "databricks"
