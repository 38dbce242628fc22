"""The lake layer: every Delta read and write crawlake makes.

* :mod:`.lake` — :class:`Lake`: table locations (path or catalog name), Spark reads, the choice of
  the committing engine per table, and every write (publishing task-staged files, DataFrame
  overwrites, replaces, merges, deletes, ledger appends);
* :mod:`.files` — the task side: :class:`~.files.TableFiles` stages a task's Parquet files for
  its output tables and describes them for the driver;
* :mod:`.commits` — the Delta protocol pieces that let ``deltalake`` commit files tasks wrote
  (add/remove actions, per-file statistics, partition values, set-transactions);
* :mod:`.read` — reads without Spark or a JVM (``deltalake`` + ``pyarrow``) that leave no Arrow
  work behind at exit: search, ``crawlake explain`` and the training loaders use it.

The names below load :mod:`.lake` (and so pyspark) on first use only, so that ``pipelines.lake.read``
imports where pyspark is not installed.
"""

__all__ = ["ALL", "AnyRows", "Keys", "Lake", "Rows", "Staging", "arrow_schema", "loaded_logs", "sql_list",
           "sql_string"]


def __getattr__(name: str):
    if name in __all__:
        from pipelines.lake import lake

        return getattr(lake, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
