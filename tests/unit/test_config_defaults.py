"""conf/base.yaml states every setting with its default and a comment; the models in
pipelines/config.py are where each default lives. This keeps the two equal.

Every key of every section is in base.yaml (it is the reference users read; no key is left out on
purpose), and base.yaml has no key the models lack. A dict-valued setting (``spark.conf``,
``filter.c4.bad_words_paths``, ``filter.gopher_repetition.top_n_grams``) is compared as one value:
its keys are data, not settings. ``filter.preset`` may also hold rule lists; its default is a name.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel

from pipelines.config import DEFAULT_CONF_DIR, Config, load_config

#: keys the models have that base.yaml leaves out on purpose (dotted); none today
ABSENT_FROM_BASE: frozenset[str] = frozenset()


def _walk(model: type[BaseModel], node: dict, path: str, problems: list[str]) -> None:
    keys = {(f.alias or name): name for name, f in model.model_fields.items()}
    problems += [f"{path}{key}: in base.yaml, not in {model.__name__}" for key in node if key not in keys]
    for key, name in keys.items():
        where = path + key
        default = model.model_fields[name].get_default(call_default_factory=True)
        if key not in node:
            if where not in ABSENT_FROM_BASE:
                problems.append(f"{where}: in {model.__name__} (default {default!r}), not in base.yaml")
            continue
        if isinstance(default, BaseModel):
            _walk(type(default), node[key] or {}, where + ".", problems)
            continue
        # as YAML reads it, before validation: a string "1" for a number 1 is a disagreement
        if node[key] != default:
            problems.append(f"{where}: base.yaml says {node[key]!r}, {model.__name__} defaults to {default!r}")


def test_base_yaml_states_every_model_default_and_nothing_else():
    base = yaml.safe_load((Path(DEFAULT_CONF_DIR) / "base.yaml").read_text(encoding="utf-8"))
    problems: list[str] = []
    _walk(Config, base, "", problems)
    assert not problems, "\n".join(problems)


def test_base_yaml_alone_is_the_models_defaults():
    assert load_config(None) == Config()


def test_a_disagreement_is_found(tmp_path):
    text = (Path(DEFAULT_CONF_DIR) / "base.yaml").read_text(encoding="utf-8")
    changed = yaml.safe_load(text.replace("min_doc_words: 50", "min_doc_words: 51"))
    problems: list[str] = []
    _walk(Config, changed, "", problems)
    assert problems == ["filter.gopher.min_doc_words: base.yaml says 51, GopherConfig defaults to 50"]
    del changed["filter"]["pii"]["ipv6_replacement"]
    changed["filter"]["pii"]["ipv7_replacement"] = []
    problems = []
    _walk(Config, changed, "", problems)
    assert len(problems) == 3 and any("ipv7_replacement: in base.yaml, not in PiiConfig" in p for p in problems)


def test_a_kernel_value_the_kernel_refused_is_refused_by_its_model():
    """The embed kernel refused ``compile="yes"``; its parameters are now the model, which does."""
    import pytest

    from pipelines.config import ConfigError, EmbedConfig

    assert [EmbedConfig(compile=v).compile for v in (True, False, "auto")] == [True, False, "auto"]
    with pytest.raises(ValueError, match="compile"):
        EmbedConfig(compile="yes")
    with pytest.raises(ConfigError, match="embed.compile"):
        load_config("local", ["embed.compile=sometimes"])
