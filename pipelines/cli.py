"""The ``crawlake`` command line (also behind every ``jobs/*.py`` spark-submit entry)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from pipelines.config import ConfigError, load_config
from pipelines.runner import STAGES, StageFailed, run_pipeline

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Common Crawl → Delta Lake training tables.")


def _config(env: str, overrides: list[str], conf_dir: str | None):
    """The effective config, or exit 2 with the error naming the bad key or value."""
    try:
        return load_config(env, overrides, conf_dir)
    except ConfigError as exc:
        typer.echo(f"config error: {exc}", err=True)
        raise typer.Exit(2)


@app.callback()
def _root() -> None:
    """crawlake: staged Spark/Delta pipeline (ingest, dedup, filter, tokenize, embed, index)."""


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
    cfg = _config(env, overrides, conf_dir)
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


@app.command()
def explain(
    doc_id: Annotated[str, typer.Argument(help="doc_id from bronze.documents")],
    lake_root: Annotated[Optional[str], typer.Option(help="Lake root folder (overrides lake.root)")] = None,
    env: Annotated[str, typer.Option(help="Config overlay: conf/<env>.yaml")] = "local",
    conf_dir: Annotated[Optional[str], typer.Option(help="Folder with base.yaml and overlays")] = None,
) -> None:
    """Say whether a document was kept and, if not, which duplicate or filter removed it."""
    from pipelines.explain import explain as explain_doc   # reads with deltalake + pyarrow: no JVM

    cfg = _config(env, [f"lake.root={lake_root}"] if lake_root else [], conf_dir)
    try:
        result = explain_doc(cfg, doc_id)
    except ValueError as exc:   # a catalog-mode lake
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    typer.echo("\n".join(result.lines()))
    if not result.ingested:
        raise typer.Exit(1)


@app.command("train-tokenizer")
def train_tokenizer(
    lake_root: Annotated[Optional[str], typer.Option(help="Lake root folder (overrides lake.root)")] = None,
    vocab_size: Annotated[Optional[int], typer.Option(help="Vocabulary size (overrides tokenize.train_vocab_size)")] = None,
    output_dir: Annotated[Optional[str], typer.Option(help="Where <run_id>/tokenizer.json goes (overrides tokenize.train_output_dir)")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Config override key=value (repeatable)")] = None,
    env: Annotated[str, typer.Option(help="Config overlay: conf/<env>.yaml")] = "local",
    conf_dir: Annotated[Optional[str], typer.Option(help="Folder with base.yaml and overlays")] = None,
) -> None:
    """Train a byte-level BPE tokenizer on silver.documents_clean; print the tokenizer.json path."""
    from pipelines.runner import run_stages
    from pipelines.stages import STAGES as ALL_STAGES

    overrides = list(set_ or [])
    for key, value in (("lake.root", lake_root), ("tokenize.train_vocab_size", vocab_size),
                       ("tokenize.train_output_dir", output_dir)):
        if value is not None:
            overrides.append(f"{key}={value}")
    cfg = _config(env, overrides, conf_dir)
    try:
        (done,) = run_stages(cfg, [ALL_STAGES["train_tokenizer"]])
    except StageFailed as exc:
        if isinstance(exc.cause, ValueError):
            typer.echo(f"error: {exc.cause}", err=True)
            raise typer.Exit(2)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    typer.echo(done.result.notes["path"])


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Query text")],
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="Hits to return")] = 10,
    chunks: Annotated[bool, typer.Option("--chunks", help="One hit per chunk instead of one per document")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per hit")] = False,
    lake_root: Annotated[Optional[str], typer.Option(help="Lake root folder (overrides lake.root)")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Config override key=value (repeatable)")] = None,
    env: Annotated[str, typer.Option(help="Config overlay: conf/<env>.yaml")] = "local",
    conf_dir: Annotated[Optional[str], typer.Option(help="Folder with base.yaml and overlays")] = None,
) -> None:
    """Embed QUERY, search every index shard, print the merged top k (doc_id, score, url, snippet)."""
    import dataclasses
    import json

    from pipelines.search import Searcher

    overrides = list(set_ or []) + ([f"lake.root={lake_root}"] if lake_root else [])
    cfg = _config(env, overrides, conf_dir)
    try:
        hits = Searcher(cfg).search(query, k, per_document=not chunks)
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    for rank, hit in enumerate(hits, 1):
        if as_json:
            typer.echo(json.dumps({"rank": rank, **dataclasses.asdict(hit)}, ensure_ascii=False))
        else:
            typer.echo(f"{rank:>3}  {hit.score:.4f}  {hit.doc_id}  {hit.url or '-'}\n       {hit.snippet}")


# ----------------------------------------------------------------------------- click logs

clicks_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Criteo click logs: batch and streaming ingest, DLRM features, a file generator.")
app.add_typer(clicks_app, name="clicks")

_LakeRoot = Annotated[Optional[str], typer.Option(help="Lake root folder (overrides lake.root)")]
_Set = Annotated[Optional[list[str]], typer.Option("--set", help="Config override key=value (repeatable)")]
_Env = Annotated[str, typer.Option(help="Config overlay: conf/<env>.yaml")]
_ConfDir = Annotated[Optional[str], typer.Option(help="Folder with base.yaml and overlays")]


def _clicks_config(env: str, conf_dir: str | None, set_: list[str] | None, **keys):
    """Config with ``--set`` overrides, then the command's own options (``clicks.<key>``/``lake.root``)."""
    overrides = list(set_ or [])
    for key, value in keys.items():
        if value is not None:
            overrides.append(f"{key.replace('__', '.')}={value}")
    return _config(env, overrides, conf_dir)


