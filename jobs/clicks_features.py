"""spark-submit jobs/clicks_features.py [--min-frequency N] [--lake-root DIR] [--env local|databricks] [--set k=v ...]"""
import sys

import _entry  # noqa: F401  (the repository root on sys.path, jobs/ off it)
from pipelines.cli import main

sys.exit(main(["clicks", "features", *sys.argv[1:]]))
