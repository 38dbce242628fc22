"""The four presets give, on the real pages, exactly what they gave before rules became objects.

The digests below were computed with the code before the change (``FilterParams.preset(name)``
and the stage's ``filter_params(cfg.filter)``, which agreed): a SHA-256 of every output row of
:func:`filter_batch` (cleaned text, language, decisions, funnel columns) over the 152 documents
of the four real WARC/WET files, plus the run's steps and funnel. Floats are rounded to 6 places
(fastText's scores are float32). A change in any rule, preset, default or the engine shows here.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pytest
from conftest import real_file

from pipelines.config import load_config
from pipelines.kernels.filters import FilterParams, filter_batch, funnel
from pipelines.kernels.warc import parse_warc_file

FILES = ("cc-main-2020-34-excerpt.warc.gz", "cc-main-2024-22-whirlwind.warc.gz",
         "cc-main-2024-22-whirlwind.warc.wet.gz", "ia-heritrix-2008-example.warc.gz")
SCHEMA = pa.schema([("doc_id", pa.string()), ("url", pa.string()), ("host", pa.string()), ("text", pa.string()),
                    ("http_status", pa.int32())])

BEFORE = {
    "fineweb": "e8bc94cdd9cddba594deb82c636e1f5dcf27659af50a27f2c824d837a4c72e89",
    "gopher": "a4972a808dff715973c608e375bd061f2a70ae3dd36c5fe5222457205d965c8e",
    "c4": "b8139780a45fda7f797b7a884080b5a5a0e8fc0f39c23790c56682b84813b304",
    "minimal": "d9a154f8044ff7049ec7c09b82dd4a5ac235e2a136c25308f43c5ab147ce6ea3",
    # minimal + pii and c4 enabled, a domain blocklist, a bad-words list, languages [en, de]
    "minimal-overrides": "2439174bf212e873a7afdd7c217990441334b88d1d7c40dbcbd860915d5c3abe",
    # gopher with changed thresholds, fineweb enabled (with a changed value), url disabled
    "gopher-overrides": "937d97d48ae05319d6864c787b7f8a0ef14205dfa902e5d17d73a7c5b46e789c",
    # fineweb with C4's terminal-punctuation rule on and other unsegmented languages
    "fineweb-c4punct": "3e6dedcc4cc2c4b29a7b76ab24873538481d888e407132ad26af51575e3567e6",
}


@pytest.fixture(scope="module")
def batches() -> list[pa.RecordBatch]:
    out = []
    for name in FILES:
        rows = [r for r in parse_warc_file(real_file(name)).rows if r["kind"] == "document"]
        out.append(pa.RecordBatch.from_pylist([{k: r.get(k) for k in SCHEMA.names} for r in rows], schema=SCHEMA))
    assert sum(b.num_rows for b in out) == 152
    return out


def _clean(v):
    if isinstance(v, float):
        return "inf" if v == float("inf") else round(v, 6)
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def digest(params: FilterParams, batches: list[pa.RecordBatch]) -> str:
    rows = [r for b in batches for r in filter_batch(b, params).to_pylist()]
    groups: dict = {}
    for r in rows:
        g = groups.setdefault(r["filter_first_failed"], [0, 0, 0])
        g[0] += 1
        g[1] += r["words_in"]
        g[2] += r["words_out"]
    steps = params.steps()
    f = funnel([(k, *v) for k, v in groups.items()], steps)
    text = json.dumps({"steps": list(steps), "funnel": f, "rows": _clean(rows)}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("preset", ["fineweb", "gopher", "c4", "minimal"])
def test_presets_give_the_outputs_they_gave_before(batches, preset):
    assert digest(FilterParams.preset(preset), batches) == BEFORE[preset]
    from_config = FilterParams.from_config(load_config("local", [f"filter.preset={preset}"]).filter)
    assert digest(from_config, batches) == BEFORE[preset]


def test_config_overrides_give_the_outputs_they_gave_before(batches, tmp_path):
    (tmp_path / "domains.txt").write_text("# test\n01spb.ru\nwww.archive.org\n", encoding="utf-8")
    (tmp_path / "bad.txt").write_text("# test\nfree\nclick here\n", encoding="utf-8")
    cases = {
        "minimal-overrides": [
            "filter.preset=minimal", "filter.pii.enabled=true", "filter.c4.enabled=true",
            f"filter.url.domain_blocklists=[{tmp_path / 'domains.txt'}]",
            f"filter.c4.bad_words_paths={{en: {tmp_path / 'bad.txt'}}}", "filter.languages=[en, de]"],
        "gopher-overrides": [
            "filter.preset=gopher", "filter.gopher.min_doc_words=80", "filter.gopher_repetition.dup_n_grams={5: 0.1}",
            "filter.fineweb.enabled=true", "filter.fineweb.max_list_ratio=0.2", "filter.url.enabled=false"],
        "fineweb-c4punct": [
            "filter.c4.filter_no_terminal_punct=true", "filter.gopher.unsegmented_languages=[zh]",
            "filter.unsegmented_languages=[ja]"],
    }
    for name, overrides in cases.items():
        params = FilterParams.from_config(load_config("local", overrides).filter)
        assert digest(params, batches) == BEFORE[name], name
