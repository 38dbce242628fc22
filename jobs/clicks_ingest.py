"""spark-submit jobs/clicks_ingest.py --input PATH ... [--format tsv|kaggle_csv] [--lake-root DIR] [--env local|databricks] [--set k=v ...]"""
import sys

import _entry  # noqa: F401  (the repository root on sys.path, jobs/ off it)
from pipelines.cli import main

sys.exit(main(["clicks", "ingest", *sys.argv[1:]]))
