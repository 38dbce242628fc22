"""What every stage receives and returns."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark import inheritable_thread_target
from pyspark.sql import SparkSession

from pipelines.config import Config
from pipelines.lake import Lake


@dataclass
class StageContext:
    spark: SparkSession
    cfg: Config
    lake: Lake
    run_id: str


@dataclass
class StageResult:
    rows_in: int
    rows_out: int
    rows_quarantined: int = 0
    input_versions: dict[str, int] = field(default_factory=dict)
    output_versions: dict[str, int] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)   # printed in the run summary


class QualityGateError(RuntimeError):
    """An output failed its data-quality suite; nothing was published."""


def run_together(*calls: tuple[Callable[..., Any], ...]) -> list[Any]:
    """Run ``(function, *args)`` calls on driver threads at once and return their results in order.

    For independent Spark jobs (Delta commits, small collects) whose fixed driver-side work would
    leave the cores idle one after another. Each thread keeps the caller's Spark job group
    (``inheritable_thread_target``). Waits for all; raises the error of the first failing call in the order given.
    """
    with ThreadPoolExecutor(len(calls), thread_name_prefix="crawlake-stage") as pool:
        futures = [pool.submit(inheritable_thread_target(fn), *args) for fn, *args in calls]
        return [f.result() for f in futures]


def failpoint(name: str) -> None:
    """Hang here until killed when the environment variable ``CRAWLAKE_FAILPOINT`` equals ``name``;
    a no-op otherwise. Crash tests use it to kill a process at a known step of a commit sequence
    instead of racing commits that take milliseconds."""
    if os.environ.get("CRAWLAKE_FAILPOINT") == name:
        print(f"failpoint {name}: waiting to be killed", file=sys.stderr, flush=True)
        while True:
            time.sleep(60)
