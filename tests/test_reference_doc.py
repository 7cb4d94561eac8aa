"""docs/reference.md keeps up with the code: every setting with its default, every RPC, every
annotation and label key railyard reads."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from extender.adapters import kubeobjects as ko
from extender.api.v1 import extender_pb2
from extender.settings import Settings

DOC = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()


def settings_rows() -> dict[str, str]:
    return dict(re.findall(r"^\| `([a-z_.]+)` \| `([^`]*)` \|", DOC, flags=re.M))


def leaves(obj: object, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(leaves(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def shown(value: object) -> str:
    if isinstance(value, tuple):
        return "[]" if not value else str(list(value))
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_every_setting_is_documented_with_its_default():
    rows = settings_rows()
    for name, default in leaves(Settings()).items():
        assert name in rows, f"docs/reference.md has no row for setting {name}"
        assert rows[name] == shown(default), f"{name}: doc says {rows[name]!r}, code says {shown(default)!r}"
    assert set(rows) == set(leaves(Settings())), "a documented setting no longer exists"


def test_every_rpc_is_documented():
    for method in extender_pb2.DESCRIPTOR.services_by_name["Extender"].methods:
        assert f"`{method.name}`" in DOC, method.name


def test_every_annotation_and_label_key_is_documented():
    keys = [*(k for _, k, _ in ko.MEMBERSHIP), *(k for k, _, _ in ko.DECLARING_ANNOTATIONS),
            *(k for keys in ko.RANKS for k in keys), *(lvl.key for levels in ko.PRESETS.values() for lvl in levels)]
    from extender.adapters.kubeobjects import notes
    keys += [notes.RANK, notes.SLICE, notes.DOMAIN + "<level>"]  # what railyard writes
    for key in keys:
        assert f"`{key}`" in DOC, key


def test_every_group_object_is_documented_with_its_cache_kind():
    for api in ko.GROUP_APIS:
        row = rf"^\|[^\n]*`{re.escape(api.api_version)}`[^\n]*\| `{re.escape(api.kind)}` \|$"
        assert re.search(row, DOC, re.M), f"docs/reference.md has no conventions row for {api.api_version}"
