"""spark-submit jobs/train_tokenizer.py [--lake-root DIR] [--vocab-size N] [--output-dir DIR] [--env local|databricks] [--set k=v ...]"""
import sys

import _entry  # noqa: F401  (sys.path: repository root in, jobs/ out)
from pipelines.cli import main

sys.exit(main(["train-tokenizer", *sys.argv[1:]]))
