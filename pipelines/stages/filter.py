"""filter: ``silver.documents_dedup`` → ``silver.documents_clean`` + ``silver.filter_decisions``.

The rules (:mod:`pipelines.kernels.filters`) run in one ``mapInArrow`` pass that gives each
document its cleaned text (C4 line removal, PII replacement), its language and its decision rows.
From that one pass come both tables: the decisions, one row per document and rule that ran, in
``silver.filter_decisions``; the documents whose decisions all passed in ``silver.documents_clean``.

There is a task per core, fewer for a small input (:data:`MIN_TASK_DOCUMENTS` each at least,
counted from the input's log). Each task stages its share of both tables as Parquet files and
returns its counts; the lake publishes each table's files in one commit
(:mod:`pipelines.lake`), so the kernel runs once and nothing is cached.

**Incremental.** The state lives in the outputs: a document is decided when
``silver.filter_decisions`` holds its ``language`` row (language ID runs on every document, and
a document's rows are published in one commit and removed together). A run reads only ``doc_id``
from the input and ``silver.documents_clean`` and the ``language`` rows' ``doc_id`` from the
decisions (one key per decided document, not one per document and rule), and decides the input
documents that have no decision rows yet; the decided ``doc_id`` values no longer
in the input (a takedown, a re-ingested file that lost the page, a document dedup now removes)
leave both outputs. A changed page is a new document: ``doc_id`` is the hash of the WARC-Record-ID,
which names one capture, and dedup decides each ``doc_id`` once, so a ``doc_id``'s row in
``silver.documents_dedup`` does not change under an incremental dedup. (A text that changes under
the same ``doc_id`` comes from a re-ingest with other ingest settings, which ingest records as a
full rebuild: this stage then rebuilds in full too, ``upstream=("ingest",)``.) Each table is published with
:class:`~pipelines.lake.Keys`: in one commit the new documents' rows are added and the rows of
documents that left are removed. The run costs the kernel over the new documents only, plus
reading the rows of the input's files added since this stage's last successful run (a version
diff of its log, :meth:`pipelines.lake.Lake.read` ``added_since``), where every undecided document
is: that run decided every document of the version it started from. The keys of the input and the
outputs are read (to find what leaves) only when the input's log shows rows removed since that
run; otherwise nothing left, and the run reads nothing of the history: when the input only
gained rows since, the new documents' rows are appended (no stored file is searched for their
keys); after a compaction of the input, whose new files hold documents decided before, they are
published by key as above.

**Full rebuild.** On the first run, with ``crawlake run --full [filter]``, when the ``filter``
config section (preset, thresholds, languages, lists — and the content of the blocklist and
bad-words files it names) hashes differently from the last successful run's, or when an output
was committed by a run that did not finish, every input document is decided again and both
tables are replaced (``replace=ALL``). The notes say which: ``mode`` (``full`` | ``incremental``)
and ``full_because`` (:mod:`pipelines.incremental`), with ``stage_config_hash``, which
``ops.runs.notes`` keeps for the next run. A later stage that reads ``silver.documents_clean``
incrementally passes ``upstream=("filter",)`` to :func:`pipelines.incremental.plan` to rebuild in
full after this stage did (tokenize does).

**Crashes.** ``silver.documents_clean`` is published before ``silver.filter_decisions``, and the
decisions mark documents as decided. A run that dies between the two commits leaves clean rows of
documents that have no decisions yet: the next run decides them again and its clean publish
replaces those rows (it removes every clean row whose ``doc_id`` is not both decided and in the
input), so a re-run converges to the same tables. A full rebuild that dies there leaves outputs
whose versions no finished run recorded, so the next run rebuilds in full.

Determinism: a document's decisions and clean row depend on that document and the config only, so
an incremental run after a full one leaves the same rows as one full run over everything.

The run's notes describe the documents decided in this run (``rows_in``, ``rows_out`` likewise):
the preset and its steps, the funnel (documents and whitespace words left after each step, in
order), documents and kept documents per language, how many documents failed each rule, and the
PII replacements; plus, on an incremental run, ``removed_by_table`` (documents removed from each output:
``{table: documents}``). Counts over the whole tables are read from the tables
(``crawlake report``).
"""

from __future__ import annotations

import json
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from pipelines import incremental
from pipelines.lake import ALL, Keys
from pipelines.lake.files import TableFiles, Target
from pipelines.kernels.filters import LANGUAGE, FilterParams, filter_batch, funnel
from pipelines.session import local_checkpoint, task_count
from pipelines.stage import StageContext, StageResult
from schemas.catalog import SILVER_DOCUMENTS_CLEAN, SILVER_DOCUMENTS_DEDUP, SILVER_FILTER_DECISIONS


OUTPUTS = {"clean": SILVER_DOCUMENTS_CLEAN, "decisions": SILVER_FILTER_DECISIONS}
#: Documents per task at least: a task's fixed cost (a Python worker, the rules' models and
#: lists, an audit per staged file, object-store writes) is about that many documents' filtering.
MIN_TASK_DOCUMENTS = 1000


def config_hash(cfg) -> str:
    """The hash of what shapes this stage's output: the ``filter`` section and the content of the
    blocklist and bad-words files it names (:func:`pipelines.incremental.config_hash`)."""
    f = cfg.filter
    files = [*f.url.domain_blocklists, *f.url.url_blocklists, *f.c4.bad_words_paths.values()]
    return incremental.config_hash(cfg, ("filter",), files)


