"""The CLI answers like one: misuse is one error line and the usage (exit 2), and the point
lookups (explain, lineage, report) answer on a small lake without starting a JVM."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import report_lake as rl
import typer

from conftest import REPO
from pipelines.cli import app, main


def _commands(group=None, path=()):
    """(argv path, click command) of every leaf command of the app."""
    group = group or typer.main.get_command(app)
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def _missing_argument(cmd) -> list[str]:
    """Arguments that leave something out: nothing where the command requires a parameter, else
    its first option that takes a value, given without one."""
    if any(p.required for p in cmd.params):
        return []
    option = next(p for p in cmd.params if getattr(p, "opts", None) and not getattr(p, "is_flag", False)
                  and p.opts[0].startswith("--") and p.name != "help")
    return [option.opts[0]]


COMMANDS = list(_commands())


def test_every_command_is_covered():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"run", "explain", "search", "report", "lineage", "forget", "train-tokenizer", "clicks ingest",
            "clicks stream", "clicks features", "clicks generate"} <= names


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_missing_argument_is_one_error_line_and_the_usage(path, cmd, capsys):
    argv = [*path, *_missing_argument(cmd)]
    assert main(argv) == 2, argv
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 2, captured.err
    assert lines[0].startswith("error: ") and ("Missing" in lines[0] or "requires an argument" in lines[0]), lines
    assert lines[1].startswith(f"Usage: crawlake {' '.join(path)} "), lines
    assert "Traceback" not in captured.err and captured.out == ""


@pytest.mark.parametrize("argv,message", [
    (["explain", "x", "--bogus"], "No such option: --bogus"),
    (["nonsense"], "No such command 'nonsense'"),
    (["lineage", "silver.nope"], "unknown table 'silver.nope'"),
    (["search", "q", "--k", "zero"], "Invalid value"),
    (["run", "--set", "dedup.treshold=0.5"], "unknown config key 'dedup.treshold'"),
    (["forget", "--reason", "opt-out"], "name what to take down: --url, --url-prefix, --domain or --doc-id"),
    (["forget", "--domain", "https://example.com/", "--reason", "opt-out"], "is not a host name"),
])
def test_unknown_arguments_and_values(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[0] and err[1].startswith("Usage: crawlake")


@pytest.mark.parametrize("command", [["explain", "d00"], ["search", "a query"], ["report"],
                                     ["lineage", "bronze.documents"],
                                     ["forget", "--domain", "example.com", "--reason", "opt-out"]])
def test_a_lake_root_without_tables_is_a_usage_error(command, tmp_path, capsys):
    assert main([*command, "--lake-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == f"error: no crawlake tables under {tmp_path} (--lake-root; `crawlake run` makes them)"
    assert err[1].startswith(f"Usage: crawlake {command[0]} ")


def test_a_bare_group_prints_its_help(capsys):
    assert main([]) == 2
    assert "Commands" in capsys.readouterr().out


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    return rl.build(tmp_path_factory.mktemp("cli_lake"))


PROBE = ("import sys, time; from pipelines.cli import main; t = time.perf_counter(); code = main(sys.argv[1:]); "
         "print('seconds', round(time.perf_counter() - t, 2), file=sys.stderr); "
         "print('jvm', 'pyspark.context' in sys.modules, file=sys.stderr); sys.exit(code)")


@pytest.mark.parametrize("argv,expect", [
    (["explain", "d03"], "removed by filter(s): gopher_min_doc_words"),
    (["explain", "d31"], "removed: exact duplicate of d29 (https://example.org/d29)"),
    (["lineage", "silver.documents_clean"], "← bronze.documents v0: ingest in run r2"),
    (["report"], "report.html"),
])
def test_point_lookups_answer_without_a_jvm(argv, expect, lake):
    """Each in its own interpreter, as a user runs it: exit 0, pyspark never imported, seconds."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv, "--lake-root", str(lake)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expect in proc.stdout, proc.stdout
    assert "jvm False" in proc.stderr, "a lookup imported pyspark"
    assert wall < 30, f"{argv} took {wall:.1f} s"
