"""Imports point inward: cli -> app -> adapters -> service -> core (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "extender"


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules(sub: str) -> list[Path]:
    return sorted((ROOT / sub).rglob("*.py"))


def test_core_is_pure():
    banned = ("kubernetes", "grpc", "prometheus_client", "extender.adapters", "extender.service",
              "extender.app", "extender.localcluster", "socket", "threading", "time", "http",
              "urllib", "requests", "logging")
    assert modules("core")
    for path in modules("core"):
        for name in imports(path):
            assert not name.startswith(banned), f"{path.name} imports {name}"


def test_localcluster_is_a_wing():
    for path in [*modules("core"), ROOT / "service.py", *modules("adapters")]:
        for name in imports(path):
            assert not name.startswith("extender.localcluster"), f"{path} imports {name}"


def test_transport_adapters_do_not_import_each_other():
    groups = {"http": "extender.adapters.http", "grpc": "extender.adapters.grpc", "k8s": "extender.adapters.k8s"}
    for sub, own in groups.items():
        for path in modules(f"adapters/{sub}") if (ROOT / "adapters" / sub).exists() else []:
            for name in imports(path):
                for other, prefix in groups.items():
                    if other != sub:
                        assert not name.startswith(prefix), f"{path} imports {name}"
