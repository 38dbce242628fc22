"""``crawlake report``: one self-contained HTML file about a lake, readable without network.

Sections (:mod:`pipelines.report.sections`): the document funnel per filter step (documents and
words, overall and per top language); the top failing rules with their thresholds and the value
distributions of three; dedup (exact vs near removed, cluster sizes, estimated Jaccard of removed
documents, the 10 largest clusters with their kept URL); document length, tokens per document and
sequence fill; click logs (rows, quarantine by reason, CTR per day, vocabulary sizes); runs
(stage seconds and rows/s per run, quality gates, table versions); 20 sampled removed documents
with the decision that removed each.

The numbers are read without Spark (:mod:`pipelines.report.lakedata`), so a report needs a
path-mode lake (a folder or an object-store URL). A table the lake lacks leaves its section
saying which stage fills it.

    from pipelines.report import build_report
    built = build_report("lake", "lake/report.html")   # Built(path, seconds, sections, charts)
"""

from __future__ import annotations

import html
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.lake import read as lake_read


class NoTables(ValueError):
    """The lake root holds none of the catalog's tables."""


@dataclass
class Built:
    """A written report: ``path``, ``seconds`` it took (reading and rendering), the section keys
    that have data, and how many charts the page draws."""
    path: Path
    seconds: float
    sections: list[str]
    charts: int


def _root(lake: Any) -> str:
    return lake_read.lake_root(lake)


def build_report(lake: Any, out: str | os.PathLike | None = None, *, seed: int = 0) -> Built:
    """Write the report of ``lake`` (a ``Config``, ``LakeConfig`` or lake root: see
    :func:`pipelines.lake.read.lake_root`) to ``out`` (default ``<lake root>/report.html``; a
    local path). ``seed`` picks the sampled removed documents.

    Raises :class:`NoTables` when the lake has none of the catalog's tables, and ValueError for
    a catalog-mode lake.
    """
    from pipelines import ledger
    from pipelines.report import page, sections
    from pipelines.report.lakedata import collect

    t0 = time.perf_counter()
    root = _root(lake)
    data = collect(root, seed=seed)
    if not data.any_table:
        raise NoTables(f"no crawlake tables under {root} (run `crawlake run --lake-root {root}` first)")
    parts = [make(data) for make in sections.SECTIONS]
    target = Path(out) if out is not None else Path(_local_root(root)) / "report.html"
    info = {t.name: t for t in data.tables}

    def rows(name: str) -> str | None:
        t = info.get(name)
        return f"{t.rows:,}" if t is not None and t.exists and t.rows is not None else None

    kpis = [(v, label) for v, label in (
        (rows("bronze.documents"), "documents ingested"), (rows("silver.documents_dedup"), "after dedup"),
        (rows("silver.documents_clean"), "clean documents"), (rows("gold.token_sequences"), "training sequences"),
        (f"{data.seq_stats['tokens']:,}" if "tokens" in data.seq_stats else None, "tokens"),
        (rows("gold.embeddings"), "embedded chunks"), (rows("bronze.clicks"), "click rows"),
    ) if v is not None]
    meta = (f"lake <code>{html.escape(root)}</code> · {sum(t.exists for t in data.tables)} of "
            f"{len(data.tables)} tables · generated {page.generated_at()}")
    body = page.render(parts, title="crawlake report", meta=meta, kpis=kpis, footer="")
    seconds = time.perf_counter() - t0
    body = body.replace("<footer></footer>", f"<footer>{html.escape(ledger.code_version())} · built in "
                                              f"{seconds:.1f} s without Spark · every chart and script is in this "
                                              f"file</footer>", 1)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(body, encoding="utf-8")
    tmp.replace(target)
    return Built(target, time.perf_counter() - t0, [s.key for s in parts if not s.empty],
                 sum(len(s.charts) for s in parts))


def _local_root(root: str) -> str:
    if "://" in root and not root.startswith("file://"):
        raise ValueError(f"the lake root {root} is not a local folder: give the report a local --out path")
    return lake_read._local(root)
