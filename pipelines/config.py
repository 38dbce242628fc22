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
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator, model_validator

from pipelines.kernels import mime

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
    #: who commits tables whose rows arrive as task-staged files (pipelines.lake.Lake.writer):
    #: auto = deltalake where the lake allows (path mode, on local disk or on S3 with
    #: s3_commits=conditional_put), else Spark; spark = always Spark
    writer: Literal["auto", "spark", "deltalake"] = "auto"
    #: what keeps concurrent commits to a lake on S3 safe: conditional_put = each commit file is a
    #: PUT with If-None-Match: *, so one of two racing writers wins a version, the other retries or
    #: fails (Spark: crawlake's log store io.crawlake.delta.S3ConditionalPutLogStore; deltalake:
    #: conditional_put etag; needs a store with conditional writes: AWS S3, MinIO, moto);
    #: single_driver = Delta's S3SingleDriverLogStore and Spark commits every table, safe only
    #: while one Spark driver writes the lake
    s3_commits: Literal["conditional_put", "single_driver"] = "conditional_put"

    @model_validator(mode="after")
    def _catalog_needs_names(self) -> "LakeConfig":
        if self.mode == "catalog" and not (self.catalog and self.schema_):
            raise ValueError("lake.mode=catalog needs lake.catalog and lake.schema")
        return self


class SparkConfig(_Strict):
    master: str | None = "local[*]"
    app_name: str = "crawlake"
    jars_dir: str | None = ".jars"
    #: Spark settings for the session; an overlay's keys are merged into these
    conf: dict[str, str] = Field(default_factory=lambda: {
        "spark.sql.session.timeZone": "UTC", "spark.sql.execution.arrow.maxRecordsPerBatch": "1000"})


class IngestConfig(_Strict):
    """The ingest stage; the WARC kernel (:mod:`pipelines.kernels.warc`) takes this model for its
    caps (bytes, characters), content types and extractor."""
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
    html_content_types: list[str] = Field(default_factory=lambda: list(mime.HTML_CONTENT_TYPES))
    generic_content_types: list[str] = Field(default_factory=lambda: list(mime.GENERIC_CONTENT_TYPES))
    progress: bool = True


#: Columns of bronze.documents the dedup keep policy may order by.
DEDUP_KEEP_COLUMNS = ("crawl_date", "text_length", "payload_bytes", "doc_id", "url", "crawl_id")


class DedupConfig(_Strict):
    """The dedup stage; the MinHash kernel (:func:`pipelines.kernels.minhash.signature_batch`)
    takes this model (``ngram``, ``num_perm``, ``seed``, and the LSH ``bands`` x ``rows``, given or
    derived from ``threshold``: :func:`pipelines.kernels.minhash.lsh_bands_rows`)."""
    ngram: int = Field(5, ge=1)
    num_perm: int = Field(112, ge=2, le=1024)
    threshold: float = Field(0.8, gt=0.0, lt=1.0)
    #: LSH bands x rows; both null = chosen from ``threshold`` (datasketch's optimum: 9 x 12 at 0.8
    #: and 112 permutations); both set = exactly these (FineWeb/datatrove: 14 x 8), bands x rows <= num_perm
    bands: int | None = Field(None, ge=1)
    rows: int | None = Field(None, ge=1)
    seed: int = 1
    max_iterations: int = Field(50, ge=1)
    #: connected components of at most this many candidate edges are computed on the driver
    driver_components_max_edges: int = Field(200_000, ge=0)
    verify: bool = True
    keep: list[str] = Field(default_factory=lambda: ["crawl_date asc", "text_length desc", "doc_id asc"])

    @model_validator(mode="after")
    def _bands_rows(self) -> "DedupConfig":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("dedup.bands and dedup.rows go together: set both, or neither (derived from threshold)")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"dedup.bands x dedup.rows = {self.bands} x {self.rows} = {self.bands * self.rows} "
                             f"exceeds dedup.num_perm = {self.num_perm}")
        return self

    @field_validator("keep")
    @classmethod
    def _keep_policy(cls, keep: list[str]) -> list[str]:
        """Each item ``"<column> asc|desc"`` over :data:`DEDUP_KEEP_COLUMNS`, each column once.

        Normalized to lower case and single spaces; ``doc_id asc`` is appended when doc_id is
        not ordered on, so every cluster has exactly one first document.
        """
        out, seen = [], set()
        for item in keep:
            parts = str(item).lower().split()
            if len(parts) != 2 or parts[1] not in ("asc", "desc"):
                raise ValueError(f"{item!r}: expected '<column> asc' or '<column> desc'")
            if parts[0] not in DEDUP_KEEP_COLUMNS:
                raise ValueError(f"{item!r}: column {parts[0]!r} is not one of {', '.join(DEDUP_KEEP_COLUMNS)}")
            if parts[0] in seen:
                raise ValueError(f"{item!r}: column {parts[0]!r} is listed twice")
            seen.add(parts[0])
            out.append(" ".join(parts))
        if "doc_id" not in seen:
            out.append("doc_id asc")
        return out


