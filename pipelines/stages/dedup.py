"""dedup: ``bronze.documents`` → ``silver.documents_dedup`` + ``silver.duplicate_clusters``.

Incremental: each run decides only on the bronze documents no earlier run decided on (those in
neither ``silver.documents_dedup`` nor removed in ``silver.duplicate_clusters``), looked for in
the files bronze gained since dedup's last successful run (a version diff of its log; all of
bronze when rows left it since, see below), and matches them
against everything already kept through ``silver.dedup_index``, which holds each kept document's
normalized-text hash, MinHash signature and LSH band hashes. Old documents are never re-hashed.

Each new document's text is normalized and hashed once, for both keys: its normalized-text hash
and its MinHash signature (an exact copy's signature is computed and not used).

1. Exact: new documents with the same normalized-text hash as each other or as a kept document
   form a cluster.
2. Near, on the new exact survivors: MinHash signatures (Broder 1997) and LSH band hashes
   (Leskovec et al., *Mining of Massive Datasets*, ch. 3) in the kernel
   (:mod:`pipelines.kernels.minhash`). The new documents' band rows, plus the index rows of kept
   documents in the same buckets, are grouped by (band, band hash); each bucket member is linked
   to the bucket's smallest doc_id (a star, not all pairs: O(bucket) edges, no bucket held in
   memory). Connected components by iterative min-label propagation in Spark, with the lineage
   cut each round; a graph of at most ``dedup.driver_components_max_edges`` edges is solved on
   the driver instead (scipy), which gives the same components without a job per round.

In each cluster one document is kept. A cluster that holds a document kept by an earlier run
keeps that one (the first of them by the keep rule, if a newcomer bridges several; the others
stay kept in their own clusters) and removes all its new members: a kept document is never
dropped in favour of a newcomer. Otherwise the keep rule (``dedup.keep``; default earliest crawl
date, then longest text, then smallest doc_id) picks it, so re-runs keep the same one. Each
cluster row carries the MinHash estimate of its Jaccard similarity to the kept document.

Documents that left ``bronze.documents`` since they were decided (their file was re-ingested
changed) leave the three tables at the start of an incremental run (looked for only when bronze's
log shows removed rows since dedup's last run), and every cluster that held one is dissolved: its
members still in bronze are decided again in this run (a kept one stays kept, from the index), as
a full run over the remaining documents would decide them. A takedown
(``crawlake forget``) removes its documents from all three tables itself, so its removed copies
stay removed (see :mod:`pipelines.forget`).

The first run, the first after a setting that shapes the decisions changed (n-gram, num_perm,
seed, threshold, verify, keep; recorded in the index's ``params``), or one that ``crawlake run
--full`` names, decides on all of ``bronze.documents`` and overwrites the three tables. A run
with no new and no removed documents writes nothing.
Each table gets one commit of files the tasks stage (:meth:`pipelines.lake.Staging.stage`): an
incremental run replaces the rows of the doc_ids it stages (an upsert; in
``silver.duplicate_clusters``, of the (doc_id, method) pairs), a full run the whole table. The
index is committed first and ``silver.documents_dedup`` (which marks kept documents as decided)
last, so a run that dies between them is redone by the next one.
The index holds kept documents only, so a newcomer similar only to a removed document is not
linked to it. Min-label propagation and uncapped buckets remain the simple version; the scale
version (large-star/small-star, bucket caps) is its own piece of work.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DoubleType

from pipelines import incremental
from pipelines.incremental import last_input_version, not_yet_in
from pipelines.config import DedupConfig
from pipelines.kernels import graph
from pipelines.kernels.minhash import (
    INDEX_SCHEMA,
    estimated_jaccard,
    lsh_bands_rows,
    shingle_jaccard,
    signature_batch,
)
from pipelines.session import DOC_ID_BYTES, broadcast_if_fits, counted_checkpoint, local_checkpoint
from pipelines.stage import StageContext, StageResult
from pipelines.lake import ALL, Keys, Lake
from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DEDUP_INDEX, SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS

#: Bytes of one band key row (band, band hash) as Spark holds it, rounded up: sizes a broadcast.
BAND_KEY_BYTES = 32
#: Bytes of one (doc_id or cluster_id, method) row as Spark holds it, rounded up: sizes a broadcast.
CLUSTER_KEY_BYTES = 96
#: The outputs, by the kind their staged files are published as.
OUTPUTS = {"index": SILVER_DEDUP_INDEX, "clusters": SILVER_DUPLICATE_CLUSTERS, "documents": SILVER_DOCUMENTS_DEDUP}
#: The rows an incremental run's staged rows replace, per output: a document's, or for the clusters
#: its row of the method staged (its row in its other method's cluster stays).
_KEYS = {"index": Keys("doc_id"), "clusters": Keys("doc_id", by="method"), "documents": Keys("doc_id")}


def keep_order(keep: list[str] | None = None) -> list[Column]:
    """Sort expressions of the keep rule: the first document in this order is kept.

    ``keep`` holds ``"<column> asc|desc"`` items as validated by :class:`DedupConfig` (default
    earliest crawl date, then longest text, then smallest doc_id). Nulls sort last either way, so a
    missing value never wins; ``doc_id asc`` ends the order when doc_id is not in it.
    """
    keep = DedupConfig().keep if keep is None else keep
    order = []
    for item in keep:
        name, direction = item.split()
        order.append(F.col(name).asc_nulls_last() if direction == "asc" else F.col(name).desc_nulls_last())
    if not any(item.split()[0] == "doc_id" for item in keep):
        order.append(F.col("doc_id").asc())
    return order


def index_params(cfg: DedupConfig, bands: int, rows: int) -> str:
    """The settings that shape dedup decisions, as stored in ``silver.dedup_index.params``."""
    return (f"ngram={cfg.ngram} num_perm={cfg.num_perm} seed={cfg.seed} threshold={cfg.threshold} "
            f"bands={bands} rows={rows} verify={cfg.verify} keep={','.join(cfg.keep)}")


@F.pandas_udf(DoubleType())
def _estimated_jaccard(a: pd.Series, b: pd.Series) -> pd.Series:
    return pd.Series([estimated_jaccard(x, y) for x, y in zip(a, b)], dtype="float64")


def _jaccard_udf(ngram: int):
    @F.pandas_udf(DoubleType())
    def jaccard(a: pd.Series, b: pd.Series) -> pd.Series:
        return pd.Series([shingle_jaccard(x or "", y or "", ngram) for x, y in zip(a, b)])
    return jaccard


def _with_keys(docs: DataFrame, cfg: DedupConfig, counter) -> DataFrame:
    """``docs`` plus the dedup keys of each, from one kernel pass over its text
    (:func:`~pipelines.kernels.minhash.signature_batch`): ``text_hash``, ``signature`` and
    ``band_hashes``, as :data:`INDEX_SCHEMA` types them. ``counter`` (an accumulator) counts the
    documents hashed, re-executions included."""
    keys = from_arrow_schema(pa.schema([f for f in INDEX_SCHEMA if f.name != "doc_id"]))

    @F.arrow_udf(keys)
    def hashed(doc_id: pa.Array, text: pa.Array) -> pa.Array:
        counter.add(len(doc_id))
        out = signature_batch(pa.RecordBatch.from_arrays([doc_id, text], names=["doc_id", "text"]), cfg)
        return pa.StructArray.from_arrays(out.columns[1:], names=out.schema.names[1:])

    return docs.withColumn("_keys", hashed("doc_id", "text")).select(*docs.columns, "_keys.*")


def connected_components(edges: DataFrame, max_iterations: int, driver_max_edges: int = 0) -> DataFrame:
    """``(src, dst)`` undirected edges → ``(doc_id, component)``, component = smallest doc_id.

    The edges are materialized once. Up to ``driver_max_edges`` of them
    (``dedup.driver_components_max_edges``: an incremental run's few new edges, a small crawl) go
    to the driver as Arrow and :func:`pipelines.kernels.graph.components` (scipy) labels them:
    each Spark round is two jobs, seconds on any input. Beyond that, min-label propagation in
    Spark: each round every node takes the smallest label among itself and its neighbours, until
    no label changes. Both give the same rows. Raises RuntimeError if propagation has not
    converged after ``max_iterations`` rounds.
    """
    spark = edges.sparkSession
    edges, count = counted_checkpoint(edges.select("src", "dst"))
    if count == 0:
        return spark.createDataFrame([], "doc_id string, component string")
    if count <= driver_max_edges:
        return spark.createDataFrame(graph.components(edges.toArrow()), "doc_id string, component string")
    both = edges.union(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
    both = local_checkpoint(both.distinct())
    labels = both.select(F.col("src").alias("doc_id")).distinct().withColumn("label", F.col("doc_id"))
    for _ in range(max_iterations):
        proposals = (both.join(labels.withColumnRenamed("doc_id", "src"), "src")
                     .groupBy(F.col("dst").alias("doc_id")).agg(F.min("label").alias("proposal")))
        updated, changed = counted_checkpoint(
            labels.join(proposals, "doc_id", "left")
            .select("doc_id", F.least("label", F.coalesce("proposal", "label")).alias("label"),
                    (F.col("proposal") < F.col("label")).alias("changed")), where="changed")
        labels = updated.drop("changed")
        if changed == 0:
            return labels.withColumnRenamed("label", "component")
    raise RuntimeError(f"connected components did not converge in {max_iterations} rounds (dedup.max_iterations)")


# -- what this run works on ---------------------------------------------------------------------

def _full_because(ctx: StageContext, params: str) -> str | None:
    """Why this run rebuilds in full, or None for an incremental run: ``--full`` named dedup,
    there is no (or an empty) index, the index was built with other settings, or ingest rebuilt in
    full since dedup's last successful run."""
    if ctx.forced_full("dedup"):
        return "--full"
    if not ctx.lake.exists(SILVER_DEDUP_INDEX):
        return "first run"
    # Every row has the same params (a full run overwrites the whole index, an incremental one
    # adds rows with its own, equal, params), so one row tells; an empty index means a full run.
    first = ctx.lake.rows(SILVER_DEDUP_INDEX, ["params"], limit=1)
    if not first:
        return "first run"
    if first[0]["params"] != params:
        return "dedup config changed"
    runs = incremental.succeeded_runs(ctx)
    mine = [r["started_at"] for r in runs if r["stage"] == "dedup"]
    # bronze texts may have changed under the same doc_ids (another extractor): decide them all again
    return "ingest rebuilt in full" if mine and incremental.rebuilt_since(runs, "ingest", mine[-1]) else None


def _new_documents(lake: Lake, incremental: bool, since: int | None) -> DataFrame:
    """Bronze documents no earlier run decided on (all of them for a full run), looked for among
    the rows committed to bronze after version ``since`` (None: all of bronze)."""
    bronze, rows = lake.read_counted(BRONZE_DOCUMENTS, added_since=since)
    if not incremental:
        return bronze
    return not_yet_in(lake.spark, bronze, rows, lake.read(SILVER_DOCUMENTS_DEDUP),
                      lake.read(SILVER_DUPLICATE_CLUSTERS).filter(~F.col("kept")))


def _retire_removed(lake: Lake) -> int:
    """Take the decided documents that left ``bronze.documents`` out of the three tables and
    dissolve every cluster that held one (one whose kept document was taken down excepted);
    returns how many documents left.

    Clusters go first and ``silver.documents_dedup`` last, and the removed set is read from all
    three tables, so a run that dies part way is finished by the next one. The dissolved clusters'
    other members are then undecided (no longer in a cluster), or kept (still in
    ``silver.documents_dedup`` and the index), so this run decides them again.
    """
    clusters = lake.read(SILVER_DUPLICATE_CLUSTERS)
    decided = (lake.read(SILVER_DOCUMENTS_DEDUP).select("doc_id").union(clusters.select("doc_id"))
               .union(lake.read(SILVER_DEDUP_INDEX).select("doc_id")).distinct())
    removed, count = counted_checkpoint(decided.join(lake.read(BRONZE_DOCUMENTS).select("doc_id"), "doc_id", "left_anti"))
    if count:
        # A cluster whose kept document was taken down has no kept row (crawlake forget deleted
        # it): its copies stay removed, only the removed documents' own rows go.
        on = ["cluster_id", "method"]
        dissolved = (clusters.join(removed, "doc_id", "left_semi").select(*on)
                     .join(clusters.filter(F.col("kept")).select(*on), on, "left_semi"))
        rows = (clusters.join(dissolved, on, "left_semi").select("doc_id", "method")
                .union(clusters.join(removed, "doc_id", "left_semi").select("doc_id", "method")))
        gone = sorted(r.doc_id for r in removed.collect())
        by_method: dict[str, list[str]] = {}
        for r in rows.distinct().collect():
            by_method.setdefault(r.method, []).append(r.doc_id)
        for method, ids in sorted(by_method.items()):   # a kept document's row in its other method's cluster stays
            lake.delete_rows(SILVER_DUPLICATE_CLUSTERS, "doc_id", sorted(ids), where={"method": method})
        lake.delete_rows(SILVER_DEDUP_INDEX, "doc_id", gone)
        lake.delete_rows(SILVER_DOCUMENTS_DEDUP, "doc_id", gone)
    return count


def _empty(lake: Lake, spec) -> DataFrame:
    return lake.spark.createDataFrame([], spec.schema)


def _members(docs: DataFrame, columns: list[str], old: bool) -> DataFrame:
    """Cluster candidates: doc_id, ``columns`` and ``_old`` (kept by an earlier run)."""
    return docs.select("doc_id", *columns, F.lit(old).alias("_old"))


# -- clusters -----------------------------------------------------------------------------------

def _clusters(members: DataFrame, component: str, method: str, order: list[Column]) -> DataFrame:
    """Cluster rows for ``members`` grouped by column ``component``.

    ``members`` has doc_id, the keep-rule columns, ``_old`` (kept by an earlier run) and, for
    near clusters, ``signature``. An old member ranks before every new one; old members other than
    the first stay as they were (no row). Only clusters of two or more get rows; every row with
    ``kept`` false is a new document removed. ``jaccard``: 1.0 for exact clusters and kept rows,
    else the MinHash estimate to the kept document's signature. The kept document's doc_id and
    signature come from the ranked window itself (its first row), not from joins back to it.
    """
    group = Window.partitionBy(component)
    ranked = group.orderBy(F.col("_old").desc(), *order)
    rows = (members
            .withColumn("_rank", F.row_number().over(ranked))
            .filter(~F.col("_old") | (F.col("_rank") == 1))
            .withColumn("cluster_size", F.count("*").over(group))
            .filter(F.col("cluster_size") > 1)
            .withColumn("cluster_id", F.first("doc_id").over(ranked)))
    kept = F.col("_rank") == 1
    if method == "exact":
        jaccard = F.lit(1.0)
    else:
        jaccard = F.when(kept, F.lit(1.0)).otherwise(_estimated_jaccard("signature", F.first("signature").over(ranked)))
    return rows.select("doc_id", "cluster_id", F.col("cluster_size").cast("int"), kept.alias("kept"),
                       F.lit(method).alias("method"), jaccard.alias("jaccard"))


def _kept_candidates(new: DataFrame, old: DataFrame, old_docs: DataFrame, columns: list[str], hint) -> DataFrame:
    """The kept documents a new one can meet: those that share a text hash or an LSH bucket
    (band, band hash) with a new document, with their index columns and, from ``old_docs``,
    ``columns`` (the keep rule's; text, to verify). Persisted, so that the steps after read neither table again; the
    caller unpersists it.

    ``hint``: applied to the new documents' keys joined with the kept ones' (a broadcast hint).
    The candidates' doc_ids are found first (from the index's keys only, checkpointed) and
    counted, so that the index rows and ``old_docs`` are narrowed to them where they lie when
    they fit a broadcast, rather than shuffled (signatures and all) to meet them.
    """
    by_text = old.join(hint(new.select("text_hash")), "text_hash", "left_semi").select("doc_id")
    by_band = (_band_rows(old).join(hint(_band_rows(new).select("band", "band_hash")), ["band", "band_hash"], "left_semi")
               .select("doc_id"))
    ids, count = counted_checkpoint(by_text.union(by_band))   # a doc_id met both ways is there twice
    narrow = broadcast_if_fits(old.sparkSession, count * DOC_ID_BYTES)
    found = old.join(narrow(ids), "doc_id", "left_semi")
    docs = old_docs.select("doc_id", *columns).join(narrow(ids), "doc_id", "left_semi")
    return found.join(docs, "doc_id", "left").persist()


def _exact_clusters(new: DataFrame, candidates: DataFrame, keep_cols: list[str], order: list[Column]) -> DataFrame:
    """Exact-duplicate cluster rows: new documents grouped by text hash with the
    :func:`_kept_candidates` ``candidates``."""
    # Kept documents have distinct text hashes (each run removes exact copies), so at most one
    # old member per group.
    columns = ["text_hash", *keep_cols]
    hits = candidates.join(new.select("text_hash"), "text_hash", "left_semi")
    members = _members(new, columns, False).unionByName(_members(hits, columns, True))
    return _clusters(members, "text_hash", "exact", order)


def _near_clusters(survivors: DataFrame, candidates: DataFrame, keep_cols: list[str], order: list[Column],
                   cfg: DedupConfig) -> DataFrame:
    """Near-duplicate cluster rows (with ``jaccard``) of the new exact survivors and the
    :func:`_kept_candidates` ``candidates``, both with their signatures and band hashes."""
    edges = _candidate_edges(survivors, candidates)
    if cfg.verify:
        edges = _verified(edges, survivors.select("doc_id", "text").unionByName(candidates.select("doc_id", "text")), cfg)
    components = connected_components(edges, cfg.max_iterations, cfg.driver_components_max_edges)
    columns = [*keep_cols, "signature"]
    members = _members(survivors, columns, False).unionByName(_members(candidates, columns, True))
    return _clusters(components.join(members, "doc_id"), "component", "near", order)


def _band_rows(docs: DataFrame) -> DataFrame:
    """(doc_id, band, band_hash): one row per LSH band of each document."""
    return docs.select("doc_id", F.posexplode("band_hashes").alias("band", "band_hash"))


def _candidate_edges(survivors: DataFrame, candidates: DataFrame) -> DataFrame:
    """``(src, dst)`` LSH candidate edges among new documents and from new to kept ones."""
    new_bands = _band_rows(survivors)
    old_bands = _band_rows(candidates).join(new_bands.select("band", "band_hash"), ["band", "band_hash"], "left_semi")
    # Star edges: each bucket member links to the bucket's smallest doc_id. A window minimum (which
    # Spark sorts and spills) instead of collecting members, so a huge bucket never sits in memory
    # and no bucket's pairs are materialized.
    bucket = Window.partitionBy("band", "band_hash")
    return (new_bands.unionByName(old_bands).withColumn("src", F.min("doc_id").over(bucket))
            .filter(F.col("src") != F.col("doc_id"))
            .select("src", F.col("doc_id").alias("dst")).distinct())


def _verified(edges: DataFrame, texts: DataFrame, cfg: DedupConfig) -> DataFrame:
    """The edges whose documents' exact shingle Jaccard reaches the threshold; ``texts`` is
    (doc_id, text) of at least every document in an edge.

    LSH false positives never join a cluster. Edges are star edges to the bucket's smallest doc_id,
    so a false positive that is that smallest doc can also hide a true pair in the same bucket
    (rare; documented).
    """
    return (edges.join(texts.withColumnRenamed("doc_id", "src").withColumnRenamed("text", "src_text"), "src")
            .join(texts.withColumnRenamed("doc_id", "dst").withColumnRenamed("text", "dst_text"), "dst")
            .filter(_jaccard_udf(cfg.ngram)("src_text", "dst_text") >= cfg.threshold)
            .select("src", "dst"))


def _with_cluster_sizes(lake: Lake, rows: DataFrame, most_rows: int) -> DataFrame:
    """What an incremental run stages for ``silver.duplicate_clusters``, which is published by
    replacing the stored rows of the (doc_id, method) pairs staged: this run's rows, and the
    stored rows of the clusters they join, with cluster_size recounted. A document's row in its
    other method's cluster (a kept document is in an exact and a near cluster) is not staged and
    stays as it is.

    Stored rows change only in ``cluster_size``: their decision (cluster, kept, method, jaccard)
    is final. ``most_rows`` bounds the number of ``rows`` (an estimate will do): this run's keys
    are broadcast when they fit, so the stored table is read where it lies, not shuffled to meet
    them. The keys are not made distinct first (a semi join does not need it): Spark cannot size
    a checkpoint, and before such a shuffle it built runtime Bloom filters over the whole stored
    table and shipped them in every task.
    """
    small = broadcast_if_fits(lake.spark, most_rows * CLUSTER_KEY_BYTES)
    stored = (lake.read(SILVER_DUPLICATE_CLUSTERS)
              .join(small(rows.select("cluster_id", "method")), ["cluster_id", "method"], "left_semi")
              .join(small(rows.select("doc_id", "method")), ["doc_id", "method"], "left_anti"))
    return (stored.unionByName(rows)
            .withColumn("cluster_size", F.count("*").over(Window.partitionBy("cluster_id", "method")).cast("int")))


# -- the stage ----------------------------------------------------------------------------------

def run(ctx: StageContext) -> StageResult:
    """Deduplicate the bronze documents no earlier run decided on (all of them on a full run).

    A full run (``crawlake run --full dedup``, the first run, or other dedup settings than the
    index was built with) decides every bronze document again and overwrites the three tables.
    Returns rows_in = documents decided on, rows_out = those kept, and notes: mode (full |
    incremental), full_because (why full, or None), new_documents (decided in this run: new in
    bronze, or members of a dissolved cluster), documents_removed (decided documents that left
    bronze, see :func:`_retire_removed`), signatures_computed (documents
    the MinHash kernel hashed: every new document, an exact copy too), bands_x_rows, verified, exact_removed and
    near_removed (this run's).
    Raises RuntimeError when connected components do not converge in ``dedup.max_iterations``.
    """
    lake, cfg = ctx.lake, ctx.cfg.dedup
    bands, rows = lsh_bands_rows(cfg)
    params = index_params(cfg, bands, rows)
    full_because = _full_because(ctx, params)
    incremental = full_because is None
    order = keep_order(cfg.keep)
    keep_cols = [c for c in dict.fromkeys(item.split()[0] for item in cfg.keep) if c != "doc_id"]

    # only when bronze's log shows removed rows since this stage's last run (a version diff)
    since = last_input_version(ctx, "dedup", BRONZE_DOCUMENTS) if incremental else None
    retire = incremental and lake.removed_rows_since(BRONZE_DOCUMENTS, since)
    removed = _retire_removed(lake) if retire else 0
    # The undecided documents are in what bronze gained since this stage's last run, unless rows
    # left it since: members of clusters dissolved for them (now, or by a run that died after
    # that) are in older files, so all of bronze is looked at then.
    since = None if retire else since
    # Both keys of every new document in one pass over its text: the MinHash of an exact copy
    # is wasted, a second pass (and normalization) of the survivors' texts is not made.
    # Checkpointed, not cached: recomputing it after this run's writes would find nothing new.
    hashed = ctx.spark.sparkContext.accumulator(0)
    new, rows_in = counted_checkpoint(_with_keys(_new_documents(lake, incremental, since), cfg, hashed))
    if incremental and rows_in == 0:
        return _result(None, 0, 0, 0, bands, rows, cfg, 0, 0, removed)

    # The new documents' keys (doc_ids, text hashes, band keys: at most rows_in x bands) joined
    # with the kept documents' go to every task when they fit Spark's broadcast threshold: the
    # index is then read where it lies instead of shuffled to meet them.
    hint = broadcast_if_fits(ctx.spark, rows_in * bands * BAND_KEY_BYTES)
    # Kept documents of earlier runs that a new one can meet. A new document is never its own old
    # copy (a run that died after writing the index is redone). A full run has none, and no job
    # looks for them (Spark would still broadcast the new documents' keys to meet an empty side).
    columns = keep_cols + (["text"] if cfg.verify else [])
    if incremental:
        old = lake.read(SILVER_DEDUP_INDEX).join(hint(new.select("doc_id")), "doc_id", "left_anti")
        candidates = _kept_candidates(new, old, lake.read(SILVER_DOCUMENTS_DEDUP), columns, hint)
    else:
        candidates = _empty(lake, SILVER_DEDUP_INDEX).join(
            _empty(lake, SILVER_DOCUMENTS_DEDUP).select("doc_id", *columns), "doc_id")

    # 1. Exact, among the new documents and against the kept ones.
    # Every removed row is a new document, removed once (an exact copy is not in a near
    # cluster), so the rows counted with not kept give what was kept too.
    exact_rows, exact_removed = counted_checkpoint(_exact_clusters(new, candidates, keep_cols, order), where="NOT kept")
    # Removed ids are few and counted: broadcast, so the new documents are not shuffled to meet them.
    survivors = new.join(broadcast_if_fits(ctx.spark, exact_removed * DOC_ID_BYTES)(
        exact_rows.filter(~F.col("kept")).select("doc_id")), "doc_id", "left_anti")

    # 2. Near, on the exact survivors; kept documents' hashes come from the index.
    near_rows, near_removed = counted_checkpoint(_near_clusters(survivors, candidates, keep_cols, order, cfg),
                                                 where="NOT kept")

    # 3. Publish: the new kept documents, their index rows and this run's cluster rows.
    clusters = exact_rows.unionByName(near_rows)
    removed_ids = broadcast_if_fits(ctx.spark, (exact_removed + near_removed) * DOC_ID_BYTES)
    kept_new = (new.join(removed_ids(clusters.filter(~F.col("kept")).select("doc_id")), "doc_id", "left_anti")
                .withColumn("params", F.lit(params)))
    # A cluster has one kept row and at least one removed: at most twice the removed rows.
    _publish(ctx, incremental, kept_new, clusters, 2 * (exact_removed + near_removed))

    candidates.unpersist()
    return _result(full_because, rows_in, rows_in - exact_removed - near_removed, hashed.value,
                   bands, rows, cfg, exact_removed, near_removed, removed)


def _publish(ctx: StageContext, incremental: bool, kept: DataFrame, clusters: DataFrame, cluster_rows: int) -> None:
    """Stage, audit and publish one run's decisions, one commit per table (:mod:`pipelines.lake`).
    ``kept``: the new kept documents with their index columns, staged in one pass as the rows of
    ``silver.documents_dedup`` and of the index. ``cluster_rows``: at least the number of
    ``clusters`` rows (sizes the broadcasts of :func:`_with_cluster_sizes`).

    A full run replaces each table; an incremental one replaces the rows of the doc_ids it
    stages (:class:`~pipelines.lake.Keys`; of the (doc_id, method) pairs for the clusters), an
    upsert. The index goes first and ``silver.documents_dedup`` last on an incremental run (the
    kept documents are then decided); on a full run the index goes last (until it holds these
    settings, the next run redoes this one in full). Every table's suite runs in the tasks that
    stage its files, and its keys are checked unique across the files on the driver;
    QualityGateError before any commit of that table.
    """
    if incremental:
        clusters = _with_cluster_sizes(ctx.lake, clusters, cluster_rows)
    order = ("index", "clusters", "documents") if incremental else ("clusters", "documents", "index")
    with ctx.staging(OUTPUTS) as staging:
        staging.stage_all([("clusters", clusters), (("documents", "index"), kept)])
        for kind in order:
            spec = OUTPUTS[kind]
            if incremental and not staging.files[kind]:   # nothing to add or replace: no commit
                continue
            staging.publish(kind, replace=(_KEYS[kind] if incremental else ALL), operation="dedup",
                            checks=[_unique_across_files(staging.read_arrow(kind, list(spec.keys)), spec.keys)])


def _unique_across_files(keys: pa.Table, columns: tuple[str, ...]) -> tuple:
    """The gate's ``unique_across_files`` result over a table's staged ``keys`` (the tasks'
    suites check uniqueness within each file only)."""
    repeated = keys.num_rows - keys.group_by(list(columns)).aggregate([]).num_rows
    return ("unique_across_files", ",".join(columns), repeated == 0, f"{repeated} repeated keys")


def _result(full_because: str | None, rows_in: int, rows_out: int, hashed: int, bands: int, rows: int,
            cfg: DedupConfig, exact_removed: int, near_removed: int, documents_removed: int) -> StageResult:
    return StageResult(
        rows_in=rows_in, rows_out=rows_out,
        notes={**incremental.mode_notes(full_because), "new_documents": rows_in,
               "documents_removed": documents_removed, "signatures_computed": hashed,
               "bands_x_rows": f"{bands}x{rows}", "verified": cfg.verify,
               "exact_removed": exact_removed, "near_removed": near_removed},
    )
