"""Connected components of a small undirected graph, on one machine.

Dedup's candidate graph (:mod:`pipelines.stages.dedup`) goes here when it is small enough for the
driver; the stage keeps min-label propagation in Spark for larger ones. Both label a component with
its smallest node id.

Source: ``scipy.sparse.csgraph.connected_components`` (breadth-first search over a CSR matrix).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from scipy.sparse import coo_matrix, csgraph

#: What :func:`components` returns: every node of an edge, and the smallest node of its component.
COMPONENTS_SCHEMA = pa.schema([pa.field("doc_id", pa.string()), pa.field("component", pa.string())])


def components(edges: pa.Table) -> pa.Table:
    """``edges`` (string columns ``src``, ``dst``; undirected; repeats and both directions allowed)
    → :data:`COMPONENTS_SCHEMA`, one row per node, sorted by node. The smallest id is by code
    point, which is the UTF-8 byte order Spark's ``min`` uses on strings. Raises KeyError when a
    column is missing."""
    ends = np.concatenate([edges.column("src").to_numpy(zero_copy_only=False),
                           edges.column("dst").to_numpy(zero_copy_only=False)])
    ids, index = np.unique(ends, return_inverse=True)   # sorted: a node's index orders it by id
    m = edges.num_rows
    # float weights: repeated edges are summed when the matrix is built, and a sum never wraps to 0
    graph = coo_matrix((np.ones(m, dtype=np.float32), (index[:m], index[m:])), shape=(len(ids), len(ids)))
    _, labels = csgraph.connected_components(graph, directed=False)
    smallest = np.full(labels.max() + 1 if len(ids) else 0, len(ids))
    np.minimum.at(smallest, labels, np.arange(len(ids)))
    return pa.table({"doc_id": pa.array(ids, pa.string()), "component": pa.array(ids[smallest[labels]], pa.string())},
                    schema=COMPONENTS_SCHEMA)
