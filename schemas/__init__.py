"""The table catalog (see schemas.catalog)."""
from schemas.catalog import ALL_TABLES, TABLES, TableSpec  # noqa: F401
