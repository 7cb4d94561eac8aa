"""Defensive accessors: objects from files or the wire may have any shape; none of these raise."""

from __future__ import annotations

from typing import Any, Mapping


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



def parse_count(value: Any) -> int:
    """An integer resource quantity (``"8"``, ``8``, ``"1k"``); 0 when unreadable."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.isascii():
        return 0
    units = {"k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, mult in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix) and text[: -len(suffix)].isdigit():
            return int(text[: -len(suffix)]) * mult
    return int(text) if text.isdigit() else 0
