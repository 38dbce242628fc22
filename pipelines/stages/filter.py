"""filter: ``silver.documents_dedup`` → ``silver.documents_clean`` + ``silver.filter_decisions``.

The rules (:mod:`pipelines.kernels.filters`) run in one ``mapInArrow`` pass that gives each
document its cleaned text (C4 line removal, PII replacement), its language and its decision rows.
From that one pass come both tables: the decisions, one row per document and rule that ran, in
``silver.filter_decisions``; the documents whose decisions all passed in ``silver.documents_clean``.

On a local path-mode lake each task writes its share of both tables as Parquet files into the
tables' folders and returns its counts; the driver replaces each table's files in one deltalake
commit (:mod:`pipelines.lake.commits`), so no row goes through the JVM or a cache. Elsewhere
(catalog mode, object stores) the pass is persisted and written twice by Spark's Delta writer.

The run's notes give the preset and its steps, the funnel (documents and whitespace words left
after each step, in order), documents and kept documents per language, how many documents failed
each rule, and the PII replacements.
"""

from __future__ import annotations

import json
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pipelines.lake import commits as delta_files
from pipelines.kernels.filters import FilterParams, filter_batch, funnel
from pipelines.stage import StageContext, StageResult, run_together
from pipelines.lake import arrow_schema
from schemas.catalog import SILVER_DOCUMENTS_CLEAN, SILVER_DOCUMENTS_DEDUP, SILVER_FILTER_DECISIONS


_DECISION = StructType([StructField(f.name, f.dataType, f.nullable) for f in SILVER_FILTER_DECISIONS.schema.fields])
_RESULT = [
    StructField("language", StringType(), True),
    StructField("language_score", DoubleType(), True),
    StructField("filter_kept", BooleanType(), True),
    StructField("filter_first_failed", StringType(), True),
    StructField("words_in", LongType(), True),
    StructField("words_out", LongType(), True),
    StructField("decisions", ArrayType(_DECISION, True), True),
]


OUTPUTS = {"clean": SILVER_DOCUMENTS_CLEAN, "decisions": SILVER_FILTER_DECISIONS}


def _filter_partition(batches, params: FilterParams):
    for batch in batches:
        yield filter_batch(batch, params)


def run(ctx: StageContext) -> StageResult:
    lake = ctx.lake
    docs = lake.read(SILVER_DOCUMENTS_DEDUP)
    cores = ctx.spark.sparkContext.defaultParallelism
    if docs.rdd.getNumPartitions() < cores:
        # fewer input files than cores (a small lake): a shuffle costs far less than an idle core
        docs = docs.repartition(cores)
    params = FilterParams.from_config(ctx.cfg.filter)   # the rules, their lists read here on the driver
    steps = params.steps()
    roots = {kind: lake.direct_location(spec) for kind, spec in OUTPUTS.items()}
    if all(roots.values()):
        groups, by_rule = _write_with_deltalake(lake, docs, params, roots)
    else:
        groups, by_rule = _write_with_spark(lake, docs, params)

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
        input_versions={SILVER_DOCUMENTS_DEDUP.qualified_name: lake.version(SILVER_DOCUMENTS_DEDUP)},
        output_versions={t.qualified_name: lake.version(t) for t in (SILVER_DOCUMENTS_CLEAN, SILVER_FILTER_DECISIONS)},
        notes={"preset": ctx.cfg.filter.preset, "steps": list(steps), "funnel": stages,
               "languages": dict(sorted(languages.items(), key=lambda kv: -kv[1]["documents"])),
               "failed_by_filter": dict(sorted(failed.items())), "pii_replaced": pii},
    )


#: ``{(first failed step or None, language): [documents, words_in, words_out]}``
Groups = dict[tuple[str | None, str | None], list[int]]
#: ``{rule: [documents that failed it, sum of its measured values]}``
ByRule = dict[str, list]


def _filter_to_files(batches, *, params: FilterParams, roots: dict[str, str], stats: dict[str, list[str]]):
    """A task: run the rules on its documents and write the kept ones and every decision row as
    one Parquet file each into the two tables' folders. Yields one row: JSON of its funnel groups,
    per-rule counts and each written file's Delta add action."""
    schemas = {kind: arrow_schema(spec) for kind, spec in OUTPUTS.items()}
    groups: Groups = {}
    by_rule: ByRule = {}
    with delta_files.PartFiles(roots, schemas) as files:
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
              "adds": files.adds(stats)}
    yield pa.RecordBatch.from_pydict({"detail": [json.dumps(detail)]})


def _add(into: dict, key, values) -> None:
    slot = into.setdefault(key, [0] * len(values))
    for i, v in enumerate(values):
        slot[i] += v


def _write_with_deltalake(lake, docs, params: FilterParams, roots: dict[str, str]) -> tuple[Groups, ByRule]:
    """Tasks write both tables' files; the driver replaces each table's files with them in one
    deltalake commit. Written files no commit names are removed if a commit fails."""
    stats = {kind: lake.stats_columns(spec) for kind, spec in OUTPUTS.items()}
    rows = docs.mapInArrow(partial(_filter_to_files, params=params, roots=roots, stats=stats),
                           "detail string").collect()
    details = [json.loads(r.detail) for r in rows]
    lake.replace_with_files(OUTPUTS, roots, delta_files.task_adds(details, OUTPUTS), operation="filter")
    groups: Groups = {}
    by_rule: ByRule = {}
    for d in details:
        for first_failed, language, *counts in d["groups"]:
            _add(groups, (first_failed, language), counts)
        for rule, *counts in d["rules"]:
            _add(by_rule, rule, counts)
    return groups, by_rule


def _write_with_spark(lake, docs, params: FilterParams) -> tuple[Groups, ByRule]:
    """The pass persisted once and written twice by Spark's Delta writer (catalog mode, object
    stores); the funnel groups and per-rule counts read from the cache."""
    schema = StructType([f for f in docs.schema.fields if f.name not in {r.name for r in _RESULT}] + _RESULT)
    # One pass computes everything; persisted so the two writes and the summaries do not re-run it.
    result = docs.mapInArrow(partial(_filter_partition, params=params), schema).persist(StorageLevel.MEMORY_AND_DISK)
    decisions = result.select(F.explode("decisions").alias("d")).select("d.*")
    try:
        lake.overwrite(SILVER_FILTER_DECISIONS, decisions)  # runs the kernel and fills the cache
        clean_rows = result.filter(F.col("filter_kept")).select(*SILVER_DOCUMENTS_CLEAN.columns)
        by_group = result.groupBy("filter_first_failed", "language").agg(
            F.count(F.lit(1)).alias("n"), F.sum("words_in").alias("wi"), F.sum("words_out").alias("wo"))
        by_filter = decisions.groupBy("filter").agg(
            F.sum(F.when(F.col("passed"), 0).otherwise(1)).alias("failed"), F.sum("value").alias("total"))
        # The rest only reads the cache: small jobs whose Delta commit and task start-ups leave the
        # cores idle when run one after another, so they run together (a 600-document stage took
        # half the time).
        _, groups, by_rule = run_together((lake.overwrite, SILVER_DOCUMENTS_CLEAN, clean_rows),
                                          (by_group.collect,), (by_filter.collect,))
    finally:
        result.unpersist()
    return ({(g["filter_first_failed"], g["language"]): [g["n"], g["wi"] or 0, g["wo"] or 0] for g in groups},
            {r["filter"]: [r["failed"], r["total"] or 0.0] for r in by_rule})
