"""The ``crawlake`` command line (also behind every ``jobs/*.py`` spark-submit entry)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from pipelines.config import ConfigError, load_config
from pipelines.runner import STAGES, StageFailed, run_pipeline
from pipelines.tracking import TrackingError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Common Crawl → Delta Lake training tables.")


class UsageProblem(Exception):
    """Misuse a command finds itself (a lake root without tables, an unknown table name): main()
    prints it as one error line and the command's usage, exit 2."""


def _config(env: str, overrides: list[str], conf_dir: str | None):
    """The effective config; :class:`UsageProblem` (exit 2) naming a bad key or value."""
    try:
        return load_config(env, overrides, conf_dir)
    except ConfigError as exc:
        raise UsageProblem(str(exc)) from None


def _lake_with_tables(cfg) -> str:
    """The path-mode lake root of ``cfg``, or :class:`UsageProblem` when it holds no crawlake table
    (or is a catalog-mode lake, which only Spark reads)."""
    from pipelines.lake import read as lake_read
    from schemas.catalog import ALL_TABLES

    try:
        root = lake_read.lake_root(cfg)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    if not any(lake_read.exists(spec.path_under(root)) for spec in ALL_TABLES):
        raise UsageProblem(f"no crawlake tables under {root} (--lake-root; `crawlake run` makes them)")
    return root


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
    full: Annotated[Optional[list[str]], typer.Option("--full", help="Rebuild these stages in full instead of incrementally (names, comma-separated or several; bare --full: every stage)")] = None,
) -> None:
    """Run the pipeline's stages in order and print a per-stage summary."""
    overrides = list(set_ or [])
    if lake_root:
        overrides.append(f"lake.root={lake_root}")
    cfg = _config(env, overrides, conf_dir)
    if input:
        cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": list(input)})})
    chosen = tuple(s.strip() for item in (stages or STAGES) for s in item.split(",") if s.strip())
    rebuild = tuple(s.strip() for item in (full or ()) for s in item.split(",") if s.strip())
    try:
        run_pipeline(cfg, chosen, full=rebuild)
    except (ValueError, FileNotFoundError, TrackingError) as exc:   # before Spark starts
        raise UsageProblem(str(exc)) from None
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
    _lake_with_tables(cfg)   # a catalog-mode lake or one without tables: usage error
    result = explain_doc(cfg, doc_id)
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
            typer.echo(f"error: {cfg.scrub(str(exc.cause))}", err=True)
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
    _lake_with_tables(cfg)
    try:
        hits = Searcher(cfg).search(query, k, per_document=not chunks)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageProblem(str(exc)) from None
    for rank, hit in enumerate(hits, 1):
        if as_json:
            typer.echo(json.dumps({"rank": rank, **dataclasses.asdict(hit)}, ensure_ascii=False))
        else:
            typer.echo(f"{rank:>3}  {hit.score:.4f}  {hit.doc_id}  {hit.url or '-'}\n       {hit.snippet}")


@app.command()
def report(
    lake_root: Annotated[Optional[str], typer.Option(help="Lake root folder (overrides lake.root)")] = None,
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="HTML file to write (default <lake root>/report.html)")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the sampled removed documents")] = 0,
    env: Annotated[str, typer.Option(help="Config overlay: conf/<env>.yaml")] = "local",
    conf_dir: Annotated[Optional[str], typer.Option(help="Folder with base.yaml and overlays")] = None,
) -> None:
    """Write one self-contained HTML report of the lake (funnel, rules, dedup, lengths, clicks, runs); print its path."""
    from pipelines.report import build_report

    cfg = _config(env, [f"lake.root={lake_root}"] if lake_root else [], conf_dir)
    root = _lake_with_tables(cfg)
    try:
        built = build_report(root, out, seed=seed)
    except ValueError as exc:   # an object-store lake without --out
        raise UsageProblem(str(exc)) from None
    typer.echo(str(built.path.resolve()))


