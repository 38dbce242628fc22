"""Filter presets: a preset is a list of configured rules, run in its order after HTTP status and
language ID, as datatrove's ``examples/fineweb.py`` lists its configured filters.

| preset | rules after HTTP status and language ID | source |
|---|---|---|
| ``fineweb`` (default) | URL, Gopher repetition, Gopher quality, C4 without the terminal-punctuation line rule, FineWeb, PII | Penedo et al. 2024; datatrove ``examples/fineweb.py`` |
| ``gopher`` | URL, Gopher repetition, Gopher quality | Rae et al. 2021 (MassiveWeb) |
| ``c4`` | URL, C4 with every line rule (bad words where a list is configured) | Raffel et al. 2020 |
| ``minimal`` | URL | — |

``filter.preset`` names one of :data:`PRESETS` or lists rules (:func:`preset_rules`). Each rule's
config section (``filter.<section>``) applies its changed values to the preset's rule, and its
``enabled`` overrides the preset (``true`` adds a rule to it at its place in :data:`STEPS`,
``false`` removes it); see :meth:`~pipelines.kernels.filters.engine.FilterParams.from_config`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipelines.kernels.filters.c4 import C4QualityFilter
from pipelines.kernels.filters.fineweb import FineWebQualityFilter
from pipelines.kernels.filters.gopher_quality import GopherQualityFilter
from pipelines.kernels.filters.gopher_repetition import GopherRepetitionFilter
from pipelines.kernels.filters.pii import PiiFormatter
from pipelines.kernels.filters.rule import Rule
from pipelines.kernels.filters.url import UrlFilter

#: The built-in rules by name, in the order a rule added by ``enabled: true`` takes among them.
#: Text-changing rules: c4 (drops lines), pii (replaces e-mails and IPs); rules after c4 see its
#: output, as in FineWeb.
RULES: dict[str, type[Rule]] = {cls.name: cls for cls in (
    UrlFilter, GopherRepetitionFilter, GopherQualityFilter, C4QualityFilter, FineWebQualityFilter, PiiFormatter)}
#: The language ID step, and the ``filter`` of the one decision row it gives every document.
LANGUAGE = "language"
#: Steps that run whatever the preset, first.
ALWAYS: tuple[str, ...] = ("http_status", LANGUAGE)
#: Every built-in step, in order.
STEPS: tuple[str, ...] = (*ALWAYS, *RULES)

#: The presets by name: each a tuple of configured rules, in the order they run.
PRESETS: dict[str, tuple[Rule, ...]] = {
    # FineWeb (Penedo et al. 2024), as datatrove's examples/fineweb.py, plus its PIIFormatter
    "fineweb": (UrlFilter(), GopherRepetitionFilter(), GopherQualityFilter(),
                C4QualityFilter(filter_no_terminal_punct=False), FineWebQualityFilter(), PiiFormatter()),
    # Gopher's MassiveWeb rules (Rae et al. 2021, App. A)
    "gopher": (UrlFilter(), GopherRepetitionFilter(), GopherQualityFilter()),
    # C4 (Raffel et al. 2020, §2.2)
    "c4": (UrlFilter(), C4QualityFilter(filter_no_terminal_punct=True)),
    "minimal": (UrlFilter(),),
}
_BUILT_IN = frozenset(PRESETS)


def register_rule(cls: type[Rule]) -> type[Rule]:
    """Make ``cls`` known by its ``name`` to ``filter.preset`` lists (a ``"module:Class"`` path
    works without this). Returns ``cls`` (usable as a class decorator). Raises ValueError for a
    class that is no :class:`Rule`, has no name, or whose name another rule has."""
    if not (isinstance(cls, type) and issubclass(cls, Rule)) or not cls.name:
        raise ValueError(f"{cls!r} is not a Rule subclass with a name")
    if cls.name in ALWAYS or RULES.get(cls.name, cls) is not cls:
        raise ValueError(f"a filter rule named {cls.name!r} exists already")
    RULES[cls.name] = cls
    return cls


def register_preset(name: str, rules: Iterable[Rule | type[Rule] | str | Mapping[str, Any]]) -> tuple[Rule, ...]:
    """Make ``name`` a preset ``filter.preset`` can name: its rules in order, each a configured
    :class:`Rule`, a rule class, or what a ``filter.preset`` list holds (see :func:`preset_rules`).
    Registering a name again replaces it, except the built-in presets'. Returns the rules; raises
    ValueError for a built-in name or a bad rule."""
    if name in _BUILT_IN:
        raise ValueError(f"{name!r} is a built-in filter preset; choose another name")
    out = preset_rules(list(rules))
    PRESETS[name] = out
    return out


def rule_class(ref: str) -> type[Rule]:
    """The rule class ``ref`` names: a name in :data:`RULES`, or ``"package.module:Class"``.
    Raises ValueError when there is none."""
    if ref in RULES:
        return RULES[ref]
    if ":" not in ref:
        raise ValueError(f"unknown filter rule {ref!r}; known: {', '.join(RULES)} "
                         "(or 'package.module:Class' for a rule of your own)")
    module, _, attr = ref.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"filter rule {ref!r} cannot be imported: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Rule)) or not cls.name:
        raise ValueError(f"filter rule {ref!r} is not a Rule subclass with a name")
    return cls


def _entry(item: Rule | type[Rule] | str | Mapping[str, Any]) -> Rule:
    if isinstance(item, Rule):
        return item
    if isinstance(item, type) and issubclass(item, Rule):
        return item()
    if isinstance(item, str):
        return rule_class(item)()
    if isinstance(item, Mapping):
        values = dict(item)
        ref = values.pop("rule", None)
        if not isinstance(ref, str):
            raise ValueError("a mapping needs 'rule': the rule's name or 'package.module:Class'")
        return rule_class(ref)(**values)
    raise ValueError(f"{item!r} is not a rule, a rule's name or a mapping")


def preset_rules(preset: str | Sequence[Rule | type[Rule] | str | Mapping[str, Any]]) -> tuple[Rule, ...]:
    """The configured rules of ``preset``, in order: the name of a preset in :data:`PRESETS`, or a
    list whose items are each a :class:`Rule`, a rule class, a rule's name (:data:`RULES`) or
    ``"package.module:Class"``, or a mapping ``{"rule": <name or path>, <value>: ...}`` that
    configures it. Raises ValueError naming the unknown preset, the bad item (by its index) or
    the bad value, and for two rules of one name or one named like an always-run step."""
    if isinstance(preset, str):
        try:
            return PRESETS[preset]
        except KeyError:
            raise ValueError(f"unknown filter preset {preset!r}; known: {', '.join(PRESETS)}") from None
    out = []
    for i, item in enumerate(preset):
        try:
            out.append(_entry(item))
        except ValueError as exc:   # pydantic's ValidationError is one
            raise ValueError(f"filter.preset[{i}]: {exc}") from None
    check_names(out)
    return tuple(out)


def check_names(rules: Sequence[Rule]) -> None:
    """Raises ValueError unless every rule has a name, none twice and none of :data:`ALWAYS`."""
    seen: set[str] = set()
    for rule in rules:
        if not rule.name or rule.name in ALWAYS or rule.name in seen:
            raise ValueError(f"filter rule names must be set, unique and not {' or '.join(ALWAYS)}: "
                             f"{rule!r} is named {rule.name!r}")
        seen.add(rule.name)
