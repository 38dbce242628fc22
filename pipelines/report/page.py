"""The report's HTML page: one file that opens offline.

Vega, Vega-Lite and vega-embed are inlined once (the bundle ``vl-convert-python`` ships, for the
Vega-Lite version altair writes; cached on disk after the first build, as building it takes a few
seconds), each chart's spec is JSON in the page, and a small script embeds every chart as SVG.
When all charts have drawn, the script sets ``data-charts-rendered`` (and ``data-charts-failed``)
on ``<body>``: what the browser test waits for.
"""

from __future__ import annotations

import html
import json
import os
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import altair as alt

from pipelines.report.sections import Section

#: The Vega-Lite version altair writes specs for (``v6.4.1`` → ``v6.4``), so the bundle matches.
VEGA_LITE = alt.SCHEMA_VERSION.rsplit(".", 1)[0]


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crawlake"


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """The vega-embed bundle (Vega, Vega-Lite, vega-embed; defines ``window.vegaEmbed``) as
    JavaScript, from ``vl-convert-python``; kept in ``~/.cache/crawlake`` (``$XDG_CACHE_HOME``)."""
    import vl_convert as vlc

    path = _cache_dir() / f"vega-embed-{vlc.__version__}-{VEGA_LITE}.js"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    js = vlc.javascript_bundle(vl_version=VEGA_LITE)
    try:   # a cache is a convenience: a read-only home just rebuilds it next time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(js, encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass
    return js


def _script_safe(text: str) -> str:
    """Text that cannot end the ``<script>`` element it is inlined in."""
    return text.replace("</script", "<\\/script").replace("<!--", "<\\!--")


CSS = """
:root { --ink:#1f2430; --muted:#5b6475; --line:#e3e6ec; --bg:#f6f7f9; --card:#fff; --accent:#4c78a8; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif; color:var(--ink); background:var(--bg); }
header { background:#1f2430; color:#fff; padding:20px 32px 16px; }
header h1 { margin:0 0 4px; font-size:22px; font-weight:600; }
header .meta { color:#c5cad6; font-size:12.5px; }
header code { color:#fff; }
.kpis { display:flex; flex-wrap:wrap; gap:10px; margin-top:14px; }
.kpi { background:#2b3242; border-radius:6px; padding:8px 14px; min-width:120px; }
.kpi b { display:block; font-size:19px; font-weight:600; }
.kpi span { color:#c5cad6; font-size:12px; }
nav { position:sticky; top:0; z-index:5; background:#fff; border-bottom:1px solid var(--line); padding:8px 32px; }
nav a { color:var(--accent); text-decoration:none; margin-right:18px; font-weight:500; }
main { padding:8px 32px 40px; max-width:1400px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px; margin:18px 0; padding:16px 22px 20px; }
section h2 { margin:0 0 4px; font-size:18px; }
section h3 { margin:18px 0 6px; font-size:14px; }
.lead { color:var(--muted); margin:0 0 12px; max-width:1000px; }
.charts { display:flex; flex-wrap:wrap; gap:18px 28px; align-items:flex-start; }
figure { margin:0; }
figcaption { font-weight:600; font-size:13px; margin-bottom:4px; }
.empty { color:var(--muted); font-style:italic; }
.note { color:var(--muted); font-size:13px; }
.note.bad { color:#b3261e; }
table { border-collapse:collapse; margin-top:10px; font-size:12.5px; }
th, td { border-bottom:1px solid var(--line); padding:4px 10px; text-align:left; vertical-align:top; }
th { background:#f0f2f5; font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
table.compact td, table.compact th { padding:3px 8px; }
code { font-family:ui-monospace,"Liberation Mono",monospace; font-size:12px; }
a { color:var(--accent); }
.whys { display:grid; grid-template-columns:repeat(auto-fill,minmax(420px,1fr)); gap:10px; }
.why { border:1px solid var(--line); border-radius:6px; padding:8px 10px; background:#fbfbfc; overflow-wrap:anywhere; }
.why-head { font-size:12.5px; }
.why-reason { font-weight:600; margin:4px 0; font-size:13px; }
.why-text { color:var(--muted); font-size:12px; white-space:pre-wrap; max-height:5.5em; overflow:hidden; }
.tag { display:inline-block; border-radius:3px; padding:0 6px; font-size:11px; font-weight:600; color:#fff; }
.tag.dedup { background:#f58518; } .tag.filter { background:#e45756; }
footer { color:var(--muted); font-size:12px; padding:0 32px 30px; }
"""

SCRIPT = """
(async () => {
  const specs = JSON.parse(document.getElementById('crawlake-specs').textContent);
  const ids = Object.keys(specs);
  const results = await Promise.allSettled(
    ids.map(id => vegaEmbed('#' + id, specs[id], {renderer: 'svg', actions: false})));
  let failed = 0;
  results.forEach((r, i) => {
    if (r.status === 'rejected') { failed += 1; console.error('chart ' + ids[i] + ' failed: ' + r.reason); }
  });
  document.body.dataset.chartsFailed = String(failed);
  document.body.dataset.chartsRendered = String(results.length - failed);
})();
"""


def render(sections: list[Section], *, title: str, meta: str, kpis: list[tuple[str, str]], footer: str) -> str:
    """The page: a header (``title``, ``meta`` HTML, ``kpis`` as (value, label)), a bar of links,
    the ``sections`` with their charts, and ``footer`` HTML."""
    specs: dict[str, dict] = {}
    body = []
    for s in sections:
        figures = []
        for title_, spec in s.charts:
            chart_id = f"chart-{len(specs) + 1}"
            specs[chart_id] = spec
            figures.append(f'<figure><figcaption>{html.escape(title_)}</figcaption>'
                           f'<div class="chart" id="{chart_id}" data-title="{html.escape(title_)}"></div></figure>')
        parts = [f'<h2>{html.escape(s.title)}</h2>']
        if s.lead:
            parts.append(f'<p class="lead">{s.lead}</p>')
        if s.empty:
            parts.append(f'<p class="empty">{s.empty}</p>')
        if figures:
            parts.append(f'<div class="charts">{"".join(figures)}</div>')
        parts.append(s.html)
        body.append(f'<section id="{s.key}" data-section="{s.key}" data-charts="{len(figures)}">{"".join(parts)}</section>')
    nav = "".join(f'<a href="#{s.key}">{html.escape(s.title)}</a>' for s in sections)
    kpi_html = "".join(f'<div class="kpi"><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>' for v, k in kpis)
    specs_json = _script_safe(json.dumps(specs, separators=(",", ":"), allow_nan=False, default=str))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="crawlake report">
<link rel="icon" href="data:,">
<title>{html.escape(title)}</title>
<style>{CSS}</style>
<script>{_script_safe(vega_bundle())}</script>
</head>
<body>
<header><h1>{html.escape(title)}</h1><div class="meta">{meta}</div><div class="kpis">{kpi_html}</div></header>
<nav>{nav}</nav>
<main>
{"".join(body)}
</main>
<footer>{footer}</footer>
<noscript><p>The charts need JavaScript (inlined in this file; no network is used).</p></noscript>
<script id="crawlake-specs" type="application/json">{specs_json}</script>
<script>{SCRIPT}</script>
</body>
</html>
"""


def generated_at() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