@app.command()
def forget(
    reason: Annotated[str, typer.Option(help="Why, recorded in ops.takedowns (e.g. \"opt-out request 42\")")],
    url: Annotated[Optional[list[str]], typer.Option("--url", help="A page, as crawled or in canonical form (repeatable)")] = None,
    url_prefix: Annotated[Optional[list[str]], typer.Option("--url-prefix", help="Every URL starting with this (repeatable)")] = None,
    domain: Annotated[Optional[list[str]], typer.Option("--domain", help="A host and its subdomains, e.g. example.com (repeatable)")] = None,
    doc_id: Annotated[Optional[list[str]], typer.Option("--doc-id", help="A doc_id of bronze.documents (repeatable)")] = None,
    purge: Annotated[bool, typer.Option("--purge", help="Also rewrite and vacuum the files that held them (ends time travel of those tables)")] = False,
    lake_root: Annotated[Optional[str], typer.Option(help="Lake root folder (overrides lake.root)")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Config override key=value (repeatable; as your runs use)")] = None,
    env: Annotated[str, typer.Option(help="Config overlay: conf/<env>.yaml")] = "local",
    conf_dir: Annotated[Optional[str], typer.Option(help="Folder with base.yaml and overlays")] = None,
) -> None:
    """Take documents down from every table and index shard and keep them out of later ingests (ops.takedowns)."""
    from pipelines.forget import forget as take_down
    from pipelines.kernels.takedown import Selectors

    overrides = list(set_ or []) + ([f"lake.root={lake_root}"] if lake_root else [])
    cfg = _config(env, overrides, conf_dir)
    try:
        selectors = Selectors.parse(url or (), url_prefix or (), domain or (), doc_id or ())
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    if cfg.lake.mode == "path":
        _lake_with_tables(cfg)   # before Spark starts
    try:
        result = take_down(cfg, selectors, reason, purge=purge)
    except (ValueError, TrackingError) as exc:   # before the first write
        raise UsageProblem(str(exc)) from None
    except StageFailed as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    typer.echo("\n".join(result.lines()))


@app.command()
def lineage(
    table: Annotated[str, typer.Argument(help="Table as layer.name, e.g. silver.documents_clean")],
    version: Annotated[Optional[int], typer.Option(min=0, help="Delta version (default the latest)")] = None,
    lake_root: Annotated[Optional[str], typer.Option(help="Lake root folder (overrides lake.root)")] = None,
    env: Annotated[str, typer.Option(help="Config overlay: conf/<env>.yaml")] = "local",
    conf_dir: Annotated[Optional[str], typer.Option(help="Folder with base.yaml and overlays")] = None,
) -> None:
    """Say which stage run wrote TABLE's version, from which input versions, back to the input files (ops.ingest_log)."""
    from pipelines.lineage import lineage as table_lineage
    from schemas.catalog import TABLES

    if table not in TABLES:
        raise UsageProblem(f"unknown table {table!r}; tables are {', '.join(TABLES)}")
    cfg = _config(env, [f"lake.root={lake_root}"] if lake_root else [], conf_dir)
    root = _lake_with_tables(cfg)
    try:
        link = table_lineage(root, table, version)
    except LookupError as exc:
        raise UsageProblem(str(exc)) from None
    typer.echo("\n".join(link.lines()))


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
    except (ValueError, TrackingError) as exc:   # before Spark starts (e.g. no credentials for s3://)
        raise UsageProblem(str(exc)) from None
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
        raise UsageProblem("no input: pass --input or set clicks.input")
    try:
        stage.resolve_inputs(inputs)   # a missing input is a usage error, before Spark starts
    except FileNotFoundError as exc:
        raise UsageProblem(str(exc)) from None
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
        raise UsageProblem("--available-now and --processing-time exclude each other")
    cfg = _clicks_config(env, conf_dir, set_, lake__root=lake_root, clicks__format=format,
                         clicks__max_files_per_trigger=max_files_per_trigger, clicks__checkpoint=checkpoint)
    folder = landing or cfg.clicks.landing
    if not folder:
        raise UsageProblem("no landing folder: pass --landing or set clicks.landing")
    if "://" not in folder and not os.path.isdir(folder):
        raise UsageProblem(f"landing folder not found: {folder}")
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
        raise UsageProblem(str(exc)) from None
    ledger_path = Path(out) / "_generated.json"
    ledger_path.write_text(json.dumps([asdict(f) for f in made], indent=1))
    for f in made:
        typer.echo(f"{f.path}: {f.lines} lines, {f.rows} valid, {len(f.bad)} malformed, {f.positives} positives")
    typer.echo(f"ledger: {ledger_path}")


_MULTI_VALUE = ("--input", "-i")


def _expand(argv: list[str], flags: tuple[str, ...], canonical: str, bare: list[str]) -> list[str]:
    """Each of ``flags`` followed by several values → ``canonical`` once per value (click takes one
    value per flag); a flag given no value becomes ``bare``."""
    out, taking, given = [], False, 0
    for arg in argv:
        if arg in flags:
            if taking and not given:
                out += bare
            taking, given = True, 0
            continue
        if taking and not arg.startswith("-"):
            out += [canonical, arg]
            given += 1
            continue
        if taking and not given:
            out += bare
        taking = False
        out.append(arg)
    if taking and not given:
        out += bare
    return out


def expand_multi_value(argv: list[str]) -> list[str]:
    """``--input a b c`` → ``--input a --input b --input c`` (click takes one value per flag); a
    bare ``--input`` stays, for click to refuse."""
    return _expand(argv, _MULTI_VALUE, "--input", ["--input"])


def expand_full(argv: list[str]) -> list[str]:
    """``run --full`` → ``run --full all``; ``run --full a b`` → ``run --full a --full b`` (click
    takes one value per flag, and none for a bare flag). Other commands are left as they are."""
    if not argv or argv[0] != "run":
        return argv
    return _expand(argv, ("--full",), "--full", ["--full", "all"])


def usage(argv: list[str]) -> str:
    """The usage line of the command ``argv`` names (``crawlake explain [OPTIONS] DOC_ID``): the
    deepest command whose name appears in order among ``argv``."""
    command = typer.main.get_command(app)
    names = ["crawlake"]
    for arg in argv:
        sub = getattr(command, "commands", {}).get(arg)
        if sub is None:
            if not arg.startswith("-"):
                break
            continue
        command, names = sub, names + [arg]
    ctx = command.make_context(" ".join(names), [], resilient_parsing=True)
    return command.get_usage(ctx).strip()


def _misuse(message: str, argv: list[str]) -> int:
    """One error line and the usage on stderr; exit code 2."""
    line = usage(argv)
    help_hint = line.split(" [", 1)[0].replace("Usage: ", "")
    print(f"error: {message}\n{line}  (see {help_hint} --help)", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point for the console script and the jobs; returns the exit code.

    Misuse (a missing or unknown argument or option, a bad value, an unknown command, a lake root
    without tables) prints one error line and the command's usage on stderr and returns 2; a
    bare group (``crawlake``, ``crawlake clicks``) prints its help and returns 2.
    """
    argv = expand_full(expand_multi_value(list(sys.argv[1:] if argv is None else argv)))
    try:
        # Without standalone mode click returns typer.Exit's code instead of raising it.
        code = app(args=argv, prog_name="crawlake", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except UsageProblem as exc:
        return _misuse(str(exc), argv)
    except Exception as exc:
        # click's usage errors (typer vendors click, so they are matched by what they have):
        # a bare group asks for help, the rest are one line
        exit_code, message = getattr(exc, "exit_code", None), getattr(exc, "format_message", None)
        if not isinstance(exit_code, int) or not callable(message):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError" or exit_code != 2:
            print(message(), file=sys.stderr)
            return exit_code
        return _misuse(message(), argv)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
