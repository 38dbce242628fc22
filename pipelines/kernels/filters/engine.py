"""Run the configured rules over an Arrow batch: decisions, cleaned text, the funnel's counts.

HTTP status and language ID run first, then the rules of :class:`FilterParams`, in order: each
:class:`~pipelines.kernels.filters.rule.Rule` measures the document as the rules before it left
it, and a rule that changes the text hands the next one its new text. Every rule runs on every
document (not only until the first failure), so ``silver.filter_decisions`` explains each removed
document completely; the *funnel* still follows the rule order: a document leaves it at the first
step with a failed decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from pipelines.config import FilterConfig
from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import words
from pipelines.kernels.filters.language import detect_language
from pipelines.kernels.filters.presets import ALWAYS, LANGUAGE, RULES, check_names, preset_rules
from pipelines.kernels.filters.rule import Document, Rule
from schemas.catalog import SILVER_FILTER_DECISIONS

#: silver.filter_decisions' columns, every one nullable (the catalog's ``nullable_arrow``).
DECISION_FIELDS = list(SILVER_FILTER_DECISIONS.nullable_arrow)
DECISION_SCHEMA = pa.schema(DECISION_FIELDS)
DECISION_TYPE = pa.struct(DECISION_FIELDS)

#: Columns :func:`filter_batch` appends (the text column is replaced by the cleaned text).
RESULT_FIELDS = [
    pa.field("language", pa.string()),
    pa.field("language_score", pa.float64()),
    pa.field("filter_kept", pa.bool_()),
    pa.field("filter_first_failed", pa.string()),   # step of the first failed decision; null = kept
    pa.field("words_in", pa.int64()),                # whitespace words before any step
    pa.field("words_out", pa.int64()),               # after the text-modifying steps (C4 lines, PII)
    pa.field("decisions", pa.list_(DECISION_TYPE)),
]


class Steps(tuple):
    """The names of the steps that run, in order (a tuple of str), and ``text_steps``: those whose
    rule changes the text (the funnel counts the cleaned text's words from the first of them on)."""

    text_steps: frozenset[str]

    def __new__(cls, names: tuple[str, ...], text_steps: frozenset[str] = frozenset()) -> "Steps":
        out = super().__new__(cls, names)
        out.text_steps = frozenset(text_steps)
        return out


@dataclass(frozen=True)
class FilterParams:
    """What the filter kernel runs with: the ``filter`` config section as it is (language ID:
    ``languages``, ``min_language_score``, ``lid_model_path``; ``unsegmented_languages``) and the
    rules that run after HTTP status and language ID, in order, each configured and prepared
    (its files read).

    ``FilterParams(config)`` builds the rules from ``config`` (:meth:`from_config`);
    ``FilterParams(config, rules)`` runs the rules given. Raises ValueError for rules whose names
    are missing, repeated or ``http_status`` / ``language``.
    """
    config: FilterConfig = field(default_factory=FilterConfig)
    rules: tuple[Rule, ...] | None = None
    _unsegmented: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rules = FilterParams.from_config(self.config).rules if self.rules is None else tuple(self.rules)
        check_names(rules)
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "_unsegmented", frozenset(self.config.unsegmented_languages))

    @classmethod
    def from_config(cls, config: FilterConfig) -> "FilterParams":
        """The rules of ``config.preset``, each with its section's changed values
        (:meth:`Rule.configured`), less those whose section says ``enabled: false``, plus the
        built-in rules whose section says ``enabled: true`` at their place in
        :data:`~pipelines.kernels.filters.presets.STEPS`; then prepared on this machine (the
        driver): blocklists and bad-words lists are read here and travel with the rules. Raises
        :class:`~pipelines.config.ConfigError` naming the key of a file that cannot be read,
        ValueError for a bad preset."""
        rules = []
        for rule in preset_rules(config.preset):
            section = _section(config, rule)
            if section is None:
                rules.append(rule)
            elif section.enabled is not False:
                rules.append(rule.configured(section))
        rank = {name: i for i, name in enumerate(RULES)}
        present = {type(r) for r in rules}
        for name, cls_ in RULES.items():
            section = _section(config, cls_)
            if section is None or section.enabled is not True or cls_ in present:
                continue
            at = next((i for i, r in enumerate(rules) if rank.get(r.name, -1) > rank[name]), len(rules))
            rules.insert(at, cls_().configured(section))
        return cls(config, tuple(rule.prepare() for rule in rules))

    @classmethod
    def preset(cls, name: str = "fineweb", **config: object) -> "FilterParams":
        """The rules of preset ``name`` with their published values (``config``: other ``filter``
        values, e.g. ``languages=["en"]``). Raises ValueError (pydantic's) for an unknown preset
        or value."""
        return cls.from_config(FilterConfig(preset=name, **config))

    def steps(self) -> Steps:
        """The steps that run, in order: ``http_status``, ``language``, then each rule's name."""
        return Steps((*ALWAYS, *(r.name for r in self.rules)),
                     frozenset(r.name for r in self.rules if r.transforms_text))

    def rule(self, name: str) -> Rule:
        """The rule named ``name``; KeyError if none runs."""
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)


def _section(config: FilterConfig, rule: Rule | type[Rule]):
    """The user's section under ``filter`` for ``rule`` (None for a rule without one)."""
    key = rule.section
    return getattr(config, key) if key and key in FilterConfig.model_fields else None


@dataclass
class DocumentResult:
    text: str
    decisions: list[dict]
    first_failed: str | None
    words_in: int
    words_out: int