def _run_clicks_stage(cfg, stage: str) -> None:
    """Run the click-log stage named ``stage`` (ledgered, with the run summary); exit 1 when it fails."""
    from pipelines.runner import run_stages
    from pipelines.stages import STAGES as ALL_STAGES

    try:
        run_stages(cfg, [ALL_STAGES[stage]])
    except StageFailed as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)


@clicks_app.command("ingest")
def clicks_ingest(
    input: Annotated[Optional[list[str]], typer.Option("--input", "-i", help="Click-log files, globs or folders (default clicks.input)")] = None,
    format: Annotated[Optional[str], typer.Option("--format", help="tsv | kaggle_csv (overrides clicks.format)")] = None,
    lake_root: _LakeRoot = None, set_: _Set = None, env: _Env = "local", conf_dir: _ConfDir = None,
) -> None:
    """Load Criteo log files into bronze.clicks (+ bronze.clicks_quarantine), each file exactly once."""
    from pipelines.clicks import ingest as stage

    cfg = _clicks_config(env, conf_dir, set_, lake__root=lake_root, clicks__format=format)
    inputs = list(input or cfg.clicks.input)
    if not inputs:
        typer.echo("error: no input: pass --input or set clicks.input", err=True)
        raise typer.Exit(2)
    try:
        stage.resolve_inputs(inputs)   # a missing input is a usage error, before Spark starts
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    _run_clicks_stage(cfg.model_copy(update={"clicks": cfg.clicks.model_copy(update={"input": inputs})}), "clicks_ingest")


def _interval(text: str) -> str:
    """``30s``/``2m``/``500ms``/``1h`` → Spark's ``30 seconds`` form; other text is passed through."""
    import re

    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h)\s*", text)
    if not m:
        return text
    unit = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}[m.group(2)]
    return f"{m.group(1)} {unit}"


