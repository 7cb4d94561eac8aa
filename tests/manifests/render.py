"""Render manifests/ with kustomize, as `kubectl apply -k` would.

kustomize comes from PATH (``kustomize``, else ``kubectl kustomize``), else from the
railyard binaries cache, where it is built once per machine from the Go module proxy
(``go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0``, about 3 minutes on 2 cores).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
KUSTOMIZE_VERSION = "v5.5.0"


def _cached_kustomize() -> Path:
    cache = Path(os.environ.get("RAILYARD_CACHE", Path.home() / ".cache" / "railyard" / "bin"))
    return cache / f"kustomize-{KUSTOMIZE_VERSION}" / "kustomize"


@functools.cache
def kustomize_command() -> tuple[str, ...] | None:
    if shutil.which("kustomize"):
        return ("kustomize", "build")
    cached = _cached_kustomize()
    if cached.exists():
        return (str(cached), "build")
    if shutil.which("kubectl"):
        return ("kubectl", "kustomize")
    if shutil.which("go"):
        env = {**os.environ, "GOBIN": str(cached.parent), "CGO_ENABLED": "0"}
        built = subprocess.run(["go", "install", f"sigs.k8s.io/kustomize/kustomize/v5@{KUSTOMIZE_VERSION}"],
                               env=env, capture_output=True, text=True, timeout=1200)
        if built.returncode == 0 and cached.exists():
            return (str(cached), "build")
    return None


def render(directory: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_text(directory)) if d]


def render_text(directory: Path) -> str:
    command = kustomize_command()
    assert command is not None, "no kustomize: put kubectl or kustomize on PATH, or Go to build it"
    out = subprocess.run([*command, str(directory)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def find(objects: list[dict[str, Any]], kind: str, name_prefix: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)]
    assert len(found) == 1, f"{kind} {name_prefix}: {[o['metadata']['name'] for o in found]}"
    return found[0]
