"""tokenize: ``silver.documents_clean`` → ``gold.token_sequences`` + ``gold.document_tokens``.

Documents are spread over ``tokenize.pack_groups`` groups by a hash of their doc_id (xxhash64,
stable across Spark versions), sorted by doc_id inside each group and packed there by
:func:`pipelines.kernels.tokens.pack_batches` (whole groups per Spark task: as many tasks as
groups, or as Spark's default parallelism when that is less, by a range of groups; one per
:data:`MIN_TASK_DOCUMENTS` rows of its input at most: all of it on a full run, what it gained on
an incremental one), so no data passes through
the driver. Which task packs a group changes no row: each group is packed on its own. Each task also
derives its documents' ``gold.document_tokens`` rows from the sequences it packed
(:func:`document_rows`), so every document is tokenized once. The tasks stage both tables'
Parquet files and the lake publishes each table's in one commit (:mod:`pipelines.lake`).

Conservation (checked by the tests on real data, after every run): ``sum(token_sequences.num_tokens)
== sum(document_tokens.num_tokens) + count(document_tokens)`` (one separator after each document),
and ``count(document_tokens) == count(documents_clean)``.

**Mode.** :func:`pipelines.incremental.plan` with ``upstream=("filter",)`` and the hash of the
``tokenize`` section (and of the tokenizer file it names): ``--full``, the first run, a config
change, an output written outside a finished run, or a full filter rebuild make a full run, which
packs every document and replaces both tables (``replace=ALL``). The notes carry ``mode``,
``full_because`` and ``stage_config_hash``.

**Incremental.** The packed documents are the ``doc_ids`` of ``gold.token_sequences`` (not
``gold.document_tokens``, whose rows ``crawlake forget`` deletes first). New documents (in
``silver.documents_clean``, not packed; looked for in the files it gained since this stage's last
successful run, a version diff of its log) are packed as above into new sequences appended to their
group: ``seq_index`` goes on after the group's greatest one; existing rows are not touched by
additions, so a group's last row before the run may stay partly filled. Removed documents (packed,
no longer clean; looked for only when ``silver.documents_clean``'s log shows removed rows since
this stage's last run) are cut out of the rows that hold any of their tokens, one task per group
concerned (:func:`pipelines.kernels.tokens.remove_documents`): the row's other tokens shift left,
documents keep their order and a document running on from the previous row stays at offset 0; a
row left without tokens is deleted. Only the changed rows are written, each table in one commit
(:class:`~pipelines.lake.Keys`: ``seq_id`` — new and rewritten rows, deleted rows; ``doc_id`` — new
documents, those starting in a rewritten row with their new offset, removed ones). Untouched
sequences keep their ``seq_id`` and content; a run with nothing new or removed commits nothing.
Notes: ``documents_added``, ``documents_removed``, ``sequences_added``, ``sequences_rewritten``,
``sequences_deleted``.

Layout versus a full rebuild over the same documents: the same documents with the same tokens
(each document's token stream is its tokenization plus the separator), but not the same rows:
an incremental run's sequences are the earlier runs' rows (possibly partly filled) plus rows
appended per group, each group's appended documents in doc_id order after the earlier ones.
The index of a deleted group-last row is not remembered, so a later run may give it to a new row.
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
from pipelines.config import TokenizeConfig
from pipelines.kernels.tokens import document_rows, pack_batches, remove_documents, separator_ids
from pipelines.session import task_count
from pipelines.stage import StageContext, StageResult
from schemas.catalog import GOLD_DOCUMENT_TOKENS, GOLD_TOKEN_SEQUENCES, SILVER_DOCUMENTS_CLEAN

OUTPUTS = {"sequences": GOLD_TOKEN_SEQUENCES, "documents": GOLD_DOCUMENT_TOKENS}
#: Documents per packing task at least on an incremental run: a task's fixed cost (a Python
#: worker, the tokenizer, an audit per staged file) is about that many documents' tokenizing.
MIN_TASK_DOCUMENTS = 1000
#: What a run counts: documents read; sequences, their tokens, documents and document tokens packed.
COUNTS = ("documents_in", "sequences", "tokens", "documents", "document_tokens")


def config_hash(cfg) -> str:
    """The hash of the ``tokenize`` section and of the tokenizer file it names, if any
    (:func:`pipelines.incremental.config_hash`)."""
    return incremental.config_hash(cfg, ("tokenize",), [cfg.tokenize.tokenizer])


def run(ctx: StageContext) -> StageResult:
    lake, cfg = ctx.lake, ctx.cfg.tokenize
    params = cfg   # the kernel takes the tokenize section as it is
    _, pad = separator_ids(params)  # fail on the driver, before any task, if the tokenizer is unusable
    plan = incremental.plan(ctx, "tokenize", config_hash(ctx.cfg), tuple(OUTPUTS.values()), upstream=("filter",))
    first_index: dict[int, int] = {}
    gone: list = []
    if plan.full:
        docs, rows = lake.read_counted(SILVER_DOCUMENTS_CLEAN)
    else:
        since = incremental.last_input_version(ctx, "tokenize", SILVER_DOCUMENTS_CLEAN)
        look = lake.removed_rows_since(SILVER_DOCUMENTS_CLEAN, since)
        added, rows = lake.read_counted(SILVER_DOCUMENTS_CLEAN, added_since=since)
        docs, gone, first_index = _increment(lake, lake.read(SILVER_DOCUMENTS_CLEAN), added, rows, look)
    # a task's fixed cost is worth MIN_TASK_DOCUMENTS documents' packing; the input's rows (all of
    # them, or those added since: the log's counts) bound the documents to pack from above
    tasks = task_count(rows, MIN_TASK_DOCUMENTS, min(cfg.pack_groups, ctx.spark.sparkContext.defaultParallelism))
    # task t packs the groups g with g * tasks // pack_groups == t: a range of whole groups, by
    # arithmetic (a range partitioner would sample the input in a job of its own first); a single
    # task reads the input itself, with no shuffle before it
    grouped = (docs.select("doc_id", "text")
               .withColumn("pack_group", F.pmod(F.xxhash64("doc_id"), F.lit(cfg.pack_groups)).cast("int")))
    grouped = (grouped.coalesce(1) if tasks == 1 else
               grouped.repartitionById(tasks, (F.col("pack_group") * tasks / cfg.pack_groups).cast("int")))
    grouped = grouped.sortWithinPartitions("pack_group", "doc_id")
    with ctx.staging(OUTPUTS) as staging:
        task = partial(_pack_to_files, params=params, targets=staging.targets, first_index=first_index)
        details = [json.loads(r.detail) for r in grouped.mapInArrow(task, "detail string").collect()]
        repacked = {"rewritten": 0, "deleted": []}
        if gone:   # the removed documents' groups, one task each: cut them out of their sequences
            groups = sorted({r.pack_group for r in gone})
            held = (lake.read(GOLD_TOKEN_SEQUENCES).filter(F.col("pack_group").isin(groups))
                    .repartition(len(groups), "pack_group"))
            task = partial(_remove_to_files, removed=frozenset(r.doc_id for r in gone), pad=pad,
                           targets=staging.targets)
            cut = [json.loads(r.detail) for r in held.mapInArrow(task, "detail string").collect()]
            details += cut
            repacked = {"rewritten": sum(d["rewritten"] for d in cut),
                        "deleted": sorted(s for d in cut for s in d["deleted"])}
        staging.add(details)
        replace = {"sequences": ALL, "documents": ALL} if plan.full else {
            "sequences": Keys("seq_id", tuple(repacked["deleted"])),
            "documents": Keys("doc_id", tuple(sorted(r.doc_id for r in gone)))}
        for kind in OUTPUTS:   # nothing added or removed: no commit
            if replace[kind] == ALL or staging.files[kind] or replace[kind].also:
                staging.publish(kind, replace=replace[kind], operation="tokenize")
    counts = {key: sum(d["counts"][key] for d in details if "counts" in d) for key in COUNTS}
    return StageResult(
        rows_in=counts["documents_in"], rows_out=counts["sequences"] + repacked["rewritten"],
        notes={**plan.notes(), "documents_added": counts["documents"], "documents_removed": len(gone),
               "sequences_added": counts["sequences"], "sequences_rewritten": repacked["rewritten"],
               "sequences_deleted": len(repacked["deleted"]),
               "tokens": counts["tokens"], "document_tokens": counts["document_tokens"],
               "separators": counts["documents"], "seq_len": cfg.seq_len, "tokenizer": cfg.tokenizer},
    )


def _increment(lake, docs, added, added_rows: int, look_for_removed: bool):
    """What an incremental run does: ``(new documents, [(doc_id, pack_group)] of the removed
    ones, {pack_group: seq_index of its next new sequence})``. ``added``: the input's rows
    committed since this stage's last successful run (a superset), where the new documents are:
    that run packed every document of the version it started from; ``added_rows``: their number.
    The packed documents are read from the sequences' ``doc_ids`` (``crawlake forget`` deletes
    ``gold.document_tokens`` rows before this stage runs); collects to the driver only the removed
    documents and one row per group.
    Removed documents are looked for only when ``look_for_removed`` (rows left
    ``silver.documents_clean`` since this stage's last run: a version diff)."""
    seqs = lake.read(GOLD_TOKEN_SEQUENCES)
    packed = seqs.select("pack_group", F.explode("doc_ids").alias("doc_id"))
    keys = docs.select("doc_id")
    gone = packed.join(keys, "doc_id", "left_anti").collect() if look_for_removed else []
    new = incremental.not_yet_in(lake.spark, added, added_rows, packed)
    # after the group's greatest index before this run, so this run's deletions free no index for
    # it; two integer columns, aggregated on the driver
    last = lake.read_arrow(GOLD_TOKEN_SEQUENCES, ["pack_group", "seq_index"]).group_by("pack_group").aggregate(
        [("seq_index", "max")])
    first_index = dict(zip(last["pack_group"].to_pylist(), (i + 1 for i in last["seq_index_max"].to_pylist())))
    return new, gone, first_index


def _pack_to_files(batches, *, params: TokenizeConfig, targets: dict[str, Target], first_index: dict[int, int]):
    """A task: pack its groups' documents (:func:`pack_batches`, each group's first new sequence
    at ``first_index``) and stage the sequences and their :func:`document_rows` as one Parquet file
    each for the two tables. Yields one row: JSON of the counts and its staged files."""
    counts = dict.fromkeys(COUNTS, 0)

    def counted(batches):
        for batch in batches:
            counts["documents_in"] += batch.num_rows
            yield batch

    with TableFiles(targets) as files:
        for seqs in pack_batches(counted(batches), params, first_index):
            files.write("sequences", seqs)
            files.write("documents", document_rows(seqs))
            counts["sequences"] += seqs.num_rows
            counts["tokens"] += pc.sum(seqs.column("num_tokens")).as_py() or 0
            counts["documents"] += len(pc.list_flatten(seqs.column("doc_ids")))
            counts["document_tokens"] += pc.sum(pc.list_flatten(seqs.column("doc_num_tokens"))).as_py() or 0
    yield pa.RecordBatch.from_pydict({"detail": [json.dumps({"counts": counts, **files.report()})]})


def _remove_to_files(batches, *, removed: frozenset, pad: int, targets: dict[str, Target]):
    """A task: every sequence of its groups in, the ``removed`` documents cut out
    (:func:`remove_documents`); stages the rewritten rows and the :func:`document_rows` of the
    documents starting in them. Yields one row: JSON of the rewritten count, the seq_ids of rows
    left empty, and its staged files."""
    batches = list(batches)
    rewritten, deleted = remove_documents(pa.Table.from_batches(batches), removed, pad) if batches else (None, [])
    with TableFiles(targets) as files:
        for batch in rewritten.to_batches() if rewritten is not None else ():
            files.write("sequences", batch)
            files.write("documents", document_rows(batch))
    yield pa.RecordBatch.from_pydict({"detail": [json.dumps(
        {"rewritten": rewritten.num_rows if rewritten is not None else 0, "deleted": deleted, **files.report()})]})