@clicks_app.command("stream")
def clicks_stream(
    landing: Annotated[Optional[str], typer.Option(help="Folder new log files land in (default clicks.landing)")] = None,
    available_now: Annotated[bool, typer.Option("--available-now", help="Process what has landed, then stop")] = False,
    processing_time: Annotated[Optional[str], typer.Option(help="Trigger interval, e.g. 30s (default clicks.processing_time)")] = None,
    max_files_per_trigger: Annotated[Optional[int], typer.Option(help="Files per micro-batch (overrides clicks.max_files_per_trigger)")] = None,
    checkpoint: Annotated[Optional[str], typer.Option(help="Checkpoint folder (default <lake root>/_checkpoints/clicks_stream)")] = None,
    format: Annotated[Optional[str], typer.Option("--format", help="tsv | kaggle_csv (overrides clicks.format)")] = None,
    lake_root: _LakeRoot = None, set_: _Set = None, env: _Env = "local", conf_dir: _ConfDir = None,
) -> None:
    """Structured Streaming from a landing folder into bronze.clicks, exactly once; stops on SIGINT/SIGTERM."""
    import os

    if available_now and processing_time:
        typer.echo("error: --available-now and --processing-time exclude each other", err=True)
        raise typer.Exit(2)
    cfg = _clicks_config(env, conf_dir, set_, lake__root=lake_root, clicks__format=format,
                         clicks__max_files_per_trigger=max_files_per_trigger, clicks__checkpoint=checkpoint)
    folder = landing or cfg.clicks.landing
    if not folder:
        typer.echo("error: no landing folder: pass --landing or set clicks.landing", err=True)
        raise typer.Exit(2)
    if "://" not in folder and not os.path.isdir(folder):
        typer.echo(f"error: landing folder not found: {folder}", err=True)
        raise typer.Exit(2)
    from pipelines.clicks import stream
    from pipelines.session import get_spark

    spark = get_spark(cfg.spark, cfg.lake)
    try:
        stream.run(spark, cfg, folder, available_now=available_now,
                   processing_time=_interval(processing_time) if processing_time else None)
    except Exception as exc:
        typer.echo(f"error: stage {stream.STAGE} failed: {type(exc).__name__}: {str(exc)[:2000]}", err=True)
        raise typer.Exit(1)


@clicks_app.command("features")
def clicks_features(
    min_frequency: Annotated[Optional[int], typer.Option(help="Vocabulary frequency threshold (overrides clicks.vocab_min_frequency)")] = None,
    lake_root: _LakeRoot = None, set_: _Set = None, env: _Env = "local", conf_dir: _ConfDir = None,
) -> None:
    """bronze.clicks → silver.click_vocab + silver.click_features (DLRM preprocessing)."""
    cfg = _clicks_config(env, conf_dir, set_, lake__root=lake_root, clicks__vocab_min_frequency=min_frequency)
    _run_clicks_stage(cfg, "clicks_features")


@clicks_app.command("generate")
def clicks_generate(
    out: Annotated[str, typer.Option(help="Folder to write the files into")],
    rows: Annotated[int, typer.Option(help="Data lines per file")] = 100_000,
    files: Annotated[int, typer.Option(help="Number of files")] = 1,
    format: Annotated[str, typer.Option("--format", help="tsv (day_<n>) | kaggle_csv (train_<n>.csv)")] = "tsv",
    gzip: Annotated[bool, typer.Option("--gzip", help="Gzip the files (.gz)")] = False,
    bad_lines: Annotated[int, typer.Option(help="Malformed lines planted per file")] = 0,
    seed: Annotated[int, typer.Option(help="Random seed (file i uses seed + its day)")] = 0,
    first_day: Annotated[int, typer.Option(help="Day number of the first file")] = 0,
) -> None:
    """Write synthetic Criteo-format click logs; the planted bad lines go to <out>/_generated.json."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    from pipelines.clicks.generate import generate

    try:
        made = generate(out, rows=rows, files=files, fmt=format, gzip=gzip, bad_lines=bad_lines, seed=seed,
                        first_day=first_day)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    ledger_path = Path(out) / "_generated.json"
    ledger_path.write_text(json.dumps([asdict(f) for f in made], indent=1))
    for f in made:
        typer.echo(f"{f.path}: {f.lines} lines, {f.rows} valid, {len(f.bad)} malformed, {f.positives} positives")
    typer.echo(f"ledger: {ledger_path}")


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