#: Languages written without spaces between words (fastText lid.176 codes): rules that count
#: words skip them (``filter.unsegmented_languages``'s default).
UNSEGMENTED_LANGUAGES: tuple[str, ...] = ("zh", "ja", "th", "lo", "km", "my", "bo", "wuu", "yue")


class RuleConfig(_Strict):
    """A filter rule's values: its section under ``filter`` (``filter.gopher``, ...) for the
    built-in rules, or the values of a rule of your own (subclass this; see
    :class:`pipelines.kernels.filters.Rule`). The rule's kernel takes this model as it is.

    ``enabled``: null = as ``filter.preset`` says; true adds the rule to the preset, false removes it.
    """
    enabled: bool | None = None


class GopherConfig(RuleConfig):
    """Gopher quality rules (Rae et al. 2021, *Scaling Language Models: Methods, Analysis &
    Insights from Training Gopher*, App. A; datatrove ``GopherQualityFilter``); the kernel is
    :mod:`pipelines.kernels.filters.gopher_quality`. The defaults are the paper's:

    ====================================  ==================
    words per document                    50 – 100,000
    mean word length (characters)         3 – 10
    symbol-to-word ratio (``#``, ``...``)   ≤ 0.1
    lines starting with a bullet          ≤ 90 %
    lines ending with an ellipsis         ≤ 30 %
    words with an alphabetic character    ≥ 80 %
    English stop words (distinct)         ≥ 2
    ====================================  ==================
    """
    min_doc_words: int = Field(50, ge=0)
    max_doc_words: int = Field(100_000, gt=0)
    min_avg_word_length: float = Field(3.0, ge=0)
    max_avg_word_length: float = Field(10.0, gt=0)
    max_symbol_word_ratio: float = Field(0.1, ge=0)
    max_bullet_lines_ratio: float = Field(0.9, ge=0, le=1)
    max_ellipsis_lines_ratio: float = Field(0.3, ge=0, le=1)
    min_alpha_words_ratio: float = Field(0.8, ge=0, le=1)
    min_stop_words: int = Field(2, ge=0)
    unsegmented_languages: list[str] = Field(default_factory=list)   # empty: filter.unsegmented_languages