def run(ctx: StageContext) -> StageResult:
    lake = ctx.lake
    params = FilterParams.from_config(ctx.cfg.filter)   # the rules, their lists read here on the driver
    steps = params.steps()
    plan = incremental.plan(ctx, "filter", config_hash(ctx.cfg), tuple(OUTPUTS.values()), upstream=("ingest",))
    cores = ctx.spark.sparkContext.defaultParallelism
    removed: dict[str, int] | None = None
    if plan.full:
        replace = {"clean": ALL, "decisions": ALL}
        docs, rows = lake.read_counted(SILVER_DOCUMENTS_DEDUP)
        tasks = task_count(rows, MIN_TASK_DOCUMENTS, cores)
        if docs.rdd.getNumPartitions() < tasks:
            # fewer input files than tasks (a small lake): a shuffle costs far less than an idle core
            docs = docs.repartition(tasks)
        elif tasks < cores:   # a small input in more files than tasks: fewer, fuller tasks read them
            docs = docs.coalesce(tasks)
    else:
        since = incremental.last_input_version(ctx, "filter", SILVER_DOCUMENTS_DEDUP)
        changes = lake.changes_since(SILVER_DOCUMENTS_DEDUP, since)
        added, rows = lake.read_counted(SILVER_DOCUMENTS_DEDUP, added_since=since)
        docs, replace, removed = _increment(lake, lake.read(SILVER_DOCUMENTS_DEDUP), added, task_count(rows, MIN_TASK_DOCUMENTS, cores),
                                           look_for_removed="removed" in changes, rewritten="rewritten" in changes)
    with ctx.staging(OUTPUTS) as staging:
        task = partial(_filter_to_files, params=params, targets=staging.targets)
        details = [json.loads(r.detail) for r in docs.mapInArrow(task, "detail string").collect()]
        staging.add(details)
        for kind in OUTPUTS:   # clean first: the decisions mark documents as decided
            if replace[kind] == ALL or staging.files[kind] or isinstance(replace[kind], Keys) and replace[kind].also:
                staging.publish(kind, replace=replace[kind], operation="filter")
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
    notes = {**plan.notes(), "preset": ctx.cfg.filter.preset, "steps": list(steps), "funnel": stages,
             "languages": dict(sorted(languages.items(), key=lambda kv: -kv[1]["documents"])),
             "failed_by_filter": dict(sorted(failed.items())), "pii_replaced": pii}
    if removed is not None:
        notes["removed_by_table"] = removed
    return StageResult(rows_in=rows_in, rows_out=rows_out, notes=notes)


def _increment(lake, docs, added, tasks: int, *, look_for_removed: bool, rewritten: bool):
    """What an incremental run does: ``(documents to decide, {kind: Keys, or None to append},
    {table: documents removed})``. ``added``: the input's rows committed since this stage's last run (a superset),
    where the undecided documents are; only they are read beyond their keys.

    Unless ``look_for_removed`` (rows left the input since this stage's last run: a version
    diff), nothing can leave the outputs, since a run that died part way makes the next one full
    (the plan): the added rows are then decided and no key is read. They are new documents,
    appended (no stored file is read to look for their keys), unless ``rewritten`` (a compaction
    since: its files hold documents decided before, decided again and their rows replaced by
    key). Otherwise reads the ``doc_id``
    keys of the input, the clean rows and the decisions'
    :data:`~pipelines.kernels.filters.presets.LANGUAGE` rows (one per decided document);
    collects to the driver only the keys that leave an output: decided documents no longer in the input, and clean rows
    not both decided and in the input (of documents that left, or left behind by a run that died
    between its two commits, whose documents are decided again now)."""
    if not look_for_removed:
        replace = {kind: Keys("doc_id") if rewritten else None for kind in OUTPUTS}
        return added.repartition(tasks), replace, dict.fromkeys((spec.qualified_name for spec in OUTPUTS.values()), 0)

    def flags(df, mark: str):   # doc_id and which of (i)nput, (d)ecisions, (c)lean holds it
        return df.select("doc_id", *(F.lit(name == mark).alias(name) for name in "idc"))

    keys = docs.select("doc_id")
    decided = lake.read(SILVER_FILTER_DECISIONS).filter(F.col("filter") == LANGUAGE)
    marks = local_checkpoint(   # used twice below: the three reads and the shuffle run once
        flags(keys, "i")
        .unionByName(flags(decided, "d"))
        .unionByName(flags(lake.read(SILVER_DOCUMENTS_CLEAN), "c"))
        .groupBy("doc_id").agg(*(F.max(name).alias(name) for name in "idc")))   # one shuffle of keys
    leaving = marks.filter("(d AND NOT i) OR (c AND NOT (d AND i))").collect()
    gone = sorted(r.doc_id for r in leaving if r.d and not r.i)
    stale = sorted(r.doc_id for r in leaving if r.c)
    todo = added.join(marks.filter("i AND NOT d").select("doc_id"), "doc_id", "left_semi").repartition(tasks)
    replace = {"clean": Keys("doc_id", tuple(stale)), "decisions": Keys("doc_id", tuple(gone))}
    removed = {SILVER_DOCUMENTS_CLEAN.qualified_name: sum(1 for r in leaving if r.c and not r.i),
               SILVER_FILTER_DECISIONS.qualified_name: len(gone)}
    return todo, replace, removed


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
