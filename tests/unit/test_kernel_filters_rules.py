"""Rules are objects and a preset is a list of them: a rule of one's own, defined here, in a
preset registered by name or listed in the config; ``enabled`` and a rule's section against a
preset; what is refused."""

from __future__ import annotations

import pyarrow as pa
import pytest
from _filter_texts import PROSE
from pydantic import Field

from pipelines.config import ConfigError, RuleConfig, load_config
from pipelines.kernels.filters import (
    PRESETS,
    C4QualityFilter,
    Document,
    FilterParams,
    GopherQualityFilter,
    Measure,
    Rule,
    UrlFilter,
    filter_batch,
    filter_document,
    funnel,
    register_preset,
)

URL = "https://sea-and-stone.example/history/lighthouse-keepers"


class ShortLines(Rule):
    """Fraction of non-blank lines shorter than ``min_chars``: pass at ≤ ``max_ratio``."""

    name = "short_lines"

    class Config(RuleConfig):
        min_chars: int = Field(20, ge=1)
        max_ratio: float = Field(0.5, ge=0, le=1)

    def measures(self, doc):
        lines = [ln for ln in doc.text.split("\n") if ln.strip()]
        v = sum(len(ln) < self.config.min_chars for ln in lines) / max(len(lines), 1)
        return [Measure("short_lines_ratio", v, self.config.max_ratio, v <= self.config.max_ratio)]


class Shout(Rule):
    """Upper-cases the text (a transform) and says how many characters it changed."""

    name = "shout"

    def transform(self, doc):
        new = doc.text.upper()
        return new, [Measure("shout_changed", float(sum(a != b for a, b in zip(doc.text, new))), float("inf"), True)]


class UpperRatio(Rule):
    """Upper-case letters / letters, informational."""

    name = "upper_ratio"

    def measures(self, doc):
        letters = [c for c in doc.text if c.isalpha()]
        return [Measure("upper_ratio", sum(map(str.isupper, letters)) / max(len(letters), 1), float("inf"), True)]


def run(params, texts):
    batch = pa.RecordBatch.from_pylist([{"doc_id": f"d{i}", "url": URL, "text": t, "http_status": 200}
                                        for i, t in enumerate(texts)])
    return filter_batch(batch, params).to_pylist()


def test_a_rule_of_ones_own_runs_in_the_preset_order_and_removes_what_it_fails():
    params = FilterParams(rules=(UrlFilter(), ShortLines(max_ratio=0.2), GopherQualityFilter()))
    assert params.steps() == ("http_status", "language", "url", "short_lines", "gopher_quality")
    lines = "\n".join(["Menu", "Home", "About us"] + PROSE.split("\n"))
    out = run(params, [PROSE, lines])
    assert out[0]["filter_kept"] and not out[1]["filter_kept"]
    assert out[1]["filter_first_failed"] == "short_lines"
    row = next(d for d in out[1]["decisions"] if d["filter"] == "short_lines_ratio")
    assert row == {"doc_id": "d1", "filter": "short_lines_ratio", "value": 3 / 11, "threshold": 0.2, "passed": False,
                   "detail": "en"}


def test_a_transforming_rule_hands_its_text_on_and_counts_in_the_funnel():
    params = FilterParams(rules=(UpperRatio(), Shout(), GopherQualityFilter()))
    assert params.steps().text_steps == {"shout"}
    r = filter_document("d", PROSE, "en", 0.99, params, 200, URL)
    assert r.text == PROSE.upper() and r.words_out == r.words_in
    assert next(d for d in r.decisions if d["filter"] == "upper_ratio")["value"] < 0.1   # saw the text before
    # the funnel counts words_in before the first transforming step and words_out from it on
    groups = [(None, 1, 10, 7), ("upper_ratio", 1, 5, 5)]
    assert [s["words"] for s in funnel(groups, params.steps())] == [15, 15, 15, 10, 7, 7]
    shouted = filter_document("d", PROSE, "en", 0.99, FilterParams(rules=(Shout(), UpperRatio())), 200, URL)
    assert next(d for d in shouted.decisions if d["filter"] == "upper_ratio")["value"] == 1.0   # and after