class GopherRepetitionConfig(RuleConfig):
    """Gopher repetition rules, maximum fractions (Rae et al. 2021, App. A, Table A1; datatrove
    ``GopherRepetitionFilter``); the kernel is :mod:`pipelines.kernels.filters.gopher_repetition`.
    The defaults are Table A1's:

    ======================================  ====
    duplicate line fraction                 0.30
    duplicate paragraph fraction            0.30
    duplicate line character fraction       0.20
    duplicate paragraph character fraction  0.20
    top 2-, 3-, 4-gram character fraction   0.20, 0.18, 0.16
    duplicate 5- … 10-gram char. fraction   0.15, 0.14, 0.13, 0.12, 0.11, 0.10
    ======================================  ====
    """
    dup_line_frac: float = Field(0.3, ge=0, le=1)
    dup_para_frac: float = Field(0.3, ge=0, le=1)
    dup_line_char_frac: float = Field(0.2, ge=0, le=1)
    dup_para_char_frac: float = Field(0.2, ge=0, le=1)
    #: n → maximum fraction of characters in the most frequent word n-gram
    top_n_grams: dict[int, float] = Field(default_factory=lambda: {2: 0.20, 3: 0.18, 4: 0.16})
    #: n → maximum fraction of characters in repeated word n-grams
    dup_n_grams: dict[int, float] = Field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10})

    @model_validator(mode="after")
    def _ngram_sizes(self) -> "GopherRepetitionConfig":
        for key in ("top_n_grams", "dup_n_grams"):
            for n, frac in getattr(self, key).items():
                if n < 1 or not 0 <= frac <= 1:
                    raise ValueError(f"{key}: n must be >= 1 and the fraction in [0, 1] (got {n}: {frac})")
        return self


class C4Config(RuleConfig):
    """C4 rules (Raffel et al. 2020, *Exploring the Limits of Transfer Learning with a Unified
    Text-to-Text Transformer*, §2.2; datatrove ``C4QualityFilter`` and ``C4BadWordsFilter``); the
    kernel is :mod:`pipelines.kernels.filters.c4`. Line rules remove lines, document rules
    remove documents; the defaults are C4's. A count of 0 turns its rule off.
    """
    #: drop lines not ending in terminal punctuation; None: as the preset says (c4: true,
    #: fineweb: false), and C4's own true where no preset says
    filter_no_terminal_punct: bool | None = None
    min_words_per_line: int = Field(3, ge=0)       # drop lines with fewer words
    min_num_sentences: int = Field(5, ge=0)        # remove documents with fewer sentences
    max_word_length: int = Field(1000, ge=0)       # drop lines with a longer word (characters)
    remove_citations: bool = True                  # strip [1], [edit], [citation needed]
    filter_lorem_ipsum: bool = True                # remove documents with "lorem ipsum"
    filter_javascript: bool = True                 # drop lines mentioning javascript
    filter_curly_bracket: bool = True              # remove documents with "{"
    filter_policy: bool = True                     # drop cookie / terms-of-use / privacy-policy lines
    bad_words_paths: dict[str, str] = Field(default_factory=dict)   # language -> word list file


class FineWebConfig(RuleConfig):
    """FineWeb's own rules (Penedo et al. 2024, *The FineWeb Datasets*, §3.5; datatrove
    ``FineWebQualityFilter``); the kernel is :mod:`pipelines.kernels.filters.fineweb`. The
    defaults are the paper's: lines ending in terminal punctuation ≥ 0.12, lines of ≤ 30
    characters ≤ 0.67, characters in duplicate lines ≤ 0.01, newlines per word ≤ 0.3.
    """
    min_line_punct_ratio: float = Field(0.12, ge=0, le=1)
    line_punct_exclude_zero: bool = False   # true: a text with no punctuated line is not judged by it
    max_short_line_ratio: float = Field(0.67, ge=0, le=1)
    short_line_length: int = Field(30, ge=0)          # characters
    max_char_dup_ratio: float = Field(0.01, ge=0, le=1)
    max_list_ratio: float = Field(0.3, ge=0)          # newlines per word


class UrlFilterConfig(RuleConfig):
    """Blocklists and the adult-keyword heuristic (datatrove ``URLFilter``); the kernel is
    :mod:`pipelines.kernels.filters.url`, which reads the blocklist files on the driver."""
    domain_blocklists: list[str] = Field(default_factory=list)
    url_blocklists: list[str] = Field(default_factory=list)
    adult_keywords: bool = True
    soft_word_threshold: int = Field(2, ge=1)   # this many soft words fail a URL (datatrove's default)


