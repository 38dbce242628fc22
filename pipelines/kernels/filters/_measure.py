"""The result of one rule on one document."""

from __future__ import annotations

from typing import NamedTuple


class Measure(NamedTuple):
    """One rule's verdict: ``filter`` name, measured ``value``, its ``threshold`` and ``passed``.

    ``detail`` says what matched (a blocklist entry, line-removal counts); None lets the caller put
    the document's language there. Informational rows (lines removed, PII replaced) use
    ``threshold = inf`` and always pass.
    """

    filter: str
    value: float
    threshold: float
    passed: bool
    detail: str | None = None