def test_a_registered_preset_is_named_in_the_config():
    register_preset("test_short_lines", [UrlFilter(), ShortLines(min_chars=10)])
    cfg = load_config("local", ["filter.preset=test_short_lines"])
    params = FilterParams.from_config(cfg.filter)
    assert params.steps() == ("http_status", "language", "url", "short_lines")
    assert params.rule("short_lines").config.min_chars == 10
    with pytest.raises(ValueError, match="built-in"):
        register_preset("fineweb", [ShortLines()])


def test_a_preset_listed_in_the_config():
    cfg = load_config("local", [
        f"filter.preset=[url, {{rule: '{__name__}:ShortLines', max_ratio: 0.3}}, "
        "{rule: c4, filter_no_terminal_punct: false}, pii]"])
    params = FilterParams.from_config(cfg.filter)
    assert params.steps() == ("http_status", "language", "url", "short_lines", "c4", "pii")
    assert params.rule("short_lines").config.max_ratio == 0.3
    assert params.rule("c4").config.filter_no_terminal_punct is False
    assert params.rule("c4").config.min_words_per_line == 3   # its section's (default) values


@pytest.mark.parametrize("preset,named", [
    ("fineweeb", "unknown filter preset 'fineweeb'"),
    ("[url, gopher]", r"filter.preset\[1\]: unknown filter rule 'gopher'"),
    ("[url, 'no_such_module:Rule']", "cannot be imported"),
    ("[{rule: c4, min_words_per_lin: 2}]", "min_words_per_lin"),
    ("[{rule: c4, min_words_per_line: -1}]", "min_words_per_line"),
    ("[url, url]", "unique"),
    ("[{max_ratio: 1}]", "needs 'rule'"),
])
def test_a_bad_preset_is_a_config_error_naming_it(preset, named):
    with pytest.raises(ConfigError, match="filter.preset") as err:
        load_config("local", [f"filter.preset={preset}"])
    assert err.match(named)


def test_a_section_changes_the_presets_rule_only_where_the_user_changed_it():
    c4_of = lambda params: params.rule("c4").config  # noqa: E731
    fineweb = FilterParams.from_config(load_config("local").filter)
    assert c4_of(fineweb).filter_no_terminal_punct is False        # the preset's value stands
    changed = FilterParams.from_config(load_config("local", ["filter.c4.min_num_sentences=3"]).filter)
    assert c4_of(changed).min_num_sentences == 3 and c4_of(changed).filter_no_terminal_punct is False
    assert FilterParams.from_config(load_config("local", ["filter.c4.filter_no_terminal_punct=true"]).filter) \
        .rule("c4").config.filter_no_terminal_punct is True
    assert PRESETS["fineweb"][3] == C4QualityFilter(filter_no_terminal_punct=False)   # presets are not changed


def test_enabled_adds_a_rule_at_its_place_and_removes_one():
    cfg = load_config("local", ["filter.preset=[url, fineweb]", "filter.gopher.enabled=true",
                                "filter.url.enabled=false", "filter.pii.enabled=true"])
    assert FilterParams.from_config(cfg.filter).steps() == (
        "http_status", "language", "gopher_quality", "fineweb", "pii")


def test_rules_are_values():
    assert ShortLines(max_ratio=0.3) == ShortLines({"max_ratio": 0.3}) != ShortLines()
    assert repr(ShortLines(max_ratio=0.3)) == "ShortLines(max_ratio=0.3)"
    with pytest.raises(ValueError, match="max_ratio"):
        ShortLines(max_ratio=2)
    with pytest.raises(ValueError, match="unique"):
        FilterParams(rules=(ShortLines(), ShortLines()))
    with pytest.raises(NotImplementedError):
        type("Nothing", (Rule,), {"name": "nothing"})().measures(Document("d", "", "en", 1.0))


def test_list_files_are_read_on_the_driver_and_a_missing_one_is_named(tmp_path):
    (tmp_path / "d.txt").write_text("blocked.example\n", encoding="utf-8")
    cfg = load_config("local", [f"filter.url.domain_blocklists=[{tmp_path / 'd.txt'}]"])
    assert FilterParams.from_config(cfg.filter).rule("url").blocked_domains == {"blocked.example"}
    cfg = load_config("local", [f"filter.c4.bad_words_paths={{en: {tmp_path / 'missing.txt'}}}"])
    with pytest.raises(ConfigError, match="filter.c4.bad_words_paths.en"):
        FilterParams.from_config(cfg.filter)
