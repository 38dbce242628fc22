"""datatrove side of ``benchmarks/filter_agreement.py``: imports only datatrove (its dependency
numpy and the standard library), so it runs in a separate virtualenv that has datatrove installed.

    python _filter_agreement_datatrove.py IN.jsonl OUT.jsonl

IN: one JSON object per line, ``{"id", "text", "language"}`` (``language``: an ISO 639-1 code that
datatrove's word-tokenizer table knows, e.g. ``en``; the filters are built with it).
OUT: one line per document and filter, ``{"id", "filter", "passed", "reason", "values"}``: the
decision and reason come from the datatrove filter itself (``filter()`` with its default
thresholds); ``values`` are the quantities that filter compares, recomputed with datatrove's own
helpers for the explanation (``filter_agreement.py`` checks that they give the filter's verdict).
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import numpy as np
from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.filters.c4_filters import CITATION_REGEX, ELLIPSIS, END_PUNCTUATION, POLICY_SUBSTRINGS
from datatrove.pipeline.filters.gopher_quality_filter import STOP_WORDS
from datatrove.pipeline.filters.gopher_repetition_filter import (
    find_all_duplicate,
    find_duplicates,
    find_top_duplicate,
    get_n_grams,
)
from datatrove.utils.typeshelper import Languages
from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION, split_into_sentences, split_into_words


def gopher_quality_values(text: str, lang: str) -> dict:
    words = split_into_words(text, lang)
    n = len(words)
    non_symbol = [w for w in words if any(ch not in PUNCTUATION_SET for ch in w)]
    lines = text.splitlines()
    return {
        "tokens": n,
        "words": len(non_symbol),
        "avg_word_length": float(np.mean([len(w) for w in non_symbol])) if non_symbol else None,
        "hash_ratio": text.count("#") / n if n else None,
        "ellipsis_ratio": (text.count("...") + text.count("…")) / n if n else None,
        "bullet_lines_ratio": sum(s.lstrip().startswith(("•", "-")) for s in lines) / max(len(lines), 1),
        "ellipsis_lines_ratio": sum(s.rstrip().endswith(("...", "…")) for s in lines) / max(len(lines), 1),
        "alpha_words_ratio": sum(any(c.isalpha() for c in w) for w in words) / n if n else None,
        "distinct_stop_words": sorted(set(STOP_WORDS) & set(words)),
    }


def gopher_repetition_values(text: str, lang: str) -> dict:
    import re

    out: dict = {}
    if not text:
        return out
    paragraphs = re.split(r"\n{2,}", text.strip())
    dup, chars = find_duplicates(paragraphs)
    out["dup_para_frac"] = dup / len(paragraphs)
    out["dup_para_char_frac"] = chars / len(text)
    lines = re.split("\n+", text)
    dup, chars = find_duplicates(lines)
    out["dup_line_frac"] = dup / len(lines)
    out["dup_line_char_frac"] = chars / len(text)
    words = split_into_words(text, lang)
    out["tokens"] = len(words)
    for n in (2, 3, 4):
        grams = get_n_grams(words, n)
        out[f"top_{n}_gram"] = find_top_duplicate(grams) / len(text) if grams else 0.0
    for n in range(5, 11):
        out[f"duplicated_{n}_n_grams"] = find_all_duplicate(words, n) / len(text)
    return out


def fineweb_values(text: str, lang: str) -> dict:
    lines = [ln for ln in text.split("\n") if ln.strip() != ""]
    if not lines:
        return {"lines": 0}
    stop = tuple(TERMINAL_PUNCTUATION)
    words = split_into_words(text, lang)
    return {
        "lines": len(lines),
        "line_punct_ratio": sum(ln.endswith(stop) for ln in lines) / len(lines),
        "short_line_ratio": sum(len(ln) <= 30 for ln in lines) / len(lines),
        "char_dup_ratio": find_duplicates(lines)[1] / max(len(text.replace("\n", "")), 1),
        "tokens": len(words),
        "list_ratio": text.count("\n") / len(words) if words else None,
    }


def c4_values(text: str, lang: str) -> dict:
    """The C4 filter's loop (default settings) re-run to count lines per reason and sentences;
    ``end`` is where it stopped: ``lorem_ipsum``/``curly_bracket`` (document dropped) or ``done``."""
    counts = Counter()
    sentences = 0
    end = "done"
    for line in text.splitlines():
        line = line.strip()
        words = line.split()
        if any(len(w) > 1000 for w in words):
            counts["too_long_word"] += 1
            continue
        line = CITATION_REGEX.sub("", line)
        if not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS):
            counts["no_terminal_punct"] += 1
            continue
        if len(words) < 3:
            counts["too_few_words"] += 1
            continue
        low = line.lower()
        if "lorem ipsum" in low:
            end = "lorem_ipsum"
            break
        if "javascript" in low:
            counts["javascript"] += 1
            continue
        if "{" in line:
            end = "curly_bracket"
            break
        if any(p in low for p in POLICY_SUBSTRINGS):
            counts["policy"] += 1
            continue
        sentences += len(split_into_sentences(line, lang))
        counts["kept"] += 1
    return {"lines_removed": dict(counts), "sentences": sentences, "end": end}


def tokenizer_language(lang: str) -> str:
    """``lang`` if datatrove has a word tokenizer for it that loads here, else English (its default);
    the choice is printed once per language on stderr."""
    if lang in _TOKENIZER_CHOICE:
        return _TOKENIZER_CHOICE[lang]
    choice = _iso639_3().get(lang, lang)
    try:
        split_into_words("probe text", choice)
    except Exception as exc:  # noqa: BLE001 - no tokenizer or a missing optional dependency
        choice = Languages.english
        print(f"datatrove: no word tokenizer for {lang!r} ({type(exc).__name__}: {exc}); using {choice!r}",
              file=sys.stderr)
    _TOKENIZER_CHOICE[lang] = choice
    return choice


_TOKENIZER_CHOICE: dict[str, str] = {}


def _iso639_3() -> dict[str, str]:
    """ISO 639-1 → the ISO 639-3 code datatrove's tokenizer table marks as that code's default
    (``default_code_1`` and ``default_script`` TRUE). Needed because datatrove 0.10's table loader
    tests those columns as strings ("FALSE" is truthy), so a 2-letter key can end on a non-default
    row (``zh`` → Hakka in Latin script, a whitespace/``xx`` tokenizer)."""
    import csv
    import os

    from datatrove.utils._import_utils import ASSETS_PATH

    out: dict[str, str] = {}
    with open(os.path.join(ASSETS_PATH, "tokenizer_assignment.csv"), encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["code_1"] and row["default_code_1"] == "TRUE" and row["default_script"] == "TRUE":
                out.setdefault(row["code_1"], row["code_3"])
    return out


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    filters: dict[str, dict] = {}
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for raw in f:
            doc = json.loads(raw)
            lang = tokenizer_language(doc["language"])
            if lang not in filters:
                filters[lang] = {
                    "gopher_quality": GopherQualityFilter(language=lang),
                    "gopher_repetition": GopherRepetitionFilter(language=lang),
                    "c4": C4QualityFilter(language=lang),
                    "fineweb": FineWebQualityFilter(language=lang),
                }
            for name, flt in filters[lang].items():
                d = Document(text=doc["text"], id=doc["id"])
                try:
                    res = flt.filter(d)
                except Exception as exc:  # noqa: BLE001 - reported, not hidden
                    rec = {"id": doc["id"], "filter": name, "passed": None,
                           "reason": f"error: {type(exc).__name__}: {exc}"[:300], "values": {}}
                    out.write(json.dumps(rec) + "\n")
                    continue
                passed, reason = (res, None) if isinstance(res, bool) else (res[0], res[1])
                if name == "gopher_quality":
                    values = gopher_quality_values(doc["text"], lang)
                elif name == "gopher_repetition":
                    values = gopher_repetition_values(doc["text"], lang)
                elif name == "fineweb":
                    values = fineweb_values(doc["text"], lang)
                else:
                    values = c4_values(doc["text"], lang)
                values["tokenizer_language"] = lang
                out.write(json.dumps({"id": doc["id"], "filter": name, "passed": bool(passed),
                                      "reason": reason, "values": values}) + "\n")


if __name__ == "__main__":
    main()
