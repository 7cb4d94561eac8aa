"""Render manifests/ with kustomize (``kubectl kustomize``, or a ``kustomize`` binary)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def render(directory: Path) -> list[dict[str, Any]]:
    command = kustomize_command()
    assert command is not None, "no kustomize: install kubectl or kustomize"
    out = subprocess.run([*command, str(directory)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(objects: list[dict[str, Any]], kind: str, name_prefix: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)]
    assert len(found) == 1, f"{kind} {name_prefix}: {[o['metadata']['name'] for o in found]}"
    return found[0]
