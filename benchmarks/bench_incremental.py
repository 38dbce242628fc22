"""What a new crawl costs on a lake with history (issue 20): per stage, the incremental run over a
5 % increment against the first full run, and the same increment on a lake with 4x the history.

Input: crawls of generated documents as ``bench_stages.py`` builds them (bench_dedup_scale's
generator: runs of real paragraphs of the ../shared/data pages plus a unique sentence, ~10 %
planted exact and near duplicates within a crawl), served as WARC files of simple HTML pages.
Crawl ``k`` holds ``--docs`` documents under URLs tagged ``/c<k>/`` (distinct record ids, so
distinct doc_ids), crawled ``k`` months after crawl 0; the increment is a further crawl of
``--increment`` x ``--docs`` documents. Generated files are kept under ``--workdir`` and reused.

Runs, each with every stage (``ingest,dedup,filter,tokenize,embed,index``) in one process:

  full         a fresh lake over crawl 0 (N documents): every stage's first, full run
  incremental  that lake, then crawl 0 + the increment: every stage incremental (ingest skips
               crawl 0's logged files; dedup, filter, tokenize, embed, index work on what changed)
  full_4x      a fresh lake over crawls 0..3 (4 N documents), untimed for the targets
  incremental_4x  that lake, then crawls 0..3 + the same increment

With ``--repeats R`` the two incremental runs each start R times from a copy of the lake as the
full run left it; medians are reported. Metrics per stage (JSON lines
``{"benchmark": "incremental", "system": "crawlake", "stage", "metric", "value", "unit", ...}``):

  incremental_over_full   incremental seconds / full seconds       target <= 0.15
  history_growth          incremental_4x seconds / incremental seconds   target <= 1.3

plus ``pipeline`` rows over the sum of the stages. Each stage's time is its ``StageRun.duration_s``
(what ``ops.runs`` records).

Embeddings: the default ``--embed-model tiny`` is a 1-layer, 64-wide BERT with seeded random
weights and all-MiniLM-L6-v2's tokenizer, built into the workdir, so that the embed and index
stages run at N >= 100k on a CPU (all-MiniLM-L6-v2 embeds ~25 chunks/s on 2 cores: hours per
full run). It measures the stages' incremental machinery (which documents to embed, the vector
commits, which shards rebuild) with a cheap forward pass; with the real model the forward pass
is work proportional to the new documents in both runs, so the ratio only moves toward the
increment's share. ``--embed-model default`` (or a path) uses a real model, e.g. on a GPU.

A warm-up comes first, on a small lake: every stage's full run, then its incremental run over a
small new crawl, so that both code paths measured run with the JVM's JIT, Spark's code
generation cache and the Python workers warm (warmed by full runs only, the first increments
measured paid for their own path's warm-up: successive increments in one process kept getting
faster, and the 4x lake's, measured later, were faster than the 1x lake's).

    python benchmarks/bench_incremental.py [--json] [--docs 100000] [--increment 0.05]
        [--history 4] [--files 8] [--repeats 1] [--words 80,400] [--embed-model tiny]
        [--workdir DIR] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_ingest import _quiet_console  # noqa: E402  (benchmarks/ is on sys.path)
from bench_stages import build_warcs  # noqa: E402

STAGES = ("ingest", "dedup", "filter", "tokenize", "embed", "index")
TARGET_RATIO = 0.15
TARGET_GROWTH = 1.3
WARMUP_DOCS = 300
TINY_WIDTH = 64


def tiny_model(folder: Path) -> Path:
    """A sentence-transformers model folder: a 1-layer BERT of width ``TINY_WIDTH`` with weights
    drawn from seed 0, all-MiniLM-L6-v2's tokenizer, mean pooling, L2 normalization; reused."""
    if (folder / "modules.json").exists():
        return folder
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    from pipelines.kernels.tokens import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    torch.manual_seed(0)
    hf = folder.with_name(folder.name + "-hf")
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=TINY_WIDTH, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=2 * TINY_WIDTH,
                         max_position_embeddings=512)).save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    modules = [models.Transformer(str(hf), max_seq_length=256), models.Pooling(TINY_WIDTH, "mean"), models.Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def run_all(root: Path, warcs: list[Path], overrides: list[str]) -> dict[str, float]:
    """Every stage on the lake at ``root`` over ``warcs``: ``{stage: seconds}`` (and the runs' notes
    under ``"_notes"``). Raises StageFailed when a stage fails."""
    from pipelines.config import load_config
    from pipelines.runner import run_pipeline

    cfg = load_config("local", [f"lake.root={root}", "ingest.progress=false", *overrides])
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": [str(p) for p in warcs]})})
    runs = run_pipeline(cfg, console=_quiet_console())
    out = {run.stage: run.duration_s for run in runs}
    out["_notes"] = {run.stage: run.result.notes for run in runs}
    return out


def incremental_runs(base: Path, warcs: list[Path], overrides: list[str], repeats: int) -> list[dict]:
    """``repeats`` incremental runs over ``warcs``, each on a fresh copy of the lake at ``base``
    (a new path each time: the driver's Delta log cache knows the tables of earlier paths)."""
    out = []
    for r in range(repeats):
        work = base.with_name(f"{base.name}-inc{r}")
        shutil.copytree(base, work)
        out.append(run_all(work, warcs, overrides))
        shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--docs", type=int, default=100_000, help="documents per crawl (N)")
    parser.add_argument("--increment", type=float, default=0.05, help="the new crawl's size as a share of N")
    parser.add_argument("--history", type=int, default=4, help="crawls of N documents in the larger lake")
    parser.add_argument("--files", type=int, default=8, help="WARC files per crawl of N documents")
    parser.add_argument("--repeats", type=int, default=1, help="incremental runs per lake (medians)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--words", default="80,400", help="min,max words of a generated document")
    parser.add_argument("--embed-model", default="tiny", help="tiny (built here), default, or a model path")
    parser.add_argument("--workdir", type=Path, default=None, help="keep generated files and lakes here")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override KEY=VALUE")
    args = parser.parse_args()

    from pipelines.config import load_config
    from pipelines.session import get_spark

    words = tuple(int(w) for w in args.words.split(","))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_incremental_"))
    tag = f"n{args.docs}-f{args.files}-seed{args.seed}-words{words[0]}-{words[1]}"

    def crawl(k: int, n: int, files: int, folder: str) -> list[Path]:
        return build_warcs(workdir / "warc" / tag / folder, n, files, args.seed * 1009 + k, words, crawl=k)

    crawls = [crawl(k, args.docs, args.files, f"crawl{k}") for k in range(args.history)]
    inc_docs = max(1, round(args.docs * args.increment))
    # the folder names the crawl number: a workdir reused with another --history must not serve
    # an increment generated as an earlier crawl of the history (the same documents again)
    increment = crawl(args.history, inc_docs, max(2, round(args.files * args.increment)),
                      f"increment{args.history}-{inc_docs}")
    warm = build_warcs(workdir / "warc" / "warmup", WARMUP_DOCS, 2, args.seed + 1, (80, 400))
    warm_increment = build_warcs(workdir / "warc" / "warmup-increment", WARMUP_DOCS // 3, 2, args.seed + 2,
                                 (80, 400), crawl=1)
    model = args.embed_model
    if model == "tiny":
        model = str(tiny_model(workdir / "tiny-model"))
    overrides = [f"embed.model={model}", *args.overrides]

    cfg = load_config("local", overrides)
    spark = get_spark(cfg.spark)
    lakes = workdir / "lakes"
    shutil.rmtree(lakes, ignore_errors=True)
    run_all(lakes / "warmup", warm, overrides)
    run_all(lakes / "warmup", warm + warm_increment, overrides)

    def stamp(what: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)

    history = [p for crawl in crawls for p in crawl]
    stamp(f"full run over crawl 0 ({args.docs} documents)")
    full = run_all(lakes / "small", crawls[0], overrides)
    stamp(f"incremental runs: + {inc_docs} documents")
    inc = incremental_runs(lakes / "small", crawls[0] + increment, overrides, args.repeats)
    stamp(f"full run over crawls 0..{args.history - 1} ({args.history * args.docs} documents)")
    full_big = run_all(lakes / "large", history, overrides)
    stamp(f"incremental runs on {args.history}x the history")
    inc_big = incremental_runs(lakes / "large", history + increment, overrides, args.repeats)
    spark.stop()
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)

    common = {"documents": args.docs, "increment_documents": inc_docs, "history": args.history,
              "repeats": args.repeats, "words": list(words), "embed_model": args.embed_model}
    for stage in (*STAGES, "pipeline"):
        def secs(run: dict) -> float:
            return sum(run[s] for s in STAGES) if stage == "pipeline" else run[stage]

        f, fb = secs(full), secs(full_big)
        i = statistics.median(secs(r) for r in inc)
        ib = statistics.median(secs(r) for r in inc_big)
        rows = [
            {"metric": "incremental_over_full", "value": round(i / f, 3), "unit": "ratio", "target": TARGET_RATIO},
            {"metric": "history_growth", "value": round(ib / i, 3), "unit": "ratio", "target": TARGET_GROWTH},
        ]
        detail = {"full_s": round(f, 2), "incremental_s": round(i, 2), "full_4x_s": round(fb, 2),
                  "incremental_4x_s": round(ib, 2), "incremental_runs_s": [round(secs(r), 2) for r in inc],
                  "incremental_4x_runs_s": [round(secs(r), 2) for r in inc_big]}
        if stage != "pipeline":
            detail["incremental_notes"] = inc[0]["_notes"].get(stage)
            detail["incremental_4x_notes"] = inc_big[0]["_notes"].get(stage)
        for row in rows:
            line = {"benchmark": "incremental", "system": "crawlake", "stage": stage, **row, **detail, **common}
            if args.json:
                print(json.dumps(line, default=str))
            else:
                print(f"{stage:>9} {row['metric']:>22}: {row['value']:.3f} (target <= {row['target']})  "
                      f"full {f:.1f} s, incremental {i:.1f} s, 4x full {fb:.1f} s, 4x incremental {ib:.1f} s")


if __name__ == "__main__":
    main()
