"""The report's sections: :class:`~pipelines.report.lakedata.LakeData` → titled HTML parts with
Vega-Lite charts (built with altair, rendered in the browser by vega-embed as SVG).

Each section function returns a :class:`Section`; a section whose tables are missing says which
stage fills them instead of drawing an empty chart.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import pandas as pd

from pipelines.report.lakedata import SAMPLE_REMOVED, LakeData

#: Chart sizes (pixels): one beside another in a 1200-pixel page.
WIDE, NARROW, HEIGHT = 520, 380, 240
#: One colour per stage, the same in every chart.
STAGE_COLORS = {"ingest": "#4c78a8", "dedup": "#f58518", "filter": "#e45756", "tokenize": "#72b7b2",
                "embed": "#54a24b", "index": "#eeca3b", "clicks_ingest": "#b279a2",
                "clicks_features": "#ff9da6", "train_tokenizer": "#9d755d"}
OUTCOME_COLORS = alt.Scale(domain=["passed", "failed"], range=["#9ecae9", "#e45756"])


@dataclass
class Section:
    """One part of the page: ``key`` (its anchor), ``title``, a lead paragraph, charts
    (``(title, Vega-Lite spec)``, in order) and HTML after them; ``empty`` says what to run when
    the lake has none of its data."""
    key: str
    title: str
    lead: str = ""
    charts: list[tuple[str, dict]] = field(default_factory=list)
    html: str = ""
    empty: str = ""


def _spec(chart: alt.TopLevelMixin) -> dict:
    return chart.to_dict()


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _n(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.4g}"
    return f"{int(value):,}"


def table_html(frame: pd.DataFrame, columns: dict[str, str], *, numeric: set[str] = frozenset(),
               formats: dict[str, Callable[[Any], str]] | None = None, cls: str = "") -> str:
    """``frame`` as an HTML table: ``columns`` maps column → header; values escaped."""
    formats = formats or {}
    head = "".join(f'<th class="{"num" if c in numeric else ""}">{_esc(h)}</th>' for c, h in columns.items())
    rows = []
    for _, r in frame.iterrows():
        cells = []
        for c in columns:
            v = r[c]
            text = formats[c](v) if c in formats else (_n(v) if c in numeric else _esc(v))
            cells.append(f'<td class="{"num" if c in numeric else ""}">{text}</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _stage_of(step: str) -> str:
    return {"ingested": "ingest", "deduplicated": "dedup", "clean (text cleaned)": "clean"}.get(step, "filter")


# -- sections ---------------------------------------------------------------------------------------

def funnel(data: LakeData) -> Section:
    s = Section("funnel", "Document funnel",
                "Documents and whitespace words left after each step: ingest, dedup, then each filter in the "
                "order it ran (a document leaves at the first filter it fails).")
    if data.funnel is None:
        s.empty = "No documents yet: run <code>crawlake run</code> (ingest, dedup, filter)."
        return s
    f = data.funnel.copy()
    # filter steps that removed nothing (informational rows, rules nothing failed first) are left out
    filters = ~f["step"].isin(["ingested", "deduplicated", "filter input", "clean (text cleaned)"])
    quiet = filters & (f["documents"].diff() == 0)
    hidden = list(f.loc[quiet, "step"])
    f = f[~quiet].reset_index(drop=True)
    base = f["documents"].iloc[0] or 1
    f["share"] = f["documents"] / base
    f["stage"] = f["step"].map(_stage_of)
    colors = alt.Scale(domain=["ingest", "dedup", "filter", "clean"], range=["#4c78a8", "#f58518", "#e45756", "#54a24b"])
    steps = list(f["step"])
    height = max(HEIGHT, 18 * len(f))
    for measure, title in (("documents", "Documents left after each step"), ("words", "Words left after each step")):
        if f[measure].isna().all():
            continue
        bars = alt.Chart(f).mark_bar().encode(
            y=alt.Y("step:N", sort=steps, title=None),
            x=alt.X(f"{measure}:Q", title=measure),
            color=alt.Color("stage:N", scale=colors, legend=alt.Legend(title="stage", orient="bottom")),
            tooltip=["step", alt.Tooltip(f"{measure}:Q", format=","), alt.Tooltip("share:Q", format=".1%")])
        text = bars.mark_text(align="left", dx=3, fontSize=10).encode(text=alt.Text(f"{measure}:Q", format=","),
                                                                         color=alt.value("#333"))
        s.charts.append((title, _spec((bars + text).properties(width=NARROW, height=height))))
    if data.funnel_languages is not None:
        lf = data.funnel_languages[~data.funnel_languages["step"].isin(hidden)]
        order = list(dict.fromkeys(lf.sort_values("order")["step"]))
        chart = alt.Chart(lf).mark_line(point=True).encode(
            x=alt.X("step:N", sort=order, title=None, axis=alt.Axis(labelAngle=-40)),
            y=alt.Y("share:Q", axis=alt.Axis(format="%"), title="share of the language's filter input left"),
            color=alt.Color("language:N", legend=alt.Legend(orient="bottom")),
            tooltip=["language", "step", alt.Tooltip("documents:Q", format=","), alt.Tooltip("share:Q", format=".1%")])
        s.charts.append(("Per top language: share left after each filter step",
                         _spec(chart.properties(width=WIDE + 300, height=HEIGHT))))
    notes = []
    if hidden:
        notes.append(f"{len(hidden)} filter steps removed no document and are not shown: {', '.join(hidden)}.")
    if data.not_yet_filtered:
        notes.append(f"{data.not_yet_filtered:,} deduplicated documents have not been through the filter yet.")
    s.html = table_html(f, {"step": "step", "documents": "documents", "share": "of ingested", "words": "words"},
                        numeric={"documents", "words", "share"}, formats={"share": lambda v: f"{v:.1%}"}, cls="compact") \
        + "".join(f'<p class="note">{_esc(n)}</p>' for n in notes)
    return s


def rules(data: LakeData) -> Section:
    s = Section("rules", "Filter rules",
                "Documents each rule failed (any failure) and removed (its first failure), and for the three "
                "rules that failed most, the distribution of the measured value with the threshold drawn.")
    if data.rules is None:
        s.empty = "No filter decisions yet: run <code>crawlake run --stages filter</code>."
        return s
    r = data.rules[data.rules["failed"] > 0].sort_values(["failed", "order"], ascending=[False, True])
    if r.empty:
        s.html = '<p class="note">No document failed a rule.</p>'
        return s
    top = r.head(15)
    long = pd.concat([top.assign(count=top["failed"], measure="failed (any)"),
                      top.assign(count=top["removed"], measure="removed (first failure)")])
    chart = alt.Chart(long).mark_bar().encode(
        y=alt.Y("filter:N", sort=list(top["filter"]), title=None),
        x=alt.X("count:Q", title="documents"),
        yOffset=alt.YOffset("measure:N"),
        color=alt.Color("measure:N", scale=alt.Scale(range=["#fdae6b", "#e45756"]),
                        legend=alt.Legend(orient="bottom", title=None)),
        tooltip=["filter", "measure", alt.Tooltip("count:Q", format=",")])
    s.charts.append(("Top failing rules", _spec(chart.properties(width=WIDE, height=max(HEIGHT, 26 * len(top))))))
    for name, values in data.rule_values.items():
        bins = values["bins"]
        threshold = values["threshold"]
        bars = alt.Chart(bins).mark_bar(opacity=0.85).encode(
            x=alt.X("start:Q", bin="binned", title=f"{name} (measured value)"), x2="end:Q",
            y=alt.Y("documents:Q", stack=True, title="documents"),
            color=alt.Color("outcome:N", scale=OUTCOME_COLORS, legend=alt.Legend(orient="bottom", title=None)),
            tooltip=[alt.Tooltip("start:Q", format=".4g"), alt.Tooltip("end:Q", format=".4g"), "outcome",
                     alt.Tooltip("documents:Q", format=",")])
        line = pd.DataFrame({"threshold": [threshold], "label": [f"threshold {threshold:.4g}"]})
        rule = alt.Chart(line).mark_rule(color="#222", strokeDash=[5, 3], size=2).encode(x="threshold:Q")
        label = alt.Chart(line).mark_text(align="left", dx=4, dy=-4, fontSize=11, color="#222").encode(
            x="threshold:Q", y=alt.value(8), text="label:N")
        s.charts.append((f"{name}: measured value and threshold",
                         _spec((bars + rule + label).properties(width=NARROW, height=HEIGHT - 40))))

    def threshold(row) -> str:
        lo, hi = row["threshold_min"], row["threshold_max"]
        if lo is None or (isinstance(lo, float) and math.isnan(lo)):
            return "–"
        return f"{lo:.4g}" if lo == hi else f"{lo:.4g} – {hi:.4g}"

    t = r.head(10).copy()
    t["threshold"] = [threshold(row) for _, row in t.iterrows()]
    t["failed_share"] = t["failed"] / t["rows"]
    s.html = table_html(t, {"filter": "rule", "failed": "failed", "failed_share": "of judged", "removed": "removed first",
                            "threshold": "threshold", "median_value": "median value"},
                        numeric={"failed", "removed", "median_value", "failed_share"},
                        formats={"failed_share": lambda v: f"{v:.1%}", "threshold": _esc})
    return s


def dedup(data: LakeData) -> Section:
    s = Section("dedup", "Deduplication",
                "Exact (same normalized text) and near (MinHash-LSH) duplicates removed, the size of the clusters, "
                "the estimated Jaccard similarity of each removed document to the one kept, and the largest clusters.")
    if data.dedup_removed is None:
        s.empty = "No dedup results yet: run <code>crawlake run --stages dedup</code>."
        return s
    removed = alt.Chart(data.dedup_removed).mark_bar().encode(
        x=alt.X("method:N", title=None, sort=["exact", "near"]), y=alt.Y("documents:Q", title="documents removed"),
        color=alt.Color("method:N", scale=alt.Scale(domain=["exact", "near"], range=["#4c78a8", "#f58518"]), legend=None),
        tooltip=["method", alt.Tooltip("documents:Q", format=",")])
    text = removed.mark_text(dy=-6).encode(text=alt.Text("documents:Q", format=","), color=alt.value("#333"))
    s.charts.append(("Exact vs near duplicates removed", _spec((removed + text).properties(width=200, height=HEIGHT))))
    if data.cluster_sizes is not None and not data.cluster_sizes.empty:
        sizes = alt.Chart(data.cluster_sizes).mark_bar().encode(
            x=alt.X("size:N", sort=list(dict.fromkeys(data.cluster_sizes["size"])), title="cluster size (documents)",
                    axis=alt.Axis(labelAngle=0)),
            xOffset="method:N",
            y=alt.Y("clusters:Q", title="clusters (symlog scale)", scale=alt.Scale(type="symlog"),
                    axis=alt.Axis(format="d", tickMinStep=1)),
            color=alt.Color("method:N", scale=alt.Scale(domain=["exact", "near"], range=["#4c78a8", "#f58518"]),
                            legend=alt.Legend(orient="bottom")),
            tooltip=["method", "size", alt.Tooltip("clusters:Q", format=",")])
        s.charts.append(("Cluster sizes", _spec(sizes.properties(width=NARROW, height=HEIGHT))))
    if data.jaccard is not None:
        jac = alt.Chart(data.jaccard).mark_bar().encode(
            x=alt.X("start:Q", bin="binned", title="estimated Jaccard to the kept document"), x2="end:Q",
            y=alt.Y("documents:Q", stack=True, title="removed documents"),
            color=alt.Color("method:N", scale=alt.Scale(domain=["exact", "near"], range=["#4c78a8", "#f58518"]),
                            legend=alt.Legend(orient="bottom")),
            tooltip=[alt.Tooltip("start:Q", format=".3f"), alt.Tooltip("end:Q", format=".3f"), "method",
                     alt.Tooltip("documents:Q", format=",")])
        s.charts.append(("Similarity of removed documents", _spec(jac.properties(width=NARROW, height=HEIGHT))))
    if data.largest_clusters is not None and not data.largest_clusters.empty:
        big = data.largest_clusters.copy()
        big["label"] = [(u or c)[:60] for u, c in zip(big["kept_url"], big["cluster_id"])]
        chart = alt.Chart(big).mark_bar().encode(
            y=alt.Y("label:N", sort=list(big["label"]), title="kept document"), x=alt.X("size:Q", title="documents"),
            color=alt.Color("method:N", scale=alt.Scale(domain=["exact", "near"], range=["#4c78a8", "#f58518"]),
                            legend=alt.Legend(orient="bottom")),
            tooltip=["cluster_id", "method", "size", "kept_url"])
        s.charts.append(("The 10 largest clusters", _spec(chart.properties(width=NARROW, height=max(HEIGHT, 22 * len(big))))))
        s.html = "<h3>The 10 largest clusters</h3>" + table_html(
            big, {"cluster_id": "cluster (kept doc_id)", "method": "method", "size": "documents", "kept_url": "kept URL"},
            numeric={"size"}, formats={"kept_url": _link, "cluster_id": lambda v: f"<code>{_esc(v)}</code>"})
    return s


def _link(url: Any) -> str:
    if not url:
        return "–"
    text = _esc(url if len(url) <= 90 else url[:87] + "…")
    return f'<a href="{_esc(url)}" rel="noreferrer noopener">{text}</a>'


def lengths(data: LakeData) -> Section:
    s = Section("lengths", "Lengths",
                "Characters per document (as ingested and after cleaning), tokens per document, and how full the "
                "packed training sequences are (the rest is padding).")
    if data.doc_lengths is None and data.doc_tokens is None and data.seq_fill is None:
        s.empty = "No documents yet: run <code>crawlake run</code>."
        return s
    if data.doc_lengths is not None and not data.doc_lengths.empty:
        chart = alt.Chart(data.doc_lengths).mark_bar(opacity=0.6).encode(
            x=alt.X("start:Q", bin="binned", scale=alt.Scale(type="log"), title="characters per document (log)"),
            x2="end:Q", y=alt.Y("documents:Q", stack=None, title="documents"),
            color=alt.Color("table:N", scale=alt.Scale(range=["#4c78a8", "#54a24b"]), legend=alt.Legend(orient="bottom")),
            tooltip=["table", alt.Tooltip("start:Q", format=",.0f"), alt.Tooltip("end:Q", format=",.0f"),
                     alt.Tooltip("documents:Q", format=",")])
        s.charts.append(("Document length", _spec(chart.properties(width=NARROW, height=HEIGHT))))
    if data.doc_tokens is not None and not data.doc_tokens.empty:
        chart = alt.Chart(data.doc_tokens).mark_bar(color="#72b7b2").encode(
            x=alt.X("start:Q", bin="binned", scale=alt.Scale(type="log"), title="tokens per document (log)"),
            x2="end:Q", y=alt.Y("documents:Q", title="documents"),
            tooltip=[alt.Tooltip("start:Q", format=",.0f"), alt.Tooltip("end:Q", format=",.0f"),
                     alt.Tooltip("documents:Q", format=",")])
        s.charts.append(("Tokens per document", _spec(chart.properties(width=NARROW, height=HEIGHT))))
    if data.seq_fill is not None and not data.seq_fill.empty:
        chart = alt.Chart(data.seq_fill).mark_bar(color="#b279a2").encode(
            x=alt.X("start:Q", bin="binned", axis=alt.Axis(format="%"), title="sequence fill (non-padding tokens)"),
            x2="end:Q", y=alt.Y("sequences:Q", title="sequences"),
            tooltip=[alt.Tooltip("start:Q", format=".0%"), alt.Tooltip("end:Q", format=".0%"),
                     alt.Tooltip("sequences:Q", format=",")])
        s.charts.append(("Sequence fill", _spec(chart.properties(width=NARROW, height=HEIGHT))))
    st = data.seq_stats
    if "sequences" in st:
        s.html = (f'<p class="note">{st["sequences"]:,} sequences of {st["sequence_length"]:,} token ids, '
                  f'{st["tokens"]:,} tokens, padding {st["padding"]:.1%} of all positions'
                  + (f'; {st["documents"]:,} documents, {st["mean_doc_tokens"]:,.0f} tokens each on average'
                     if "documents" in st else "") + ".</p>")
    return s


def clicks(data: LakeData) -> Section:
    s = Section("clicks", "Click logs", "Criteo click-log rows, lines set aside with their reason, click-through "
                "rate per day, and the vocabulary of each categorical column.")
    if data.clicks is None:
        s.empty = "No click logs in this lake (<code>crawlake clicks ingest</code>, <code>crawlake clicks features</code>)."
        return s
    c = data.clicks
    s.lead += (f" {c['rows']:,} rows, {c['quarantined']:,} quarantined lines"
               + (f", {c.get('positives', 0):,} clicks over {c.get('days', 0)} day(s)." if "days" in c else "."))
    if data.clicks_days is not None and not data.clicks_days.empty:
        base = alt.Chart(data.clicks_days).encode(x=alt.X("day:O", title="day", axis=alt.Axis(labelAngle=0)))
        bars = base.mark_bar(color="#c7dbef").encode(y=alt.Y("impressions:Q", title="impressions"),
                                                     tooltip=["day", alt.Tooltip("impressions:Q", format=",")])
        line = base.mark_line(point=True, color="#e45756").encode(
            y=alt.Y("ctr:Q", axis=alt.Axis(format=".1%", titleColor="#e45756"), title="click-through rate"),
            tooltip=["day", alt.Tooltip("ctr:Q", format=".2%"), alt.Tooltip("clicks:Q", format=",")])
        s.charts.append(("Impressions and CTR per day",
                         _spec(alt.layer(bars, line).resolve_scale(y="independent").properties(width=NARROW, height=HEIGHT))))
    if data.clicks_quarantine is not None and not data.clicks_quarantine.empty:
        chart = alt.Chart(data.clicks_quarantine).mark_bar(color="#e45756").encode(
            y=alt.Y("reason:N", sort="-x", title=None), x=alt.X("lines:Q", title="lines quarantined"),
            tooltip=["reason", alt.Tooltip("lines:Q", format=",")])
        s.charts.append(("Quarantine by reason", _spec(chart.properties(width=NARROW, height=HEIGHT - 80))))
    if data.click_vocab is not None and not data.click_vocab.empty:
        chart = alt.Chart(data.click_vocab).mark_bar(color="#b279a2").encode(
            x=alt.X("column:N", sort=list(data.click_vocab["column"]), title=None),
            y=alt.Y("values:Q", scale=alt.Scale(type="log"), title="vocabulary size (log)"),
            tooltip=["column", alt.Tooltip("values:Q", format=",")])
        s.charts.append(("Vocabulary size per column", _spec(chart.properties(width=WIDE, height=HEIGHT))))
    return s


def runs(data: LakeData) -> Section:
    s = Section("runs", "Runs", "Seconds per stage and rows read per second in each run (from <code>ops.runs</code>), "
                "the latest quality-gate results per table (<code>ops.quality</code>), and every table's Delta version.")
    parts = []
    if data.runs is not None:
        r = data.runs.copy()
        r["run"] = r["run_started"].dt.strftime("%m-%d %H:%M:%S") + " " + r["run_id"].str[-8:]
        run_order = list(dict.fromkeys(r["run"]))
        stages = [st for st in STAGE_COLORS if st in set(r["stage"])] + sorted(set(r["stage"]) - set(STAGE_COLORS))
        colors = alt.Scale(domain=stages, range=[STAGE_COLORS.get(st, "#999") for st in stages])
        bars = alt.Chart(r).mark_bar().encode(
            x=alt.X("run:N", sort=run_order, title="run (start, UTC)", axis=alt.Axis(labelAngle=-40)),
            y=alt.Y("seconds:Q", title="seconds", stack=True), color=alt.Color("stage:N", scale=colors,
                                                                             legend=alt.Legend(orient="bottom")),
            order=alt.Order("started_at:T"),
            tooltip=["run_id", "stage", "status", alt.Tooltip("seconds:Q", format=".1f"),
                     alt.Tooltip("rows_in:Q", format=","), alt.Tooltip("rows_out:Q", format=",")])
        s.charts.append(("Stage seconds per run", _spec(bars.properties(width=WIDE, height=HEIGHT))))
        rates = r[r["rows_per_s"].notna() & (r["rows_per_s"] > 0)]
        if not rates.empty:
            chart = alt.Chart(rates).mark_line(point=True).encode(
                x=alt.X("run:N", sort=run_order, title="run (start, UTC)", axis=alt.Axis(labelAngle=-40)),
                y=alt.Y("rows_per_s:Q", scale=alt.Scale(type="log"), title="rows in per second (log)"),
                color=alt.Color("stage:N", scale=colors, legend=alt.Legend(orient="bottom")),
                tooltip=["run_id", "stage", alt.Tooltip("rows_per_s:Q", format=",.0f"),
                         alt.Tooltip("seconds:Q", format=".1f")])
            s.charts.append(("Rows per second per stage", _spec(chart.properties(width=NARROW, height=HEIGHT))))
        failed = r[r["status"] != "succeeded"]
        if not failed.empty:
            parts.append(f'<p class="note bad">{len(failed)} failed stage run(s) among the last runs.</p>')
    if data.quality is not None:
        q = data.quality
        long = pd.concat([q.assign(outcome="passed", expectations=q["passed"]),
                          q.assign(outcome="failed", expectations=q["failed"])])
        chart = alt.Chart(long).mark_bar().encode(
            y=alt.Y("table:N", title=None), x=alt.X("expectations:Q", stack=True, title="expectations (latest validation)"),
            color=alt.Color("outcome:N", scale=OUTCOME_COLORS, legend=alt.Legend(orient="bottom", title=None)),
            tooltip=["table", "stage", "run_id", "outcome", "expectations"])
        s.charts.append(("Quality gates", _spec(chart.properties(width=NARROW, height=max(HEIGHT, 20 * len(q))))))
        if data.quality_failures is not None and not data.quality_failures.empty:
            parts.append("<h3>Failed expectations</h3>" + table_html(
                data.quality_failures, {"table": "table", "expectation": "expectation", "column": "column",
                                        "observed": "observed"}))
        else:
            parts.append(f'<p class="note">Every expectation of the latest validation of each of {len(q)} tables passed.</p>')
    present = [t for t in data.tables if t.exists]
    if present:
        frame = pd.DataFrame([{"table": t.name, "version": t.version, "rows": t.rows, "files": t.files,
                               "size": t.bytes, "modified": t.modified} for t in present])
        parts.append("<h3>Tables</h3>" + table_html(
            frame, {"table": "table", "version": "Delta version", "rows": "rows", "files": "files", "size": "size",
                    "modified": "last commit (UTC)"},
            numeric={"version", "rows", "files", "size"},
            formats={"size": _bytes, "modified": lambda v: _esc(v.strftime("%Y-%m-%d %H:%M:%S") if v else "–")},
            cls="compact"))
    if not s.charts and not parts:
        s.empty = "No runs recorded yet (<code>ops.runs</code> is empty)."
    s.html = "".join(parts)
    return s


def _bytes(n: Any) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "–"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def removed(data: LakeData) -> Section:
    s = Section("removed", "Why was this removed?",
                f"{SAMPLE_REMOVED} removed documents drawn at random (seeded), shared between dedup and the filter in "
                "proportion to what each removed, with the decision that removed them. "
                "<code>crawlake explain &lt;doc_id&gt;</code> tells the whole story of any document.")
    if not data.removed_sample:
        s.empty = "No removed documents (or dedup and filter have not run)."
        return s
    rows = []
    for r in data.removed_sample:
        rows.append(
            f'<div class="why"><div class="why-head"><span class="tag {r["removed_by"]}">{_esc(r["removed_by"])}</span> '
            f'<code>{_esc(r["doc_id"])}</code> {_link(r["url"])}</div>'
            f'<div class="why-reason">{_esc(r["reason"])}</div>'
            f'<div class="why-text">{_esc(r["snippet"])}{"…" if len(r["snippet"] or "") >= 240 else ""}</div></div>')
    s.html = f'<div class="whys">{"".join(rows)}</div>'
    return s


#: The sections, in page order.
SECTIONS = (funnel, rules, dedup, lengths, clicks, runs, removed)
