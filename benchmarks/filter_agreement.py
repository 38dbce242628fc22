"""Agreement of crawlake's quality filters with datatrove's, document by document.

Input: every document crawlake's ingest kernel (``pipelines.kernels.warc.parse_warc_file``) gets
from the WARC/WET files in ../shared/data (HTML responses extracted with resiliparse, WET
conversion records as they are). The texts are written to a JSONL file in a temporary folder
(nothing is copied into the repository) and both systems judge the **same text**:

  crawlake   ``pipelines.kernels.filters``: ``gopher_measures``, ``gopher_repetition_measures``,
             ``c4_apply`` and ``fineweb_measures`` with their default parameters (the published
             values, the same as datatrove's defaults; C4 with the terminal-punctuation line rule
             on, as datatrove's ``C4QualityFilter`` default); a document fails a family when any
             of its decisions failed
  datatrove  ``GopherQualityFilter``, ``GopherRepetitionFilter``, ``C4QualityFilter``,
             ``FineWebQualityFilter`` with default arguments, run by
             ``benchmarks/_filter_agreement_datatrove.py`` in a separate virtualenv (datatrove is
             not a crawlake dependency); ``--dt-python`` names its interpreter

Each filter family is compared on its own, on the extracted text (not chained: FineWeb here does
not see C4's output). C4 rewrites the text in both systems; only the keep/drop decision is compared.

Two language settings (``--languages``):

  en        every document is judged as English: datatrove's default ``language=english`` (the
            FineWeb setting, where the filters run after an English-only language filter) and
            crawlake called with ``language="en"``
  detected  crawlake's fastText language (lid.176) per document; datatrove builds its filters with
            that language's word tokenizer (falls back to English where it has none), crawlake
            applies its own language rules (no word rules for unsegmented scripts, stop words only
            for English)

Output: a table per setting, or with ``--json`` one line per filter and setting:
{"benchmark": "filter_agreement", "system": "crawlake", "metric": "agreement_<filter>[_detected]",
"value": fraction, "unit": "fraction", "documents": n, "disagreements": k, "languages": ...}.
``--explain`` lists every disagreeing document with both sides' failing rules and values;
``--rules`` compares the verdicts rule by rule where datatrove measures the same quantity (a
document can differ on a rule and still agree on the family's decision).

The datatrove virtualenv (datatrove 0.10's base install lacks ``regex``, which its text utilities
import, and the word tokenizers it assigns: spaCy blank pipelines, no model download, no NLTK data;
jieba for Chinese)::

    python3.11 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install datatrove regex spacy jieba

    python benchmarks/filter_agreement.py [--json] [--explain] [--rules] [--languages en,detected]
        [--dt-python /tmp/dtvenv/bin/python] [--keep-jsonl DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("CRAWLAKE_REAL_DATA", REPO.parent / "shared" / "data"))
FILES = ("cc-main-2020-34-excerpt.warc.gz", "ia-heritrix-2008-example.warc.gz",
         "cc-main-2024-22-whirlwind.warc.gz", "cc-main-2024-22-whirlwind.warc.wet.gz")
FILTERS = ("gopher_quality", "gopher_repetition", "c4", "fineweb")
DT_SCRIPT = Path(__file__).resolve().parent / "_filter_agreement_datatrove.py"


def load_documents() -> list[dict]:
    """Document rows of the data files, with crawlake's language ID."""
    from pipelines.kernels.filters import detect_language
    from pipelines.kernels.warc import parse_warc_file

    missing = [f for f in FILES if not (DATA / f).exists()]
    if missing:
        raise SystemExit(f"real test data missing in {DATA} ({', '.join(missing)}); "
                         "set CRAWLAKE_REAL_DATA=<dir>")
    docs = []
    for name in FILES:
        for row in parse_warc_file(str(DATA / name)).rows:
            if row["kind"] == "document":
                docs.append({"id": row["doc_id"], "file": name, "url": row.get("url"), "text": row["text"]})
    for doc, (lang, score) in zip(docs, detect_language([d["text"] for d in docs])):
        doc["detected"], doc["score"] = lang, score
    return docs


def crawlake_decisions(docs: list[dict], mode: str) -> dict[tuple[str, str], dict]:
    """(doc id, filter) → {"passed", "failed": [(rule, value, threshold)], "language"}."""
    from pipelines.config import C4Config, FineWebConfig, GopherConfig, GopherRepetitionConfig
    from pipelines.kernels.filters import (
        Measure,
        c4_apply,
        fineweb_measures,
        gopher_measures,
        gopher_repetition_measures,
    )

    gq, gr, c4p, fw = GopherConfig(), GopherRepetitionConfig(), C4Config(), FineWebConfig()
    out = {}
    for d in docs:
        lang = "en" if mode == "en" else d["detected"]
        text = d["text"]
        measures = {
            "gopher_quality": [Measure(*m) for m in gopher_measures(text, lang, gq)],
            "gopher_repetition": gopher_repetition_measures(text, lang, gr),
            "c4": c4_apply(text, lang, c4p)[1],
            "fineweb": fineweb_measures(text, lang, fw),
        }
        for name, ms in measures.items():
            failed = [(m.filter, round(m.value, 4), m.threshold) for m in ms if not m.passed]
            values = {m.filter: round(m.value, 4) for m in ms}
            values.update({f"{m.filter}_detail": m.detail for m in ms if m.filter == "c4_lines_removed"})
            out[d["id"], name] = {"passed": not failed, "failed": failed, "language": lang, "values": values}
    return out


