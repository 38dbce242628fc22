import pytest

from pipelines.config import ConfigError, load_config


def test_overlay_and_overrides_apply_in_order():
    cfg = load_config("local", ["dedup.threshold=0.7", "spark.conf.spark.sql.shuffle.partitions=3",
                                "filter.languages=[en, de]"])
    assert cfg.dedup.threshold == 0.7
    assert cfg.spark.conf["spark.sql.shuffle.partitions"] == "3"   # overrides the local overlay's 4
    assert cfg.spark.conf["spark.sql.session.timeZone"] == "UTC"    # from base, kept by the merge
    assert cfg.filter.languages == ["en", "de"]


def test_databricks_overlay_uses_catalog_names():
    cfg = load_config("databricks")
    assert cfg.lake.mode == "catalog" and cfg.lake.catalog == "main" and cfg.spark.master is None


@pytest.mark.parametrize("override, named", [
    ("dedup.treshold=0.5", "dedup.treshold"),
    ("dedup.threshold=1.5", "dedup.threshold"),
    ("lake.mode=cloud", "lake.mode"),
    ("tokenize.seq_len=many", "tokenize.seq_len"),
    ("nosuchsection.key=1", "nosuchsection"),
])
def test_bad_key_or_value_is_an_error_naming_it(override, named):
    with pytest.raises(ConfigError, match=named):
        load_config("local", [override])


def test_unknown_environment_and_malformed_override():
    with pytest.raises(ConfigError, match="unknown environment"):
        load_config("staging")
    with pytest.raises(ConfigError, match="key=value"):
        load_config("local", ["dedup.threshold"])


def test_config_hash_is_stable_and_sensitive():
    assert load_config("local").hash() == load_config("local").hash()
    assert load_config("local").hash() != load_config("local", ["dedup.seed=2"]).hash()


def test_a_section_hash_follows_that_section_only():
    from pipelines.config import load_config

    base = load_config("local")
    assert len(base.hash("filter")) == 16 and base.hash("filter") != base.hash()
    assert load_config("local", ["dedup.threshold=0.7"]).hash("filter") == base.hash("filter")
    assert load_config("local", ["filter.gopher.min_doc_words=60"]).hash("filter") != base.hash("filter")
    assert load_config("local", ["filter.languages=[en]"]).hash("filter") != base.hash("filter")
