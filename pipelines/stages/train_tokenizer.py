"""train-tokenizer: ``silver.documents_clean`` → ``<output dir>/<run id>/tokenizer.json``.

A byte-level BPE tokenizer (:func:`pipelines.kernels.tokens.train_bpe`) made from the lake's own
clean documents. Spark pre-tokenizes and counts the pre-tokens on the executors; only the table
of distinct pre-tokens and their counts streams to the driver (``toLocalIterator``, one partition
at a time), where Hugging Face's trainer, which is single-machine, runs. The file is saved under
the run's id, and the run is recorded in ``ops.runs`` (stage ``train_tokenizer``, run by ``crawlake train-tokenizer``); tokenize with
it through ``--set tokenize.tokenizer=<path>``.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pipelines.config import Config
from pipelines.kernels.tokens import count_pretokens, train_bpe
from pipelines.stage import StageContext, StageResult
from schemas.catalog import SILVER_DOCUMENTS_CLEAN

_WORD_COUNTS = StructType([StructField("word", StringType(), False), StructField("count", LongType(), False)])


def output_path(cfg: Config, run_id: str) -> str:
    """``<tokenize.train_output_dir or lake.root/tokenizers>/<run_id>/tokenizer.json``."""
    base = cfg.tokenize.train_output_dir or f"{cfg.lake.root.rstrip('/')}/tokenizers"
    if "://" not in base:
        base = str(Path(base).resolve())
    return f"{base.rstrip('/')}/{run_id}/tokenizer.json"


def run(ctx: StageContext) -> StageResult:
    """Train and save the tokenizer. Raises ValueError when ``silver.documents_clean`` is empty."""
    cfg = ctx.cfg.tokenize
    docs, n_docs = ctx.lake.read_counted(SILVER_DOCUMENTS_CLEAN)
    if n_docs == 0:
        raise ValueError(f"{SILVER_DOCUMENTS_CLEAN.qualified_name} is empty: nothing to train a tokenizer on")
    counts = (docs.select("text").mapInArrow(count_pretokens, _WORD_COUNTS)
              .groupBy("word").agg(F.sum("count").alias("count"))
              .orderBy("word"))  # a fixed feeding order
    seen = {"words": 0, "occurrences": 0}

    def rows():
        for r in counts.toLocalIterator():
            seen["words"] += 1
            seen["occurrences"] += r["count"]
            yield r["word"], r["count"]

    tok = train_bpe(rows(), vocab_size=cfg.train_vocab_size, min_frequency=cfg.train_min_frequency)
    path = output_path(ctx.cfg, ctx.run_id)
    with fsspec.open(path, "w", encoding="utf-8", auto_mkdir=True) as f:
        f.write(tok.to_str())
    return StageResult(
        rows_in=n_docs, rows_out=1,
        notes={"path": path, "vocab_size": tok.get_vocab_size(), "distinct_pretokens": seen["words"],
               "pretokens": seen["occurrences"]},
    )
