"""Run the configured rules over an Arrow batch: decisions, cleaned text, the funnel's counts.

Every rule that applies runs on every document (not only until the first failure), so
``silver.filter_decisions`` explains each removed document completely; the *funnel* still follows
the rule order (:data:`~pipelines.kernels.filters.presets.STEPS`): a document leaves it at the first
step with a failed decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import words
from pipelines.kernels.filters.c4 import C4Params, c4_apply
from pipelines.kernels.filters.fineweb import FineWebParams, fineweb_measures
from pipelines.kernels.filters.gopher_quality import GopherParams, gopher_measures
from pipelines.kernels.filters.gopher_repetition import GopherRepetitionParams, gopher_repetition_measures
from pipelines.kernels.filters.language import detect_language
from pipelines.kernels.filters.pii import PiiParams, replace_pii
from pipelines.kernels.filters.presets import PRESETS, STEPS, preset_steps
from pipelines.kernels.filters.url import UrlParams, url_measures

DECISION_FIELDS = [
    pa.field("doc_id", pa.string()),
    pa.field("filter", pa.string()),
    pa.field("value", pa.float64()),
    pa.field("threshold", pa.float64()),
    pa.field("passed", pa.bool_()),
    pa.field("detail", pa.string()),
]
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


@dataclass(frozen=True)
class FilterParams:
    """Which rules run (None = off) and their values. The default is the original rule set
    (language ID + Gopher quality); :meth:`preset` gives a published recipe."""
    languages: tuple[str, ...] = ()        # empty: keep every language
    min_language_score: float = 0.65
    gopher: GopherParams | None = GopherParams()
    lid_model_path: str | None = None
    url: UrlParams | None = None
    gopher_repetition: GopherRepetitionParams | None = None
    c4: C4Params | None = None
    fineweb: FineWebParams | None = None
    pii: PiiParams | None = None
    preset_name: str | None = field(default=None, compare=False)

    @classmethod
    def preset(cls, name: str = "fineweb", **overrides) -> "FilterParams":
        """The rules of preset ``name`` with their published values; ``overrides`` replace fields.
        Raises ValueError for an unknown preset."""
        steps = preset_steps(name)
        values = {
            "url": UrlParams() if "url" in steps else None,
            "gopher_repetition": GopherRepetitionParams() if "gopher_repetition" in steps else None,
            "gopher": GopherParams() if "gopher_quality" in steps else None,
            "c4": C4Params(filter_no_terminal_punct=PRESETS[name]["c4_filter_no_terminal_punct"])
            if "c4" in steps else None,
            "fineweb": FineWebParams() if "fineweb" in steps else None,
            "pii": PiiParams() if "pii" in steps else None,
            "preset_name": name,
        }
        values.update(overrides)
        return cls(**values)

    def steps(self) -> tuple[str, ...]:
        """The steps that run, in order."""
        on = {"http_status": True, "language": True, "url": self.url, "gopher_repetition": self.gopher_repetition,
              "gopher_quality": self.gopher, "c4": self.c4, "fineweb": self.fineweb, "pii": self.pii}
        return tuple(s for s in STEPS if on[s] is not None and on[s] is not False)


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
    """Every configured rule on one document whose language is already known."""
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
    lang_ok = score >= params.min_language_score and (not params.languages or language in params.languages)
    add("language", Measure("language", score, params.min_language_score, lang_ok, language))
    if params.url is not None and url is not None:
        for m in url_measures(url, params.url, host):
            add("url", m)
    if params.gopher_repetition is not None:
        for m in gopher_repetition_measures(text, language, params.gopher_repetition):
            add("gopher_repetition", m)
    if params.gopher is not None:
        for m in gopher_measures(text, language, params.gopher):
            add("gopher_quality", m)
    if params.c4 is not None:
        text, measures = c4_apply(text, language, params.c4)
        for m in measures:
            add("c4", m)
    if params.fineweb is not None:
        for m in fineweb_measures(text, language, params.fineweb):
            add("fineweb", m)
    if params.pii is not None:
        text, n_email, n_ip = replace_pii(text, params.pii)
        add("pii", Measure("pii_emails", float(n_email), float("inf"), True))
        add("pii", Measure("pii_ips", float(n_ip), float("inf"), True))
    words_out = words_in if params.c4 is None else len(words(text))
    return DocumentResult(text, decisions, first_failed, words_in, words_out)


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
    langs = detect_language(texts, params.lid_model_path) if texts else []
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
    grouping; rows with the same step are summed). Words count the input text before the C4 step
    and the cleaned text from it on. Returns ``[{"step": "input", ...}, {"step": s, "documents": n,
    "words": w}, ...]``.
    """
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
        modified = modified or step == "c4"
        left = [s for s in docs if s not in removed]
        words_left = sum((w_out if modified else w_in)[s] for s in left)
        out.append({"step": step, "documents": sum(docs[s] for s in left), "words": words_left})
    return out
