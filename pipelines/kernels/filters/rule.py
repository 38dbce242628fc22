"""What a filter rule is: a :class:`Rule` object with a name, its measures of a :class:`Document`
and, optionally, a change to the document's text.

A preset is a list of configured rules (:mod:`.presets`), as datatrove's ``examples/fineweb.py``
lists its configured filters; the engine (:mod:`.engine`) runs the rules a preset lists, in order,
after HTTP status and language ID. A rule of your own is one class::

    class LongLines(Rule):
        name = "long_lines"                 # its step: the funnel, filter_first_failed, run notes

        class Config(RuleConfig):           # its values, validated (frozen, unknown keys rejected)
            max_chars: int = 1000

        def measures(self, doc):
            longest = max(map(len, doc.text.split("\\n")), default=0)
            return [Measure("long_lines_max_chars", longest, self.config.max_chars,
                            longest <= self.config.max_chars)]

and a line in a preset: ``register_preset("mine", ["url", LongLines(max_chars=500)])``, or
``filter.preset: [url, "mypkg.rules:LongLines"]`` in the config (see
:class:`~pipelines.config.FilterConfig`). Rules travel to Spark's executors pickled with the
filter parameters, so the class must be importable there (a package, ``--py-files``) and a rule
holds values only: one that reads files does it in :meth:`Rule.prepare`, on the driver.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from pipelines.config import RuleConfig
from pipelines.kernels.filters._measure import Measure


class Document(NamedTuple):
    """One document as a rule sees it.

    ``text``: the text as the rules before this one left it (C4 may have removed lines);
    ``language``: fastText lid.176 code, ``language_score`` its probability in [0, 1];
    ``segmented``: the language is written with spaces between words (not in
    ``filter.unsegmented_languages``), so rules that count words apply; ``url``, ``host``,
    ``http_status``: from ``silver.documents_dedup``, None where the input has none (WET records
    carry no status).
    """

    doc_id: str
    text: str
    language: str
    language_score: float
    segmented: bool = True
    url: str | None = None
    host: str | None = None
    http_status: int | None = None


class Rule:
    """One filter rule. Subclass it and set:

    * ``name``: the rule's step (``filter_first_failed``, the funnel, the run notes); unique
      within a preset, and neither ``http_status`` nor ``language``, which always run first;
    * ``Config``: a :class:`~pipelines.config.RuleConfig` subclass holding its values, with the
      published values as defaults; ``Rule(**values)`` or ``Rule(config)`` validates them
      (pydantic ``ValidationError``, a ValueError, naming a bad or unknown key);
    * :meth:`measures`: the rule's :class:`Measure` s of a document, one decision row each
      (``filter`` names the row and is unique per document; ``value``, ``threshold``, ``passed``;
      ``detail`` None puts the document's language there). A document is kept when every
      decision of every rule passed;
    * or, for a rule that changes the text (C4's line removal, PII replacement),
      :meth:`transform`: the new text and the measures; the rules after it see the new text and
      ``silver.documents_clean`` gets the last one.

    ``section`` names the rule's section under ``filter`` (``filter.gopher`` for
    ``gopher_quality``) for the built-in rules: its values apply where they differ from the
    defaults (:meth:`configured`) and its ``enabled`` adds or removes the rule.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[RuleConfig]] = RuleConfig
    section: ClassVar[str | None] = None
    #: whether the class implements :meth:`transform` (set for each subclass)
    transforms_text: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.transforms_text = cls.transform is not Rule.transform

    def __init__(self, config: RuleConfig | Mapping[str, Any] | None = None, /, **values: Any) -> None:
        if isinstance(config, self.Config) and not values:
            self.config = config
            return
        given = config.model_dump() if isinstance(config, RuleConfig) else dict(config or {})
        self.config = self.Config.model_validate({**given, **values})

    def measures(self, doc: Document) -> Sequence[Measure]:
        """The rule's measures of ``doc`` (see the class docstring). Must not raise on any text."""
        if self.transforms_text:
            return self.transform(doc)[1]
        raise NotImplementedError(f"{type(self).__name__} implements neither measures() nor transform()")

    def transform(self, doc: Document) -> tuple[str, Sequence[Measure]]:
        """``(new text, measures)`` for a rule that changes the text; the default keeps the text."""
        return doc.text, self.measures(doc)

    def prepare(self) -> "Rule":
        """Driver side, before the rule is shipped to the executors: read what its config names
        (blocklists, word lists) into values. Returns the rule to run (``self`` when there is
        nothing to read); raises :class:`~pipelines.config.ConfigError` naming the key."""
        return self

    def with_config(self, config: RuleConfig) -> "Rule":
        """A copy of this rule (values read by :meth:`prepare` included) with ``config``."""
        out = copy.copy(self)
        out.config = config if isinstance(config, self.Config) else self.Config.model_validate(config.model_dump())
        return out

    def configured(self, section: RuleConfig) -> "Rule":
        """This rule with the user's config ``section`` applied: each value of ``section`` that
        differs from the section's default replaces this rule's (so a preset's own values, such as
        FineWeb's ``filter_no_terminal_punct: false``, stand unless the user changed them);
        ``enabled`` is the preset's business, not the rule's."""
        defaults = type(section)()
        changed = {k: getattr(section, k) for k in type(section).model_fields
                   if k != "enabled" and getattr(section, k) != getattr(defaults, k)}
        if not changed:
            return self
        return self.with_config(self.Config.model_validate({**self.config.model_dump(), **changed}))

    def __repr__(self) -> str:
        defaults = self.Config()
        values = ", ".join(f"{k}={getattr(self.config, k)!r}" for k in type(self.config).model_fields
                           if getattr(self.config, k) != getattr(defaults, k))
        return f"{type(self).__name__}({values})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    __hash__ = None  # type: ignore[assignment]  # mutable-looking: compared by value, not hashed


__all__ = ["Document", "Measure", "Rule", "RuleConfig"]
