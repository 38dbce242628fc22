"""Session-scoped local Spark with Delta, and lakes built once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REAL_DATA = Path(os.environ.get("CRAWLAKE_REAL_DATA", REPO.parent / "shared" / "data"))


def real_file(name: str) -> str:
    """Absolute path of a file in the real test data folder; fails the test if it is missing."""
    path = REAL_DATA / name
    if not path.is_file():
        pytest.fail(f"real test data {name} not found in {REAL_DATA} "
                    "(../shared/data beside the checkout, or set CRAWLAKE_REAL_DATA=<dir>)")
    return str(path)


@pytest.fixture(scope="session")
def spark():
    from pipelines.config import load_config
    from pipelines.session import get_spark

    cfg = load_config("local", ["spark.conf.spark.sql.shuffle.partitions=2",
                                "spark.conf.spark.default.parallelism=2"])
    session = get_spark(cfg.spark)
    yield session
    session.stop()


def lake_config(root: Path, *overrides: str):
    from pipelines.config import load_config

    return load_config("local", [f"lake.root={root}", *overrides])


@pytest.fixture(scope="session")
def sample_lake(spark, tmp_path_factory) -> Path:
    """A lake on which the whole pipeline ran over the built-in sample crawl."""
    from pipelines.runner import run_pipeline

    root = tmp_path_factory.mktemp("sample_lake")
    run_pipeline(lake_config(root))
    return root


def read_table(spark, root: Path, qualified: str):
    layer, name = qualified.split(".")
    return spark.read.format("delta").load(str(root / layer / name))