class PiiConfig(RuleConfig):
    """E-mail and public-IP replacement (datatrove ``PIIFormatter``); the kernel is
    :mod:`pipelines.kernels.filters.pii`. One placeholder is chosen per match by a hash of it."""
    emails: bool = True
    ips: bool = True
    only_public_ips: bool = True   # leave private, loopback, link-local and reserved addresses
    #: datatrove's placeholders: example.com/org are reserved for examples (RFC 2606)
    email_replacement: list[str] = Field(
        default_factory=lambda: ["email@example.com", "firstname.lastname@example.org"], min_length=1)
    #: datatrove's IPv4 placeholders (addresses that did not answer pings when its list was made)
    ipv4_replacement: list[str] = Field(default_factory=lambda: [
        "22.214.171.124", "126.96.36.199", "188.8.131.52", "184.108.40.206", "220.127.116.11", "18.104.22.168"],
        min_length=1)
    #: IPv6: the documentation prefix (RFC 3849), not global, so a second pass leaves it
    ipv6_replacement: list[str] = Field(default_factory=lambda: ["2001:db8::1", "2001:db8::2"], min_length=1)


class FilterConfig(_Strict):
    """The filter stage: language ID and the rules of ``preset``, in its order
    (:mod:`pipelines.kernels.filters`; the kernel takes this model and the rules built from it).

    ``preset``: a preset's name (``fineweb``, ``gopher``, ``c4``, ``minimal``, or one registered
    with :func:`pipelines.kernels.filters.register_preset`), or a list of rules, each a rule's name
    (``url``, ``gopher_repetition``, ``gopher_quality``, ``c4``, ``fineweb``, ``pii``), a
    ``"package.module:Class"`` path to a :class:`~pipelines.kernels.filters.Rule` of your own, or
    a mapping ``{rule: <name or path>, <value>: ...}`` giving it values. Checked when loaded
    (ValueError naming the entry). A built-in rule takes the values of its section below.
    """
    preset: str | list[str | dict[str, Any]] = "fineweb"
    languages: list[str] = Field(default_factory=list)
    min_language_score: float = Field(0.65, ge=0.0, le=1.0)
    lid_model_path: str | None = None
    unsegmented_languages: list[str] = Field(default_factory=lambda: list(UNSEGMENTED_LANGUAGES))
    url: UrlFilterConfig = UrlFilterConfig()
    gopher_repetition: GopherRepetitionConfig = GopherRepetitionConfig()
    gopher: GopherConfig = GopherConfig()
    c4: C4Config = C4Config()
    fineweb: FineWebConfig = FineWebConfig()
    pii: PiiConfig = PiiConfig()

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, preset: str | list) -> str | list:
        # imported here: the rules import this module for their config models
        from pipelines.kernels.filters.presets import preset_rules

        preset_rules(preset)   # ValueError naming the unknown preset, rule or value
        return preset


class TokenizeConfig(_Strict):
    """The tokenize stage and ``crawlake train-tokenizer``; the packing kernel
    (:func:`pipelines.kernels.tokens.pack_batches`) takes this model."""
    tokenizer: str = "default"
    seq_len: int = Field(2048, ge=8)
    separator_token: str | None = None
    pack_groups: int = Field(8, ge=1)
    train_vocab_size: int = Field(32000, ge=260)
    train_min_frequency: int = Field(2, ge=1)
    train_output_dir: str | None = None


class EmbedConfig(_Strict):
    """The embed stage; the kernel (:mod:`pipelines.kernels.embed`) takes this model with the model
    revision resolved on the driver (:class:`~pipelines.kernels.embed.EmbedParams`)."""
    model: str = "default"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    tokens_per_batch: int = Field(0, ge=0)
    max_batch_size: int = Field(512, ge=1)
    chunk_overlap_tokens: int = Field(32, ge=0)
    max_chunk_tokens: int = Field(0, ge=0)
    #: true | false | "auto" (strictly: a string such as "yes" is refused, not read as true). False
    #: by default: the compiled pass rounds differently, so under "auto" a vector's bits would
    #: depend on how many tokens its process had embedded before it (issue 20's determinism).
    compile: Annotated[bool, Strict()] | Literal["auto"] = False
    refresh: bool = True
    #: engine=spark: documents per task at least (a task loads the model, seconds, before its first vector)
    min_task_documents: int = Field(128, ge=1)
    engine: Literal["spark", "dask"] = "spark"
    dask_scheduler: str | None = None
    dask_workers: int = Field(2, ge=1)


