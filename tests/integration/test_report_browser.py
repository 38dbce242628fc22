"""crawlake report in a real browser: headless Debian Chromium opens the report of the sample lake
(with click logs), the charts render, nothing is fetched, no console error, every section's
charts have drawn marks; a full-page screenshot is kept in the test's tmp dir."""

from __future__ import annotations

import pytest
from browser import SECTION_MARKS_JS, Chromium, chromium_binary

from pipelines.cli import main

pytestmark = pytest.mark.slow
CHART_SECTIONS = {"funnel", "rules", "dedup", "lengths", "clicks", "runs"}


@pytest.fixture(scope="module")
def report(sample_lake_with_clicks, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", "--lake-root", str(sample_lake_with_clicks), "--out", str(out)]) == 0
    return out


def test_the_report_renders_in_chromium(report, tmp_path):
    if chromium_binary() is None:
        pytest.fail("chromium is not installed: `make setup` installs Debian's chromium (scripts/install-chromium.sh)")
    with Chromium(tmp_path, width=1400, height=1000) as browser:
        browser.send("Network.enable")
        browser.open(report.as_uri())
        browser.wait_for("document.body.dataset.chartsRendered !== undefined", timeout_s=120)
        rendered = int(browser.evaluate("document.body.dataset.chartsRendered"))
        failed = int(browser.evaluate("document.body.dataset.chartsFailed"))
        sections = {s["key"]: s for s in browser.evaluate(SECTION_MARKS_JS)}
        shot = browser.screenshot(tmp_path / "report.png")
        errors = browser.errors()
        requests = [e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"]

    assert failed == 0 and rendered >= 18, (rendered, failed)
    assert errors == [], errors
    assert all(u.startswith(("file:", "data:")) for u in requests), f"the page fetched {requests}"
    assert set(sections) == CHART_SECTIONS | {"removed"}
    for key in CHART_SECTIONS:
        s = sections[key]
        assert not s["empty"] and s["declared"] == len(s["charts"]) > 0, s
        for chart in s["charts"]:
            assert chart["svg"] and chart["marks"] > 0, (key, chart)
    assert sections["removed"]["empty"] is False
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 100_000, len(png)
    print(f"screenshot: {shot} ({len(png):,} bytes), {rendered} charts")
