"""Quoting what a client sent, in the messages sent back: cut short, whatever its size.

An error names the offending value (STYLE habit 8), but a pod name can be a megabyte long and
gRPC status details travel in a trailer that clients refuse past 8 KiB (then the caller sees
RESOURCE_EXHAUSTED about metadata instead of the real error). Adapters quote through here.
"""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 40
"""Characters of a quoted string kept before it is cut."""


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value`` for a message: strings quoted and cut to ``limit`` characters (with the full
    length said), integers past ``limit`` digits by their size, other objects by their type."""
    if isinstance(value, str):
        quoted = repr(value)
        if len(quoted) <= limit + 2:
            return quoted
        # Cut the quoted form, not the raw string: escapes (\U0001f600) would make it long again.
        return f"{quoted[:limit + 1]}'... ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if -(10**limit) < value < 10**limit:
            return repr(value)
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return f"a {type(value).__name__}"


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: cut, saying how long it was."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text)} characters in all)"
    if limit <= len(tail):
        return text[:limit]
    return text[: limit - len(tail)] + tail
