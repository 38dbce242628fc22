"""Filter presets: which rules a published recipe runs, with its published values.

| preset | rules after HTTP status and language ID | source |
|---|---|---|
| ``fineweb`` (default) | URL, Gopher repetition, Gopher quality, C4 without the terminal-punctuation line rule, FineWeb, PII | Penedo et al. 2024; datatrove ``examples/fineweb.py`` |
| ``gopher`` | URL, Gopher repetition, Gopher quality | Rae et al. 2021 (MassiveWeb) |
| ``c4`` | URL, C4 with every line rule (bad words where a list is configured) | Raffel et al. 2020 |
| ``minimal`` | URL | — |

HTTP status and language ID run in every preset. Each rule's ``enabled`` in the config overrides
the preset (``true`` adds a rule to it, ``false`` removes it).
"""

from __future__ import annotations

#: The order rules run in (and the order of the funnel). Text-modifying steps: c4 (drops lines),
#: pii (replaces e-mails and IPs); rules after c4 see its output, as in FineWeb.
STEPS: tuple[str, ...] = ("http_status", "language", "url", "gopher_repetition", "gopher_quality", "c4",
                          "fineweb", "pii")
#: Steps that run whatever the preset.
ALWAYS: frozenset[str] = frozenset({"http_status", "language"})

PRESETS: dict[str, dict] = {
    "fineweb": {"steps": frozenset({"url", "gopher_repetition", "gopher_quality", "c4", "fineweb", "pii"}),
                "c4_filter_no_terminal_punct": False},
    "gopher": {"steps": frozenset({"url", "gopher_repetition", "gopher_quality"}),
               "c4_filter_no_terminal_punct": True},
    "c4": {"steps": frozenset({"url", "c4"}), "c4_filter_no_terminal_punct": True},
    "minimal": {"steps": frozenset({"url"}), "c4_filter_no_terminal_punct": True},
}


def preset_steps(preset: str) -> frozenset[str]:
    """The optional steps ``preset`` runs. Raises ValueError naming the known presets."""
    try:
        return PRESETS[preset]["steps"]
    except KeyError:
        raise ValueError(f"unknown filter preset {preset!r}; known: {', '.join(PRESETS)}") from None
