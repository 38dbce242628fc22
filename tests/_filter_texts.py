"""Builders for hand-made filter test texts of exact lengths (no data, no randomness)."""

from __future__ import annotations

import math


def exact_length(parts: list[str], total: int) -> str:
    """``parts`` joined by spaces, then unique filler words until the text has ``total`` characters."""
    text = " ".join(parts)
    i = 0
    while total - len(text) > 7:
        text += f" f{i:04d}"
        i += 1
    remaining = total - len(text)
    if remaining >= 2:
        text += " " + "y" * (remaining - 1)
    elif remaining == 1:
        assert i, "total too close to the parts' length"
        text = text[:-5] + "yyyyyy"  # the last filler word, one character longer
    assert len(text) == total, (len(text), total)
    return text


def straddle(chars: int, limit: float) -> tuple[int, int]:
    """``(total that passes, total that fails)`` for a rule ``chars / total <= limit``."""
    passing = math.ceil(chars / limit)
    return passing, passing - 1


#: Plain English prose with no repeated lines or phrases: passes every rule of every preset.
PROSE = """The Lonely Work of Lighthouse Keepers
For most of two centuries, a lighthouse needed a person to keep it burning through the night.
Keepers trimmed wicks, polished the great lenses, and wound the clockwork that turned the light.
Their logbooks recorded weather, passing ships, and the small repairs that filled each day.
Many stations stood on bare rock miles from shore, so supplies came by boat when the sea allowed.
Families sometimes lived with them, and children learned to row before they could ride a bicycle.
Automation arrived slowly during the twentieth century, and the last keepers left their towers.
Today visitors climb the spiral stairs and wonder how anyone endured such isolation for years."""
