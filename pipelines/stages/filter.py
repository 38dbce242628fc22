"""filter: ``silver.documents_dedup`` → ``silver.documents_clean`` + ``silver.filter_decisions``.

The rules (:mod:`pipelines.kernels.filters`) run in one ``mapInArrow`` pass that gives each
document its cleaned text (C4 line removal, PII replacement), its language and its decision rows.
From that one pass come both tables: the decisions, one row per document and rule that ran, in
``silver.filter_decisions``; the documents whose decisions all passed in ``silver.documents_clean``.

Each task stages its share of both tables as Parquet files and returns its counts; the lake
replaces each table with them in one commit (:mod:`pipelines.lake`), so the kernel runs once and
nothing is cached.

The run's notes give the preset and its steps, the funnel (documents and whitespace words left
after each step, in order), documents and kept documents per language, how many documents failed
each rule, and the PII replacements.
"""

from __future__ import annotations

import json
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pipelines.lake import ALL
from pipelines.lake.files import TableFiles, Target
from pipelines.kernels.filters import FilterParams, filter_batch, funnel
from pipelines.stage import StageContext, StageResult
from schemas.catalog import SILVER_DOCUMENTS_CLEAN, SILVER_DOCUMENTS_DEDUP, SILVER_FILTER_DECISIONS


OUTPUTS = {"clean": SILVER_DOCUMENTS_CLEAN, "decisions": SILVER_FILTER_DECISIONS}


def run(ctx: StageContext) -> StageResult:
    lake = ctx.lake
    docs = lake.read(SILVER_DOCUMENTS_DEDUP)
    cores = ctx.spark.sparkContext.defaultParallelism
    if docs.rdd.getNumPartitions() < cores:
        # fewer input files than cores (a small lake): a shuffle costs far less than an idle core
        docs = docs.repartition(cores)
    params = FilterParams.from_config(ctx.cfg.filter)   # the rules, their lists read here on the driver
    steps = params.steps()
    with ctx.staging(OUTPUTS) as staging:
        task = partial(_filter_to_files, params=params, targets=staging.targets)
        details = [json.loads(r.detail) for r in docs.mapInArrow(task, "detail string").collect()]
        staging.add(details)
        for kind in OUTPUTS:
            staging.publish(kind, replace=ALL, operation="filter")
    groups: Groups = {}
    by_rule: ByRule = {}
    for d in details:
        for first_failed, language, *counts in d["groups"]:
            _add(groups, (first_failed, language), counts)
        for rule, *counts in d["rules"]:
            _add(by_rule, rule, counts)

    languages: dict[str, dict[str, int]] = {}
    for (first_failed, language), (n, _, _) in groups.items():
        lang = languages.setdefault(language or "unknown", {"documents": 0, "kept": 0})
        lang["documents"] += n
        lang["kept"] += n if first_failed is None else 0
    stages = funnel([(first_failed, n, wi, wo) for (first_failed, _), (n, wi, wo) in groups.items()], steps)
    rows_in = stages[0]["documents"]
    rows_out = stages[-1]["documents"]
    failed = {rule: n for rule, (n, _) in by_rule.items() if n}
    pii = {rule: int(total) for rule, (_, total) in by_rule.items() if rule.startswith("pii_")}
    return StageResult(
        rows_in=rows_in, rows_out=rows_out,
        notes={"preset": ctx.cfg.filter.preset, "steps": list(steps), "funnel": stages,
               "languages": dict(sorted(languages.items(), key=lambda kv: -kv[1]["documents"])),
               "failed_by_filter": dict(sorted(failed.items())), "pii_replaced": pii},
    )


#: ``{(first failed step or None, language): [documents, words_in, words_out]}``
Groups = dict[tuple[str | None, str | None], list[int]]
#: ``{rule: [documents that failed it, sum of its measured values]}``
ByRule = dict[str, list]


def _filter_to_files(batches, *, params: FilterParams, targets: dict[str, Target]):
    """A task: run the rules on its documents and stage the kept ones and every decision row as
    one Parquet file each for the two tables. Yields one row: JSON of its funnel groups, per-rule
    counts and its staged files."""
    groups: Groups = {}
    by_rule: ByRule = {}
    with TableFiles(targets) as files:
        for batch in batches:
            out = pa.Table.from_batches([filter_batch(batch, params)])
            files.write("clean", out.filter(out.column("filter_kept")))
            for g in out.group_by(["filter_first_failed", "language"]).aggregate(
                    [("words_in", "count"), ("words_in", "sum"), ("words_out", "sum")]).to_pylist():
                _add(groups, (g["filter_first_failed"], g["language"]),
                     (g["words_in_count"], g["words_in_sum"] or 0, g["words_out_sum"] or 0))
            decisions = pa.Table.from_struct_array(pc.list_flatten(out.column("decisions")))
            files.write("decisions", decisions)
            failed = pc.cast(pc.invert(decisions.column("passed")), pa.int64())
            for r in decisions.append_column("failed", failed).group_by("filter").aggregate(
                    [("failed", "sum"), ("value", "sum")]).to_pylist():
                _add(by_rule, r["filter"], (r["failed_sum"], r["value_sum"] or 0.0))
    detail = {"groups": [[*key, *v] for key, v in groups.items()],
              "rules": [[rule, *v] for rule, v in by_rule.items()],
              **files.report()}
    yield pa.RecordBatch.from_pydict({"detail": [json.dumps(detail)]})


def _add(into: dict, key, values) -> None:
    slot = into.setdefault(key, [0] * len(values))
    for i, v in enumerate(values):
        slot[i] += v