def filter_document(doc_id: str, text: str, language: str, score: float, params: FilterParams,
                    http_status: int | None = None, url: str | None = None,
                    host: str | None = None) -> DocumentResult:
    """Every step on one document whose language is already known: HTTP status (when given),
    language, then ``params.rules`` in order. ``words_out`` counts the text the rules left when
    one of them changes text, else it is ``words_in``. Raises what a rule raises."""
    decisions: list[dict] = []
    first_failed: str | None = None

    def add(step: str, m: Measure | tuple) -> None:
        nonlocal first_failed
        m = m if isinstance(m, Measure) else Measure(*m)
        decisions.append({"doc_id": doc_id, "filter": m.filter, "value": float(m.value),
                          "threshold": float(m.threshold), "passed": bool(m.passed),
                          "detail": m.detail if m.detail is not None else language})
        if not m.passed and first_failed is None:
            first_failed = step

    words_in = len(words(text))
    if http_status is not None:  # WET conversion records carry no status
        add("http_status", Measure("http_status_2xx", float(http_status), 200.0, 200 <= http_status < 300,
                                   str(http_status)))
    cfg = params.config
    lang_ok = score >= cfg.min_language_score and (not cfg.languages or language in cfg.languages)
    add(LANGUAGE, Measure(LANGUAGE, score, cfg.min_language_score, lang_ok, language))
    doc = Document(doc_id, text, language, score, language not in params._unsegmented, url, host, http_status)
    changed = False
    for rule in params.rules:
        if rule.transforms_text:
            new_text, measures = rule.transform(doc)
            doc = doc._replace(text=new_text)
            changed = True
        else:
            measures = rule.measures(doc)
        for m in measures:
            add(rule.name, m)
    words_out = len(words(doc.text)) if changed else words_in
    return DocumentResult(doc.text, decisions, first_failed, words_in, words_out)


def _column(batch: pa.RecordBatch, name: str) -> list:
    idx = batch.schema.get_field_index(name)
    return batch.column(idx).to_pylist() if idx >= 0 else [None] * batch.num_rows


def filter_batch(batch: pa.RecordBatch, params: FilterParams) -> pa.RecordBatch:
    """Documents in, documents out: the input columns (``text`` replaced by the cleaned text and
    ``text_length``, if present, by its length in characters; other columns untouched) followed by
    :data:`RESULT_FIELDS`.

    Needs ``doc_id`` and ``text``; uses ``http_status``, ``url`` and ``host`` when present. Raises
    KeyError when a needed column is missing, ValueError when the language model cannot be loaded.
    """
    doc_ids = batch.column("doc_id").to_pylist()
    texts = [t or "" for t in batch.column("text").to_pylist()]
    statuses, urls, hosts = _column(batch, "http_status"), _column(batch, "url"), _column(batch, "host")
    langs = detect_language(texts, params.config.lid_model_path) if texts else []
    results = [filter_document(d, t, lang, score, params, s, u, h)
               for d, t, (lang, score), s, u, h in zip(doc_ids, texts, langs, statuses, urls, hosts)]

    keep = [f.name for f in batch.schema if f.name not in {r.name for r in RESULT_FIELDS}]
    fields = [batch.schema.field(name) for name in keep]
    replaced = {
        "text": lambda: pa.array([r.text for r in results], pa.string()),
        # the cleaned text's length, so text_length stays true in silver.documents_clean
        "text_length": lambda: pa.array([len(r.text) for r in results], batch.schema.field("text_length").type),
    }
    arrays = [replaced[name]() if name in replaced else batch.column(name) for name in keep]
    arrays += [
        pa.array([lang for lang, _ in langs], pa.string()),
        pa.array([score for _, score in langs], pa.float64()),
        pa.array([r.first_failed is None for r in results], pa.bool_()),
        pa.array([r.first_failed for r in results], pa.string()),
        pa.array([r.words_in for r in results], pa.int64()),
        pa.array([r.words_out for r in results], pa.int64()),
        pa.array([r.decisions for r in results], pa.list_(DECISION_TYPE)),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields + RESULT_FIELDS))


def decide_batch(batch: pa.RecordBatch, params: FilterParams) -> pa.RecordBatch:
    """``(doc_id, text[, http_status, url, host])`` batch → decision rows (:data:`DECISION_SCHEMA`)."""
    out = filter_batch(batch, params).column("decisions").to_pylist()
    return pa.RecordBatch.from_pylist([d for doc in out for d in doc], schema=DECISION_SCHEMA)


def funnel(groups: list[tuple[str | None, int, int, int]], steps: tuple[str, ...]) -> list[dict]:
    """Documents and words left after each step, in order.

    ``groups``: ``(first failed step or None, documents, words_in, words_out)`` per group (any
    grouping; rows with the same step are summed). ``steps``: :meth:`FilterParams.steps`, or names
    of built-in steps. Words count the input text before the first step that changes the text
    (``steps.text_steps``; C4 in the built-in presets) and the cleaned text from it on. Returns
    ``[{"step": "input", ...}, {"step": s, "documents": n, "words": w}, ...]``.
    """
    text_steps = getattr(steps, "text_steps", None)
    if text_steps is None:
        text_steps = {name for name, rule in RULES.items() if rule.transforms_text}
    docs: dict[str | None, int] = {}
    w_in: dict[str | None, int] = {}
    w_out: dict[str | None, int] = {}
    for step, n, wi, wo in groups:
        docs[step] = docs.get(step, 0) + n
        w_in[step] = w_in.get(step, 0) + wi
        w_out[step] = w_out.get(step, 0) + wo
    out = [{"step": "input", "documents": sum(docs.values()), "words": sum(w_in.values())}]
    removed: set[str | None] = set()
    modified = False
    for step in steps:
        removed.add(step)
        modified = modified or step in text_steps
        left = [s for s in docs if s not in removed]
        words_left = sum((w_out if modified else w_in)[s] for s in left)
        out.append({"step": step, "documents": sum(docs[s] for s in left), "words": words_left})
    return out
