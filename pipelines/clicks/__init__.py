"""Criteo click logs: generator (:mod:`.generate`, no Spark), batch ingest (:mod:`.ingest`),
Structured Streaming ingest (:mod:`.stream`) and DLRM features (:mod:`.features`)."""
