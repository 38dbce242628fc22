"""Every stage, in one list each flow: what the runner runs, ``crawlake run --stages`` and the
``crawlake clicks`` commands offer, ``jobs/<name>.py`` and the Databricks bundle submit, and
``ops.runs`` records (with the Delta versions of each stage's inputs and outputs).

Importing this module imports no stage (nor Spark): a stage's module is imported when it runs.
"""

from __future__ import annotations

from pipelines.stage import Stage
from schemas.catalog import (
    BRONZE_CLICKS,
    BRONZE_CLICKS_QUARANTINE,
    BRONZE_DOCUMENTS,
    BRONZE_QUARANTINE,
    GOLD_DOCUMENT_TOKENS,
    GOLD_EMBEDDINGS,
    GOLD_INDEX_MANIFEST,
    GOLD_TOKEN_SEQUENCES,
    OPS_CLICKS_INGEST_LOG,
    OPS_INGEST_LOG,
    OPS_TAKEDOWNS,
    SILVER_CLICK_FEATURES,
    SILVER_CLICK_VOCAB,
    SILVER_DEDUP_INDEX,
    SILVER_DOCUMENTS_CLEAN,
    SILVER_DOCUMENTS_DEDUP,
    SILVER_DUPLICATE_CLUSTERS,
    SILVER_FILTER_DECISIONS,
)

#: ``crawlake run``: WARC/WET files to training tables, in this order.
PIPELINE: tuple[Stage, ...] = (
    # ops.takedowns: the takedown list it applies (crawlake forget)
    Stage("ingest", "pipelines.stages.ingest", (OPS_TAKEDOWNS,), (BRONZE_DOCUMENTS, BRONZE_QUARANTINE, OPS_INGEST_LOG),
          "WARC/WET files (ingest.input) to documents and quarantined records"),
    Stage("dedup", "pipelines.stages.dedup", (BRONZE_DOCUMENTS,),
          (SILVER_DOCUMENTS_DEDUP, SILVER_DUPLICATE_CLUSTERS, SILVER_DEDUP_INDEX),
          "exact and MinHash-LSH near-duplicate removal"),
    Stage("filter", "pipelines.stages.filter", (SILVER_DOCUMENTS_DEDUP,), (SILVER_DOCUMENTS_CLEAN, SILVER_FILTER_DECISIONS),
          "language ID and a recipe's quality rules, C4 cleaning, PII replacement"),
    Stage("tokenize", "pipelines.stages.tokenize", (SILVER_DOCUMENTS_CLEAN,), (GOLD_TOKEN_SEQUENCES, GOLD_DOCUMENT_TOKENS),
          "tokenize and pack into fixed-length training sequences"),
    Stage("embed", "pipelines.stages.embed", (SILVER_DOCUMENTS_CLEAN,), (GOLD_EMBEDDINGS,),
          "sentence embeddings of document chunks"),
    Stage("index", "pipelines.stages.index", (GOLD_EMBEDDINGS,), (GOLD_INDEX_MANIFEST,),
          "FAISS index shards of the embeddings"),
)

#: ``crawlake clicks ingest`` / ``features``: Criteo click logs to DLRM features.
CLICKS: tuple[Stage, ...] = (
    Stage("clicks_ingest", "pipelines.clicks.ingest", (), (BRONZE_CLICKS, BRONZE_CLICKS_QUARANTINE, OPS_CLICKS_INGEST_LOG),
          "Criteo log files (clicks.input) to typed rows and quarantined lines, each file once"),
    Stage("clicks_features", "pipelines.clicks.features", (BRONZE_CLICKS,), (SILVER_CLICK_VOCAB, SILVER_CLICK_FEATURES),
          "vocabularies and DLRM features"),
)

#: Stages run on demand, outside a flow.
TOOLS: tuple[Stage, ...] = (
    Stage("train_tokenizer", "pipelines.stages.train_tokenizer", (SILVER_DOCUMENTS_CLEAN,), (),
          "a byte-level BPE tokenizer trained on the clean documents"),
)

STAGES: dict[str, Stage] = {s.name: s for s in (*PIPELINE, *CLICKS, *TOOLS)}


def pipeline_stages(names) -> tuple[Stage, ...]:
    """The :data:`PIPELINE` stages named in ``names``, in pipeline order. Raises ValueError naming
    any unknown name."""
    names = tuple(names)
    known = {s.name for s in PIPELINE}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; stages are {', '.join(s.name for s in PIPELINE)}")
    return tuple(s for s in PIPELINE if s.name in names)