def datatrove_decisions(docs: list[dict], mode: str, dt_python: str, workdir: Path) -> dict:
    src, dst = workdir / f"docs_{mode}.jsonl", workdir / f"datatrove_{mode}.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for d in docs:
            lang = "eng" if mode == "en" else d["detected"]
            f.write(json.dumps({"id": d["id"], "text": d["text"], "language": lang}) + "\n")
    proc = subprocess.run([dt_python, str(DT_SCRIPT), str(src), str(dst)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"datatrove run failed ({dt_python}):\n{proc.stderr[-4000:]}")
    notes = [ln for ln in proc.stderr.splitlines() if ln.startswith("datatrove: ")]
    out = {}
    with open(dst, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            out[r["id"], r["filter"]] = r
    return out, notes


def datatrove_version(dt_python: str) -> str:
    proc = subprocess.run([dt_python, "-c", "import importlib.metadata as m; print(m.version('datatrove'))"],
                          capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def compare(docs, ours, theirs) -> dict[str, dict]:
    res = {}
    for name in FILTERS:
        agree, dis, errors = 0, [], 0
        for d in docs:
            c, t = ours[d["id"], name], theirs.get((d["id"], name))
            if t is None or t["passed"] is None:
                errors += 1
                continue
            if c["passed"] == t["passed"]:
                agree += 1
            else:
                dis.append((d, c, t))
        n = agree + len(dis)
        res[name] = {"documents": n, "agree": agree, "disagreements": dis, "errors": errors,
                     "crawlake_kept": sum(ours[d["id"], name]["passed"] for d in docs),
                     "datatrove_kept": sum(bool(theirs.get((d["id"], name), {}).get("passed")) for d in docs),
                     "value": agree / n if n else float("nan")}
    return res


#: crawlake rule → (datatrove value key(s), pass test) for rules whose quantity datatrove also
#: measures (with its own tokens); used by ``--rules`` to compare verdicts rule by rule.
RULE_PAIRS = {
    "gopher_quality": {
        "gopher_min_doc_words": (("words",), lambda v: v[0] >= 50),
        "gopher_max_doc_words": (("words",), lambda v: v[0] <= 100_000),
        "gopher_min_avg_word_length": (("avg_word_length",), lambda v: v[0] is None or v[0] >= 3),
        "gopher_max_avg_word_length": (("avg_word_length",), lambda v: v[0] is None or v[0] <= 10),
        "gopher_symbol_word_ratio": (("hash_ratio", "ellipsis_ratio"),
                                     lambda v: v[0] is None or (v[0] <= 0.1 and v[1] <= 0.1)),
        "gopher_bullet_lines_ratio": (("bullet_lines_ratio",), lambda v: v[0] <= 0.9),
        "gopher_ellipsis_lines_ratio": (("ellipsis_lines_ratio",), lambda v: v[0] <= 0.3),
        "gopher_alpha_words_ratio": (("alpha_words_ratio",), lambda v: v[0] is None or v[0] >= 0.8),
        "gopher_stop_words": (("distinct_stop_words",), lambda v: len(v[0]) >= 2),
    },
    "gopher_repetition": {
        **{f"gopher_rep_{k}": ((k,), (lambda lim: lambda v: v[0] <= lim)(lim)) for k, lim in (
            ("dup_para_frac", 0.3), ("dup_para_char_frac", 0.2), ("dup_line_frac", 0.3),
            ("dup_line_char_frac", 0.2))},
        **{f"gopher_rep_top_{n}gram_char_frac": ((f"top_{n}_gram",), (lambda lim: lambda v: v[0] <= lim)(lim))
           for n, lim in ((2, 0.2), (3, 0.18), (4, 0.16))},
        **{f"gopher_rep_dup_{n}gram_char_frac": ((f"duplicated_{n}_n_grams",),
                                                 (lambda lim: lambda v: v[0] <= lim)(lim))
           for n, lim in ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))},
    },
    "c4": {"c4_min_sentences": (("sentences", "end"), lambda v: v[1] != "done" or v[0] >= 5)},
    "fineweb": {
        "fineweb_line_punct_ratio": (("line_punct_ratio",), lambda v: v[0] >= 0.12),
        "fineweb_short_line_ratio": (("short_line_ratio",), lambda v: v[0] <= 0.67),
        "fineweb_char_dup_ratio": (("char_dup_ratio",), lambda v: v[0] <= 0.01),
        "fineweb_list_ratio": (("list_ratio",), lambda v: v[0] is None or v[0] <= 0.3),
    },
}


def rule_differences(docs, ours, theirs) -> list[tuple[str, str, int, int, list]]:
    """Per rule: (family, rule, documents compared, differing verdicts, examples). Rule-level
    differences can hide behind another rule's failure, so they outnumber the document-level ones."""
    out = []
    for family, rules in RULE_PAIRS.items():
        for rule, (keys, test) in rules.items():
            n, diff = 0, []
            for d in docs:
                c, t = ours[d["id"], family], theirs.get((d["id"], family))
                if rule not in c["values"] or t is None or t["passed"] is None:
                    continue
                tv = [t["values"].get(k) for k in keys]
                if any(k not in t["values"] for k in keys):
                    continue
                n += 1
                c_pass = rule not in {f[0] for f in c["failed"]}
                if c_pass != bool(test(tv)):
                    diff.append((d["id"], c["values"][rule], tv))
            out.append((family, rule, n, len(diff), diff))
    return out


def check_datatrove_values(theirs: dict) -> int:
    """Records whose recomputed ``values`` would not give the datatrove filter's own verdict (should
    be 0: the values shown by ``--explain`` and ``--rules`` are then the ones it decided on)."""
    bad = 0
    for (_, family), t in theirs.items():
        if t["passed"] is None:
            continue
        v = t["values"]
        if family == "fineweb" and not v.get("lines"):
            ok = False
        else:
            ok = all(test([v.get(k) for k in keys]) for keys, test in RULE_PAIRS[family].values()
                     if all(k in v for k in keys))
            if family == "gopher_quality" and not v.get("words"):
                ok = False
        bad += ok != t["passed"]
    return bad


def explain(mode: str, results: dict) -> None:
    for name, r in results.items():
        for d, c, t in r["disagreements"]:
            print(f"[{mode}] {name}  doc {d['id']}  {d['file']}  {d['url']}  lang={d['detected']}"
                  f"({d['score']:.2f})  chars={len(d['text'])}")
            print(f"    crawlake  ({c['language']}): {'keep' if c['passed'] else 'drop'}"
                  + (f"  failed {c['failed']}" if c["failed"] else "") + f"  {c['values']}")
            vals = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in t["values"].items()}
            print(f"    datatrove: {'keep' if t['passed'] else 'drop'}"
                  + (f"  reason {t['reason']}" if t["reason"] else "") + f"  {vals}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    ap.add_argument("--explain", action="store_true", help="list every disagreeing document")
    ap.add_argument("--languages", default="en,detected", help="comma list of: en, detected")
    ap.add_argument("--rules", action="store_true",
                    help="also compare rule by rule where datatrove measures the same quantity")
    ap.add_argument("--dt-python", default="/tmp/dtvenv/bin/python",
                    help="python of a virtualenv with datatrove installed")
    ap.add_argument("--keep-jsonl", help="write the JSONL files here instead of a temporary folder")
    args = ap.parse_args()

    docs = load_documents()
    version = datatrove_version(args.dt_python)
    with tempfile.TemporaryDirectory(prefix="filter_agreement_") as tmp:
        workdir = Path(args.keep_jsonl or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for mode in args.languages.split(","):
            ours = crawlake_decisions(docs, mode)
            theirs, notes = datatrove_decisions(docs, mode, args.dt_python, workdir)
            results = compare(docs, ours, theirs)
            inconsistent = check_datatrove_values(theirs)
            if inconsistent:
                print(f"warning: {inconsistent} datatrove records whose recomputed values do not give its verdict",
                      file=sys.stderr)
            suffix = "" if mode == "en" else f"_{mode}"
            for name, r in results.items():
                if args.json:
                    print(json.dumps({"benchmark": "filter_agreement", "system": "crawlake",
                                      "metric": f"agreement_{name}{suffix}", "value": round(r["value"], 4),
                                      "unit": "fraction", "documents": r["documents"],
                                      "disagreements": len(r["disagreements"]), "errors": r["errors"],
                                      "crawlake_kept": r["crawlake_kept"], "datatrove_kept": r["datatrove_kept"],
                                      "languages": mode, "datatrove": version}))
            if not args.json:
                langs = Counter(d["detected"] for d in docs)
                print(f"\nlanguages={mode}  documents={len(docs)}  datatrove {version}  "
                      f"detected: {dict(langs.most_common())}")
                for note in notes:
                    print("  " + note)
                print(f"{'filter':<20}{'agree':>8}{'docs':>6}{'dis':>5}{'err':>5}{'kept c/d':>12}")
                for name, r in results.items():
                    print(f"{name:<20}{r['value']:>8.3f}{r['documents']:>6}{len(r['disagreements']):>5}"
                          f"{r['errors']:>5}{r['crawlake_kept']:>6}/{r['datatrove_kept']}")
            if args.rules and not args.json:
                print(f"rule-level verdicts that differ ({mode}):")
                for family, rule, n, k, diff in rule_differences(docs, ours, theirs):
                    if k:
                        ex = "; ".join(f"{i[:8]} crawlake={v} datatrove={tv}" for i, v, tv in diff[:3])
                        print(f"  {rule:<34}{k:>4}/{n:<4} e.g. {ex}")
            if args.explain:
                explain(mode, results)


if __name__ == "__main__":
    main()
