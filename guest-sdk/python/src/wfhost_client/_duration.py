"""Durations as the API and the CLI write them: `500ms`, `30s`, `2m`, `1h`, `1d`."""

import re

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse(text: str) -> float:
    """`text` in seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", text)
    if not match:
        raise ValueError(f"'{text}' is not a duration: write it as 500ms, 30s, 2m, 1h or 1d")
    return float(match.group(1)) * UNITS[match.group(2)]
