"""Training-side readers of crawlake's Delta tables: PyTorch datasets with no JVM and no pyspark.

``DeltaRowDataset`` (rows of any Delta table as samples) and ``DeltaLoader`` are in
:mod:`pipelines.loaders.base`; ``TokenSequenceDataset`` (``gold.token_sequences``) in
:mod:`pipelines.loaders.tokens`.
"""

from pipelines.loaders.base import DEFAULT_SHUFFLE_BUFFER, DeltaLoader, DeltaRowDataset, load_snapshot
from pipelines.loaders.tokens import IGNORE_INDEX, TokenSequenceDataset

__all__ = ["DEFAULT_SHUFFLE_BUFFER", "DeltaLoader", "DeltaRowDataset", "IGNORE_INDEX", "TokenSequenceDataset",
           "load_snapshot"]
