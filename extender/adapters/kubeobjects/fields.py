"""Defensive accessors: objects from files or the wire may have any shape; none of these raise."""

from __future__ import annotations

from typing import Any, Mapping

RAILYARD, GROUP, OTHER = 0, 1, 2
"""Precedences of what pods and group objects declare, lowest wins: railyard's own annotations,
the group object, other annotations (groups.py has the whole table)."""


def dict_at(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def list_at(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, list) else []


def str_at(obj: Any, key: str, default: str = "") -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else default


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return {k: v for k, v in dict_at(dict_at(obj, "metadata"), "labels").items() if isinstance(v, str)}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return {k: v for k, v in dict_at(dict_at(obj, "metadata"), "annotations").items() if isinstance(v, str)}
