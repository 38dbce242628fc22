"""Data-quality expectations as plain data, attached to each table's spec (no Great Expectations import).

Each class is one row-level rule on one table; :mod:`pipelines.quality` turns a spec's tuple of
them into a Great Expectations suite and validates Spark, pandas or Arrow data with it. The rules
are kept small and engine-neutral on purpose: every one of them runs on Spark and on pandas.

An expectation knows the Great Expectations type it becomes (:attr:`Expectation.type`, also the
``ops.quality.expectation`` value), the columns it reads (:attr:`Expectation.columns`) and the
label of its ``ops.quality.column`` (:attr:`Expectation.label`: the column, or the columns joined
with ``,``). Null values pass every rule except :class:`NotNull` (as in Great Expectations), so a
nullable column's range is checked where it has a value.

The lower-case helpers (:func:`not_null`, :func:`unique`, :func:`between`, :func:`in_set`,
:func:`matches`, :func:`at_least`) are what the catalog writes suites with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Expectation:
    """Base class: one declarative rule. Subclasses define :attr:`type`, :attr:`columns` and
    :meth:`gx_kwargs`."""

    @property
    def type(self) -> str:
        """The Great Expectations expectation type, snake_case (``expect_column_values_to_...``)."""
        raise NotImplementedError

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the rule reads, in the order it names them."""
        raise NotImplementedError

    @property
    def label(self) -> str:
        """What ``ops.quality.column`` holds for this rule: its column(s), comma-joined."""
        return ",".join(self.columns)

    def gx_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the Great Expectations expectation class of :attr:`type`."""
        raise NotImplementedError


@dataclass(frozen=True)
class NotNull(Expectation):
    """``column`` has no null value."""
    column: str

    @property
    def type(self) -> str:
        return "expect_column_values_to_not_be_null"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def gx_kwargs(self) -> dict[str, Any]:
        return {"column": self.column}


@dataclass(frozen=True)
class Unique(Expectation):
    """No two rows share their values of ``key`` (one column, or a compound key). Rows whose
    compound columns are all null are skipped (Great Expectations' default)."""
    key: tuple[str, ...]

    def __post_init__(self):
        if not self.key:
            raise ValueError("Unique needs at least one column")

    @property
    def type(self) -> str:
        return "expect_column_values_to_be_unique" if len(self.key) == 1 else "expect_compound_columns_to_be_unique"

    @property
    def columns(self) -> tuple[str, ...]:
        return self.key

    def gx_kwargs(self) -> dict[str, Any]:
        if len(self.key) == 1:
            return {"column": self.key[0]}
        return {"column_list": list(self.key)}


@dataclass(frozen=True)
class Between(Expectation):
    """``min_value <= column <= max_value`` (inclusive; None = unbounded on that side; at least
    one bound). Numbers compare as numbers, timestamps as timestamps."""
    column: str
    min_value: float | int | None = None
    max_value: float | int | None = None

    def __post_init__(self):
        if self.min_value is None and self.max_value is None:
            raise ValueError(f"Between({self.column!r}) needs a min_value or a max_value")

    @property
    def type(self) -> str:
        return "expect_column_values_to_be_between"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def gx_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"column": self.column}
        if self.min_value is not None:
            kwargs["min_value"] = self.min_value
        if self.max_value is not None:
            kwargs["max_value"] = self.max_value
        return kwargs


@dataclass(frozen=True)
class InSet(Expectation):
    """Every value of ``column`` is one of ``values`` (a tuple, so the spec stays hashable)."""
    column: str
    values: tuple

    def __post_init__(self):
        if not self.values:
            raise ValueError(f"InSet({self.column!r}) needs at least one value")

    @property
    def type(self) -> str:
        return "expect_column_values_to_be_in_set"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def gx_kwargs(self) -> dict[str, Any]:
        return {"column": self.column, "value_set": list(self.values)}


@dataclass(frozen=True)
class MatchesRegex(Expectation):
    """Every (string) value of ``column`` matches ``regex`` (a search: anchor it with ``^...$``
    to match the whole value)."""
    column: str
    regex: str

    @property
    def type(self) -> str:
        return "expect_column_values_to_match_regex"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def gx_kwargs(self) -> dict[str, Any]:
        return {"column": self.column, "regex": self.regex}


@dataclass(frozen=True)
class AtLeast(Expectation):
    """``column_a >= column_b`` on every row where both have a value (``or_equal=False``: ``>``)."""
    column_a: str
    column_b: str
    or_equal: bool = True

    @property
    def type(self) -> str:
        return "expect_column_pair_values_a_to_be_greater_than_b"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column_a, self.column_b)

    def gx_kwargs(self) -> dict[str, Any]:
        # a null on either side is not a violation (as with the single-column rules)
        return {"column_A": self.column_a, "column_B": self.column_b, "or_equal": self.or_equal,
                "ignore_row_if": "either_value_is_missing"}


def not_null(*columns: str) -> tuple[NotNull, ...]:
    """One :class:`NotNull` per column (splice into a suite with ``*``)."""
    return tuple(NotNull(c) for c in columns)


def unique(*columns: str) -> Unique:
    """:class:`Unique` over one column or a compound key."""
    return Unique(tuple(columns))


def between(column: str, min_value: float | int | None = None, max_value: float | int | None = None) -> Between:
    """:class:`Between`: inclusive bounds, None = open."""
    return Between(column, min_value, max_value)


def in_set(column: str, values) -> InSet:
    """:class:`InSet` over ``values`` (any iterable; kept as a tuple)."""
    return InSet(column, tuple(values))


def matches(column: str, regex: str) -> MatchesRegex:
    """:class:`MatchesRegex`."""
    return MatchesRegex(column, regex)


def at_least(column_a: str, column_b: str, *, or_equal: bool = True) -> AtLeast:
    """:class:`AtLeast`: ``column_a >= column_b`` (``or_equal=False``: ``>``)."""
    return AtLeast(column_a, column_b, or_equal)
