"""Typed, validated configuration.

``conf/base.yaml`` is merged with one environment overlay (``conf/<env>.yaml``), then with
``--set key=value`` overrides (dotted keys, values parsed as YAML scalars). The result is validated
into :class:`Config`; an unknown key or a bad value raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

#: conf/ next to the package in a checkout; CRAWLAKE_CONF_DIR or --conf-dir elsewhere (a wheel).
DEFAULT_CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LakeConfig(_Strict):
    root: str = "./lake"
    mode: Literal["path", "catalog"] = "path"
    catalog: str | None = None
    schema_: str | None = Field(default=None, alias="schema")

    @model_validator(mode="after")
    def _catalog_needs_names(self) -> "LakeConfig":
        if self.mode == "catalog" and not (self.catalog and self.schema_):
            raise ValueError("lake.mode=catalog needs lake.catalog and lake.schema")
        return self


class SparkConfig(_Strict):
    master: str | None = "local[*]"
    app_name: str = "crawlake"
    jars_dir: str | None = ".jars"
    conf: dict[str, str] = Field(default_factory=dict)


class IngestConfig(_Strict):
    input: list[str] = Field(default_factory=list)
    paths_prefix: str = "https://data.commoncrawl.org/"
    max_files: int | None = Field(None, ge=1)
    sample_fraction: float | None = Field(None, gt=0.0, le=1.0)
    sample_seed: int = 0
    files_per_commit: int = Field(16, ge=1)
    extractor: Literal["resiliparse", "trafilatura"] = "resiliparse"
    max_payload_bytes: int = Field(10 * 1024 * 1024, gt=0)
    max_text_chars: int = Field(1_000_000, gt=0)
    min_text_chars: int = Field(1, ge=0)
    html_content_types: list[str] = Field(default_factory=lambda: ["text/html"])
    progress: bool = True


class DedupConfig(_Strict):
    ngram: int = Field(5, ge=1)
    num_perm: int = Field(112, ge=2, le=1024)
    threshold: float = Field(0.8, gt=0.0, lt=1.0)
    seed: int = 1
    max_iterations: int = Field(50, ge=1)
    verify: bool = False


class GopherConfig(_Strict):
    enabled: bool = True
    min_doc_words: int = Field(50, ge=0)
    max_doc_words: int = Field(100_000, gt=0)
    min_avg_word_length: float = Field(3.0, ge=0)
    max_avg_word_length: float = Field(10.0, gt=0)
    max_symbol_word_ratio: float = Field(0.1, ge=0)
    max_bullet_lines_ratio: float = Field(0.9, ge=0, le=1)
    max_ellipsis_lines_ratio: float = Field(0.3, ge=0, le=1)
    min_alpha_words_ratio: float = Field(0.8, ge=0, le=1)
    min_stop_words: int = Field(2, ge=0)
    unsegmented_languages: list[str] = Field(default_factory=list)


class FilterConfig(_Strict):
    languages: list[str] = Field(default_factory=list)
    min_language_score: float = Field(0.65, ge=0.0, le=1.0)
    gopher: GopherConfig = GopherConfig()


class TokenizeConfig(_Strict):
    tokenizer: str = "default"
    seq_len: int = Field(2048, ge=8)
    separator_token: str | None = None
    pack_groups: int = Field(8, ge=1)
    train_vocab_size: int = Field(32000, ge=260)
    train_min_frequency: int = Field(2, ge=1)
    train_output_dir: str | None = None


class EmbedConfig(_Strict):
    model: str = "default"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    batch_size: int = Field(64, ge=1)
    chunk_overlap_tokens: int = Field(32, ge=0)


class ClicksConfig(_Strict):
    """Criteo click logs: ``crawlake clicks ingest | stream | features``."""
    format: Literal["tsv", "kaggle_csv"] = "tsv"
    input: list[str] = Field(default_factory=list)
    landing: str | None = None
    path_glob: str = "*"
    checkpoint: str | None = None
    max_files_per_trigger: int = Field(8, ge=1)
    processing_time: str = "30 seconds"
    stop_timeout_s: float = Field(120.0, ge=0)
    day_pattern: str | None = r"day_(\d+)"
    block_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    vocab_min_frequency: int = Field(3, ge=1)


class Config(_Strict):
    lake: LakeConfig = LakeConfig()
    spark: SparkConfig = SparkConfig()
    ingest: IngestConfig = IngestConfig()
    dedup: DedupConfig = DedupConfig()
    filter: FilterConfig = FilterConfig()
    tokenize: TokenizeConfig = TokenizeConfig()
    embed: EmbedConfig = EmbedConfig()
    clicks: ClicksConfig = ClicksConfig()

    def hash(self) -> str:
        """Short, stable hash of the effective configuration (recorded in ``ops.runs``)."""
        blob = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _deep_merge(base: dict, overlay: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in (overlay or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def _apply_override(tree: dict, assignment: str) -> None:
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected key=value")
    dotted, raw = assignment.split("=", 1)
    keys = dotted.strip().split(".")
    if not all(keys):
        raise ConfigError(f"--set {assignment!r}: empty key")
    node = tree
    # spark.conf holds Spark's own dotted keys: everything after "spark.conf." is one key.
    if keys[:2] == ["spark", "conf"] and len(keys) > 2:
        keys = ["spark", "conf", ".".join(keys[2:])]
    for i, key in enumerate(keys[:-1]):
        nxt = node.get(key)
        if nxt is None:
            nxt = node[key] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"unknown config key {'.'.join(keys[: i + 2])!r} (in --set {assignment!r})")
        node = nxt
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if keys[:2] == ["spark", "conf"] and value is not None:
        value = str(value)
    node[keys[-1]] = value


def _error_text(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        if key == "lake.schema_":
            key = "lake.schema"
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown config key {key!r}")
        else:
            lines.append(f"bad value for config key {key!r}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(lines)


def load_config(
    env: str | None = "local",
    overrides: list[str] | tuple[str, ...] = (),
    conf_dir: str | os.PathLike | None = None,
) -> Config:
    """Load ``base.yaml`` + ``<env>.yaml`` + ``overrides`` from ``conf_dir``.

    ``conf_dir`` defaults to ``$CRAWLAKE_CONF_DIR`` or the repository's ``conf/``. ``env`` None
    means base only. Raises :class:`ConfigError` for a missing file, an unknown key or a bad value.
    """
    folder = Path(conf_dir or os.environ.get("CRAWLAKE_CONF_DIR") or DEFAULT_CONF_DIR)
    base_path = folder / "base.yaml"
    if not base_path.is_file():
        raise ConfigError(f"config file not found: {base_path}")
    tree = _read_yaml(base_path)
    if env:
        env_path = folder / f"{env}.yaml"
        if not env_path.is_file():
            raise ConfigError(f"unknown environment {env!r}: {env_path} does not exist")
        tree = _deep_merge(tree, _read_yaml(env_path))
    for assignment in overrides:
        _apply_override(tree, assignment)
    try:
        return Config.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_error_text(exc)) from None
