"""What every stage receives and returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from pipelines.config import Config
from pipelines.tables import Lake


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
