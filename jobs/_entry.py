"""Shared by the spark-submit entry points: run crawlake's CLI for some stages, exit with its code."""

import os
import sys

_JOBS = os.path.dirname(os.path.abspath(__file__))
# jobs/tokenize.py would shadow the standard library's tokenize module for everything imported
# after this point, so the jobs folder leaves sys.path; the repository root joins it, so a checkout
# runs without installing the package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _JOBS]
sys.path.insert(0, os.path.dirname(_JOBS))


def submit(stages: str) -> None:
    from pipelines.cli import main

    sys.exit(main(["run", "--stages", stages, *sys.argv[1:]]))