class IndexConfig(_Strict):
    """FAISS vector index over ``gold.embeddings``; the kernel (:mod:`pipelines.kernels.index`,
    whose docstring gives the algorithms and their papers) takes this model for construction and
    search (``shards``, ``path``, ``target_recall`` and ``max_segments`` are the stage's)."""
    type: Literal["flat", "hnsw", "ivfpq"] = "hnsw"
    #: a shard or segment of at most this many vectors is built flat (exact) whatever ``type``:
    #: a scan of it is about as fast as an HNSW search at the defaults and needs no build
    #: (docs/benchmarks.md); Milvus likewise searches segments under 1,024 rows without an index
    #: (``indexCoord.segment.minSegmentNumRowsToEnableIndex``)
    flat_max_rows: int = Field(2048, ge=0)
    shards: int = Field(4, ge=1)
    path: str | None = None
    hnsw_m: int = Field(32, ge=2)                  # HNSW graph degree (M)
    ef_construction: int = Field(200, ge=1)
    ef_search: int = Field(128, ge=1)
    #: IVF lists; None = about 4·sqrt(n), clamped so every list has >= 39 training points
    nlist: int | None = Field(None, ge=1)
    #: PQ sub-quantizers; None = dim/4 (4 dimensions each; 96 for dim 384), or the largest divisor below
    pq_m: int | None = Field(None, ge=1)
    nbits: int = Field(8, ge=1, le=16)             # bits per PQ code (2**nbits centroids per sub-quantizer)
    nprobe: int = Field(32, ge=1)
    refine_k_factor: int = Field(4, ge=0)          # IVF-PQ: re-rank k x this many with exact vectors; 0 = off
    train_sample: int = Field(100_000, ge=1)       # at most this many vectors train IVF/PQ (seeded sample)
    target_recall: float = Field(0.95, ge=0.0, le=1.0)
    seed: int = 0
    #: a shard that would hold more segments than this is rebuilt as one (compacted)
    max_segments: int = Field(8, ge=1)


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


class TrackingConfig(_Strict):
    """How a run shows itself while it runs and where it is recorded besides ``ops.runs``:
    live progress (:mod:`pipelines.progress`) and MLflow (:mod:`pipelines.tracking`)."""
    #: auto = a progress bar on a terminal, plain lines when output is not a terminal or ``CI`` is set;
    #: bar | lines force one; off = none
    progress: Literal["auto", "bar", "lines", "off"] = "auto"

    @field_validator("progress", mode="before")
    @classmethod
    def _off_as_yaml_reads_it(cls, value):
        # YAML (base.yaml, --set) reads a bare `off` as false
        return "off" if value is False else value
    progress_interval_s: float = Field(10.0, gt=0)   # seconds between plain progress lines
    #: one MLflow run per ``crawlake run``, a nested run per stage (needs the ``crawlake[mlflow]`` extra)
    mlflow: bool = False
    #: tracking URI; null = $MLFLOW_TRACKING_URI, else the file store ./mlruns
    mlflow_uri: str | None = None
    mlflow_experiment: str = "crawlake"
    #: attach the lake's HTML report (``crawlake report``) to the MLflow run
    mlflow_report: bool = True


class QualityConfig(_Strict):
    """How the quality gates (:mod:`pipelines.quality`) validate a Spark DataFrame."""
    #: rows up to which a Spark DataFrame's suite runs on the driver (counted, then its suite
    #: columns, documents' text among them, collected as Arrow for Great Expectations' pandas
    #: engine: two Spark jobs) instead of GX's Spark engine (a job per metric); 0 = always Spark
    driver_max_rows: int = Field(10_000, ge=0)


