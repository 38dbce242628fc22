"""Document filters over Arrow batches (no Spark import): the rules of published pretraining-data
recipes, each a small module with its source and published values.

* :mod:`.rule` — what a rule is: :class:`Rule` (a name, its :class:`Measure` s of a
  :class:`Document`, optionally a text transform) with its values in a
  :class:`~pipelines.config.RuleConfig`;
* :mod:`.language` — fastText ``lid.176`` language ID (FineWeb: keep score ≥ 0.65);
* :mod:`.url` — :class:`UrlFilter`: domain / URL blocklists and an adult-keyword heuristic
  (datatrove ``URLFilter``);
* :mod:`.gopher_repetition`, :mod:`.gopher_quality` — :class:`GopherRepetitionFilter`,
  :class:`GopherQualityFilter`: Rae et al. 2021 (MassiveWeb);
* :mod:`.c4` — :class:`C4QualityFilter`: Raffel et al. 2020 (line removal, lorem ipsum, curly
  brackets, sentences, bad words);
* :mod:`.fineweb` — :class:`FineWebQualityFilter`: Penedo et al. 2024 (line punctuation, short
  lines, duplicated characters, lists);
* :mod:`.pii` — :class:`PiiFormatter`: e-mail and public IP replacement (datatrove ``PIIFormatter``);
* :mod:`.presets` — a preset is a list of configured rules: ``fineweb`` (default), ``gopher``,
  ``c4``, ``minimal``, and any :func:`register_preset` adds;
* :mod:`.engine` — runs them over a batch: :func:`filter_batch` (documents with cleaned text and
  their decisions), :func:`decide_batch` (decision rows only), :func:`funnel`; its parameters are
  :class:`FilterParams` (the ``filter`` config section and the rules built from it).

Word rules run only on languages written with spaces; the stop-word rule only where the language
has a list. Each decision row is ``(doc_id, filter, value, threshold, passed, detail)``; a document
is kept when all its decisions passed.
"""

from pipelines.config import RuleConfig
from pipelines.kernels.filters._measure import Measure
from pipelines.kernels.filters._text import UNSEGMENTED_LANGUAGES
from pipelines.kernels.filters.c4 import C4QualityFilter, bad_words_pattern, c4_apply, load_word_list
from pipelines.kernels.filters.engine import (
    DECISION_SCHEMA,
    RESULT_FIELDS,
    FilterParams,
    Steps,
    decide_batch,
    filter_batch,
    filter_document,
    funnel,
)
from pipelines.kernels.filters.fineweb import FineWebQualityFilter, fineweb_measures
from pipelines.kernels.filters.gopher_quality import BULLETS, STOP_WORDS, GopherQualityFilter, gopher_measures
from pipelines.kernels.filters.gopher_repetition import GopherRepetitionFilter, gopher_repetition_measures
from pipelines.kernels.filters.language import default_lid_model_path, detect_language, load_lid_model
from pipelines.kernels.filters.pii import PiiFormatter, replace_pii
from pipelines.kernels.filters.presets import (
    LANGUAGE,
    PRESETS,
    RULES,
    STEPS,
    preset_rules,
    register_preset,
    register_rule,
    rule_class,
)
from pipelines.kernels.filters.rule import Document, Rule
from pipelines.kernels.filters.url import (
    UrlFilter,
    load_domain_blocklist,
    load_url_blocklist,
    url_measures,
)

__all__ = [
    "BULLETS", "DECISION_SCHEMA", "LANGUAGE", "PRESETS", "RESULT_FIELDS", "RULES", "STEPS", "STOP_WORDS", "UNSEGMENTED_LANGUAGES",
    "C4QualityFilter", "Document", "FilterParams", "FineWebQualityFilter", "GopherQualityFilter",
    "GopherRepetitionFilter", "Measure", "PiiFormatter", "Rule", "RuleConfig", "Steps", "UrlFilter",
    "bad_words_pattern", "c4_apply", "decide_batch", "default_lid_model_path", "detect_language",
    "filter_batch", "filter_document", "fineweb_measures", "funnel", "gopher_measures",
    "gopher_repetition_measures", "load_domain_blocklist", "load_lid_model", "load_url_blocklist",
    "load_word_list", "preset_rules", "register_preset", "register_rule", "replace_pii", "rule_class",
    "url_measures",
]
