"""The ``crawlake`` command line (also behind every ``jobs/*.py`` spark-submit entry)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from pipelines.config import ConfigError, load_config
from pipelines.runner import STAGES, StageFailed, run_pipeline

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Common Crawl → Delta Lake training tables.")


@app.callback()
def _root() -> None:
    """crawlake: staged Spark/Delta pipeline (ingest, dedup, filter, tokenize, embed)."""


@app.command()
def run(
    input: Annotated[Optional[list[str]], typer.Option("--input", "-i", help="WARC/WET paths, globs or folders (default: the built-in sample)")] = None,
    lake_root: Annotated[Optional[str], typer.Option(help="Lake root folder (overrides lake.root)")] = None,
    stages: Annotated[Optional[list[str]], typer.Option("--stages", "-s", help=f"Stages to run: {', '.join(STAGES)} (default all); repeat or comma-separate")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Config override key=value (repeatable)")] = None,
    env: Annotated[str, typer.Option(help="Config overlay: conf/<env>.yaml")] = "local",
    conf_dir: Annotated[Optional[str], typer.Option(help="Folder with base.yaml and overlays")] = None,
) -> None:
    """Run the pipeline's stages in order and print a per-stage summary."""
    overrides = list(set_ or [])
    if lake_root:
        overrides.append(f"lake.root={lake_root}")
    try:
        cfg = load_config(env, overrides, conf_dir)
    except ConfigError as exc:
        typer.echo(f"config error: {exc}", err=True)
        raise typer.Exit(2)
    if input:
        cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": list(input)})})
    chosen = tuple(s.strip() for item in (stages or STAGES) for s in item.split(",") if s.strip())
    try:
        run_pipeline(cfg, chosen)
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    except StageFailed as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)


_MULTI_VALUE = ("--input", "-i")


def expand_multi_value(argv: list[str]) -> list[str]:
    """``--input a b c`` → ``--input a --input b --input c`` (click takes one value per flag)."""
    out, taking = [], False
    for arg in argv:
        if arg in _MULTI_VALUE:
            taking = True
            continue
        if taking and not arg.startswith("-"):
            out += ["--input", arg]
            continue
        taking = False
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point for the console script and the jobs; returns the exit code."""
    argv = expand_multi_value(list(sys.argv[1:] if argv is None else argv))
    try:
        # Without standalone mode click returns typer.Exit's code instead of raising it.
        code = app(args=argv, prog_name="crawlake", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except Exception as exc:  # click usage errors and the like
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        raise
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