class Config(_Strict):
    lake: LakeConfig = LakeConfig()
    spark: SparkConfig = SparkConfig()
    ingest: IngestConfig = IngestConfig()
    dedup: DedupConfig = DedupConfig()
    filter: FilterConfig = FilterConfig()
    tokenize: TokenizeConfig = TokenizeConfig()
    embed: EmbedConfig = EmbedConfig()
    index: IndexConfig = IndexConfig()
    clicks: ClicksConfig = ClicksConfig()
    tracking: TrackingConfig = TrackingConfig()
    quality: QualityConfig = QualityConfig()

    def hash(self, *sections: str) -> str:
        """Short, stable hash (16 hex digits) of the effective configuration, secrets left out
        (:func:`redact`), recorded in ``ops.runs``; with ``sections`` (top-level names, e.g.
        ``"filter"``) of those sections only: what an incremental stage compares to its last run's.
        Raises KeyError for an unknown section."""
        data = self.redacted()
        if sections:
            data = {name: data[name] for name in sections}
        blob = json.dumps(data, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def redacted(self) -> dict:
        """The configuration as plain data with every secret value replaced (:func:`redact`):
        what may be recorded or shown (ops.runs' hash input, run trackers)."""
        return redact(self.model_dump(mode="json", by_alias=True))

    def scrub(self, text: str, env: dict[str, str] | None = None) -> str:
        """``text`` (an error message) with every secret this configuration or the environment
        holds (values of secret keys, :func:`is_secret_key`) replaced by :data:`REDACTED`:
        what crawlake prints and records of an exception it did not write itself."""
        secrets = set(_secret_values(self.model_dump(mode="json", by_alias=True)))
        secrets |= {v for k, v in (os.environ if env is None else env).items() if is_secret_key(k)}
        for secret in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text


REDACTED = "*** (redacted)"
#: Words that make a key's value a secret, alone or in pairs (Spark's ``spark.redaction.regex``,
#: Hadoop's ``fs.s3a.secret.key``/``fs.s3a.session.token``, AWS's and Azure's variable names).
_SECRET_WORDS = {"secret", "password", "passwd", "credential", "credentials"}
_SECRET_PAIRS = {("access", "key"), ("session", "token"), ("auth", "token"), ("sas", "token"), ("private", "key"),
                 ("api", "key"), ("account", "key")}


def is_secret_key(key: str) -> bool:
    """Whether a setting named ``key`` holds a secret: one of its words (split at ``.``, ``_``,
    ``-``) is secret, password or credential(s), or two neighbours are access+key, session+token,
    auth/sas+token, private/api/account+key. ``tokenize.tokenizer`` is not; ``fs.s3a.secret.key``,
    ``AWS_SESSION_TOKEN`` and ``aws_access_key_id`` are."""
    words = re.split(r"[._\-]+", key.lower())
    return bool(_SECRET_WORDS & set(words)) or any(pair in _SECRET_PAIRS for pair in zip(words, words[1:]))


def _secret_values(data):
    """The string values at secret keys anywhere in ``data`` (and in ``key=value`` strings)."""
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(k, str) and is_secret_key(k) and isinstance(v, str):
                yield v
            else:
                yield from _secret_values(v)
    elif isinstance(data, (list, tuple)):
        for v in data:
            yield from _secret_values(v)
    elif isinstance(data, str) and "=" in data and is_secret_key(data.split("=", 1)[0]):
        yield data.split("=", 1)[1]


def redact(data):
    """``data`` (nested dicts and lists of plain values) with the value of every key that
    :func:`is_secret_key` names replaced by :data:`REDACTED`, and ``key=value`` strings whose key
    it names likewise (e.g. an ``--set`` override); other values as they are."""
    if isinstance(data, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_key(k) and v not in (None, "") else redact(v))
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact(v) for v in data]
    if isinstance(data, str) and "=" in data and is_secret_key(data.split("=", 1)[0]):
        return f"{data.split('=', 1)[0]}={REDACTED}"
    return data


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
