"""Render manifests/ with kustomize, as `kubectl apply -k` would, and charts/railyard with helm,
as `helm template` would; each install variant both ways.

kustomize comes from PATH (``kustomize``, else ``kubectl kustomize``), else from the
railyard binaries cache, where it is built once per machine from the Go module proxy
(``go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0``, about 3 minutes on 2 cores).
helm is the pinned build from ``tools/helm`` in the same cache (``railyard cluster build
--with-helm``, which scripts/setup runs for scripts/test).
"""

from __future__ import annotations

import atexit
import copy
import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.localcluster import binaries
from extender.localcluster.errors import ClusterError

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "charts" / "railyard"
KUSTOMIZE_VERSION = "v5.5.0"
#: Where docs/install.md installs the chart, so its names are the manifests' names.
RELEASE, NAMESPACE = "railyard", "railyard-system"

#: Each install variant of manifests/ (docs/install.md) and the chart values that select it.
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    "https": {"tls": {"enabled": True}},
    "kueue": {"kueue": {"enabled": True}},
    "main-scheduler": {"mode": "main-scheduler"},
    "servicemonitor": {"metrics": {"serviceMonitor": {"enabled": True}}},
}


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


def kustomize_variant(variant: str) -> list[dict[str, Any]]:
    return copy.deepcopy(_kustomize_variant(variant))


@functools.cache
def _kustomize_variant(variant: str) -> list[dict[str, Any]]:
    if variant == "servicemonitor":  # a component: an overlay of the user's adds it to the base
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "kustomization.yaml").write_text(servicemonitor_kustomization(Path(tmp)))
            return render(Path(tmp))
    return render(MANIFESTS / ("base" if variant == "base" else f"overlays/{variant}"))


def servicemonitor_kustomization(directory: Path) -> str:
    """An overlay in ``directory``: the base with the ServiceMonitor component (docs/install.md)."""
    return yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(MANIFESTS / "base", directory)],
        "components": [os.path.relpath(MANIFESTS / "components" / "servicemonitor", directory)]})


# helm


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@functools.cache
def _helm_binary() -> Path | ClusterError | None:
    """The cached helm; in CI, built if missing (once: a failed build is kept, not retried)."""
    if binaries.is_cached(binaries.HELM):
        return binaries.cached_dir(binaries.HELM) / "helm"
    if not _in_ci():
        return None
    try:
        return binaries.ensure_helm()
    except ClusterError as exc:
        return exc


def require_helm() -> Path:
    """The pinned helm, or skip (locally, never built) / fail (CI, or a build that broke)."""
    helm = _helm_binary()
    if isinstance(helm, ClusterError):
        pytest.fail(f"cannot build helm: {helm}", pytrace=False)
    if helm is None:
        pytest.skip("helm not built yet: run `railyard cluster build --with-helm` (scripts/setup --with-helm; "
                    "with CI=true the tests build it and fail instead of skipping)")
    return helm


@functools.cache
def _helm_home() -> Path:
    """Helm's cache, config and data directories, apart from the user's (~/.config/helm ...)."""
    home = tempfile.mkdtemp(prefix="railyard-helm-")
    atexit.register(shutil.rmtree, home, True)
    return Path(home)


def helm(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the pinned helm; with ``check``, a failure fails the test with helm's stderr."""
    home = _helm_home()
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}
    out = subprocess.run([str(require_helm()), *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check:
        assert out.returncode == 0, f"helm {' '.join(args)} exited {out.returncode}:\n{out.stderr}"
    return out


def values_file(values: dict[str, Any], directory: Path) -> Path:
    path = directory / "values.json"  # JSON is YAML
    path.write_text(json.dumps(values))
    return path


def helm_template(values: dict[str, Any], *, release: str = RELEASE,
                  namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders from the chart with ``values``."""
    out = helm_template_run(values, release=release, namespace=namespace)
    assert out.returncode == 0, f"helm template exited {out.returncode}:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def helm_template_run(values: dict[str, Any], *, release: str = RELEASE,
                      namespace: str = NAMESPACE) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with ``values``, failed or not."""
    with tempfile.TemporaryDirectory() as tmp:
        return helm("template", release, str(CHART), "--namespace", namespace,
                    "--values", str(values_file(values, Path(tmp))), check=False)


def helm_variant(variant: str) -> list[dict[str, Any]]:
    return copy.deepcopy(_helm_variant(variant))


@functools.cache
def _helm_variant(variant: str) -> list[dict[str, Any]]:
    return helm_template(VARIANTS[variant])
