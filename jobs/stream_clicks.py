"""spark-submit jobs/stream_clicks.py --landing DIR [--available-now | --processing-time 30s] [--max-files-per-trigger N] [--lake-root DIR] [--env local|databricks] [--set k=v ...]"""
import sys

import _entry  # noqa: F401  (the repository root on sys.path, jobs/ off it)
from pipelines.cli import main

sys.exit(main(["clicks", "stream", *sys.argv[1:]]))
