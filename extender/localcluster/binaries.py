"""Build (once per machine and version) the control-plane binaries from the Go module proxy.

The versions are pinned in exactly one place: the ``require`` lines of the helper modules
under ``tools/`` (``tools/kube``, ``tools/etcd``, ``tools/kwok``; and, built only when asked
for, ``tools/kueue`` for Kueue's manager, ``tools/jobset``, ``tools/lws`` and ``tools/trainer``
for the workload controllers of ``workloads.py``, and ``tools/helm`` for the chart's tests).
``tools/kube`` pins the default Kubernetes version; each further ``tools/kube-<minor>`` pins
another one (``--kubernetes-version``), and a helper module whose go.mod has a ``toolchain`` line
is built with that toolchain (``GOTOOLCHAIN``, fetched from the Go module proxy).
``go install pkg@version`` cannot build kube-apiserver or etcd because their own go.mod files
carry ``replace`` directives; a helper module that requires them (and pins the Kubernetes
staging modules to their published tags) can. See KUBE-FACTS.md section 3.

Binaries land in ``$RAILYARD_CACHE/<component>-<version>/`` (default
``~/.cache/railyard/bin``), outside the repository, and are reused when present. A cold build
of Kubernetes takes many minutes on 2 cores, so progress goes to stderr as it compiles.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from extender.localcluster.errors import ClusterError
from extender.localcluster.progress import Progress

#: Where the helper Go modules live: ``tools/`` at the root of a source checkout.
TOOLS_DIR = Path(__file__).resolve().parents[2] / "tools"

#: Markers in ``go`` output that mean "the modules could not be fetched", not "the code is bad".
_PROXY_ERRORS = (
    "dial tcp",
    "proxyconnect",
    "no such host",
    "connection refused",
    "i/o timeout",
    "TLS handshake timeout",
    "404 Not Found",
    "410 Gone",
    "403 Forbidden",
    "module lookup disabled",
    "GOPROXY=off",
    "GOFLAGS=-mod=vendor",
)


class BuildError(ClusterError):
    """A binary could not be had; the message is one line a user can act on."""


@dataclass(frozen=True)
class Component:
    """One cache entry: a set of binaries built from one helper module at one version."""

    name: str
    """Cache directory prefix, e.g. ``kubernetes``."""
    tool_dir: str
    """Helper module directory under ``tools/``."""
    module: str
    """The pinned module whose ``require`` line gives the version."""
    packages: dict[str, str]
    """Binary name -> main package path."""
    answers_version: bool = True
    """The binaries print their version for ``--version``. Kueue's, JobSet's and Trainer's
    managers have no such flag: their build info (``go version -m``) is read instead."""
    version_args: tuple[str, ...] = ("--version",)
    """The arguments that make the binaries print their version (helm: ``version``)."""
    version_variable: str | None = None
    """The Go string variable the project's own Makefile sets to the release tag with ``-X``."""

    def version(self, tools_dir: Path = TOOLS_DIR) -> str:
        """The version the helper module's go.mod requires, e.g. ``v1.37.2``."""
        return required_version(tools_dir / self.tool_dir / "go.mod", self.module)

    @property
    def is_kubernetes(self) -> bool:
        """Built from ``k8s.io/kubernetes`` (kube-apiserver, kube-scheduler, kube-controller-manager)."""
        return self.module == KUBERNETES_MODULE

    def ldflags(self, version: str) -> list[str]:
        """``-X`` flags that make ``--version`` honest.

        Kubernetes' component-base defaults to ``v0.0.0-master``; ``version_variable`` defaults
        to ``v0.0.0-main`` (Kueue, JobSet, LWS: their Makefiles set it from the git tag, the
        managers log it at start) or to the minor only (helm's ``internal/version.version``,
        ``v4.3``). etcd (``api/v3/version.Version``) and kwok (``pkg/consts.Version``) carry their
        release in the source of the tagged module; Trainer v2.3.0 has no version variable at all.
        """
        if self.version_variable:
            return [f"-X {self.version_variable}={version}"]
        if not self.is_kubernetes:
            return []
        match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+.*", version)
        if not match:
            raise BuildError(f"cannot read major/minor from Kubernetes version {version!r}")
        pkg = "k8s.io/component-base/version"
        return [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={match.group(1)}",
            f"-X {pkg}.gitMinor={match.group(2)}",
        ]

    def version_marker(self, version: str) -> str:
        """What the binaries' ``--version`` output must contain."""
        return version if self.is_kubernetes else version.lstrip("v")


KUBERNETES_MODULE = "k8s.io/kubernetes"
#: The default Kubernetes version's helper module; others are ``tools/kube-<minor>``.
DEFAULT_KUBE_TOOL_DIR = "kube"
KUBERNETES = Component(
    name="kubernetes",
    tool_dir=DEFAULT_KUBE_TOOL_DIR,
    module=KUBERNETES_MODULE,
    packages={
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    },
)
#: Its own cache entry, from the same helper module: a cache that holds the API server and
#: scheduler of a version keeps serving them while the controller manager is built beside it.
KUBE_CONTROLLER_MANAGER = Component(
    name="kube-controller-manager",
    tool_dir=DEFAULT_KUBE_TOOL_DIR,
    module=KUBERNETES_MODULE,
    packages={"kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager"},
)
ETCD = Component(
    name="etcd",
    tool_dir="etcd",
    module="go.etcd.io/etcd/server/v3",
    packages={"etcd": "go.etcd.io/etcd/server/v3"},
)
KWOK = Component(
    name="kwok",
    tool_dir="kwok",
    module="sigs.k8s.io/kwok",
    packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
)
KUEUE = Component(
    name="kueue",
    tool_dir="kueue",
    module="sigs.k8s.io/kueue",
    packages={"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
    answers_version=False,
    version_variable="sigs.k8s.io/kueue/pkg/version.GitVersion",
)
JOBSET = Component(
    name="jobset",
    tool_dir="jobset",
    module="sigs.k8s.io/jobset",
    packages={"jobset": "sigs.k8s.io/jobset"},  # main.go at the module root
    answers_version=False,
    version_variable="sigs.k8s.io/jobset/pkg/version.GitVersion",
)
LWS = Component(
    name="lws",
    tool_dir="lws",
    module="sigs.k8s.io/lws",
    packages={"lws": "sigs.k8s.io/lws/cmd"},  # prints "Version: <GitVersion>" for --version
    version_variable="sigs.k8s.io/lws/pkg/version.GitVersion",
)
TRAINER = Component(
    name="trainer",
    tool_dir="trainer",
    module="github.com/kubeflow/trainer/v2",
    packages={"trainer": "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"},
    answers_version=False,
)
#: Helm v4, for the chart's tests only (tests/manifests/test_chart.py, tests/e2e/test_helm.py).
#: Helm 3 gets security fixes only, until 2027-02-10 (helm.sh blog "Helm 3 End of Life"); the
#: chart is apiVersion v2, which both read.
HELM = Component(
    name="helm",
    tool_dir="helm",
    module="helm.sh/helm/v4",
    packages={"helm": "helm.sh/helm/v4/cmd/helm"},
    version_args=("version", "--short"),
    version_variable="helm.sh/helm/v4/internal/version.version",
)
COMPONENTS = (ETCD, KWOK, KUBERNETES, KUBE_CONTROLLER_MANAGER)  # smallest first: early failures come early
#: Built only when asked for (``cluster build --with-kueue``, ``--with-jobset``...,
#: ``--with-helm``): every cluster needs COMPONENTS, few need the others, only the chart's tests
#: need helm, and each cold build adds minutes.
OPTIONAL_COMPONENTS = (KUEUE, JOBSET, LWS, TRAINER, HELM)
#: The workload controllers by name (``Binaries.workload_controllers``, ``workloads.py``).
WORKLOAD_COMPONENTS = {c.name: c for c in (JOBSET, LWS, TRAINER)}


def required_version(go_mod: Path, module: str) -> str:
    """The version of ``module`` in a go.mod ``require`` line (single or block form)."""
    try:
        text = Path(go_mod).read_text()
    except OSError as exc:
        raise BuildError(f"cannot read {go_mod}: {exc.strerror} (needs a source checkout of railyard)") from exc
    pattern = re.compile(
        r"^\s*(?:require\s+)?" + re.escape(module) + r"\s+(v\S+)\s*(?://.*)?$", re.MULTILINE
    )
    match = pattern.search(text)
    if not match:
        raise BuildError(f"{go_mod} does not require {module}")
    return match.group(1)


def toolchain(go_mod: Path) -> str | None:
    """The go.mod ``toolchain`` line's value (e.g. ``go1.27.3``), or None if it has none."""
    try:
        text = Path(go_mod).read_text()
    except OSError:
        return None
    match = re.search(r"^toolchain\s+(\S+)\s*$", text, re.MULTILINE)
    return match.group(1) if match else None


def kubernetes_versions(tools_dir: Path = TOOLS_DIR) -> dict[str, str]:
    """Every pinned Kubernetes version -> its helper module directory, the default first."""
    found = {KUBERNETES.version(tools_dir): DEFAULT_KUBE_TOOL_DIR}
    for go_mod in sorted(tools_dir.glob(f"{DEFAULT_KUBE_TOOL_DIR}-*/go.mod")):
        found.setdefault(required_version(go_mod, KUBERNETES_MODULE), go_mod.parent.name)
    return found


def kubernetes_components(version: str | None = None,
                          tools_dir: Path = TOOLS_DIR) -> tuple[Component, Component]:
    """(API server + scheduler, controller manager) of ``version`` (``1.38.0-beta.0`` or
    ``v1.38.0-beta.0``; None = the default), or BuildError naming the pinned versions."""
    if version is None:
        return KUBERNETES, KUBE_CONTROLLER_MANAGER
    pinned = kubernetes_versions(tools_dir)
    tool_dir = pinned.get("v" + version.removeprefix("v"))
    if tool_dir is None:
        choices = ", ".join(f"{v.removeprefix('v')} (tools/{d})" for v, d in pinned.items())
        raise BuildError(f"Kubernetes {version} is not pinned here; pinned versions: {choices}")
    return (dataclasses.replace(KUBERNETES, tool_dir=tool_dir),
            dataclasses.replace(KUBE_CONTROLLER_MANAGER, tool_dir=tool_dir))


def cache_root() -> Path:
    """``$RAILYARD_CACHE`` or ``~/.cache/railyard/bin``."""
    override = os.environ.get("RAILYARD_CACHE")
    return Path(override).expanduser() if override else Path.home() / ".cache" / "railyard" / "bin"


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every control-plane binary."""

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kwok: Path
    kueue: Path | None = None
    """Kueue's manager; None unless asked for (``ensure(with_kueue=True)``)."""
    kube_controller_manager: Path | None = None
    """None when not asked for (``ensure(controllers=False)``)."""
    kubernetes_version: str = ""
    """The version of kube-apiserver, kube-scheduler and kube-controller-manager, e.g. ``v1.37.2``."""
    workload_controllers: dict[str, Path] = field(default_factory=dict)
    """Workload controller managers asked for (``ensure(workload_controllers=("jobset",))``), by name."""


def cached_dir(component: Component, root: Path | None = None, tools_dir: Path = TOOLS_DIR) -> Path:
    """The cache directory of ``component`` at its pinned version."""
    return (root or cache_root()) / f"{component.name}-{component.version(tools_dir)}"


def is_cached(component: Component, root: Path | None = None, tools_dir: Path = TOOLS_DIR) -> bool:
    directory = cached_dir(component, root, tools_dir)
    return all(os.access(directory / name, os.X_OK) for name in component.packages)


def ensure(
    root: Path | None = None,
    tools_dir: Path = TOOLS_DIR,
    log: TextIO = sys.stderr,
    with_kueue: bool = False,
    kubernetes_version: str | None = None,
    controllers: bool = True,
    workload_controllers: Collection[str] = (),
) -> Binaries:
    """Every binary, from the cache or freshly built; raises BuildError with one clear line.

    ``kubernetes_version``: one of ``kubernetes_versions()`` (None = the default);
    ``controllers``: also kube-controller-manager of that version; ``workload_controllers``:
    names of workload controllers (keys of ``WORKLOAD_COMPONENTS``) to build too.
    """
    root = root or cache_root()
    unknown = sorted(set(workload_controllers) - set(WORKLOAD_COMPONENTS))
    if unknown:
        raise BuildError(f"unknown workload controller {unknown[0]!r}; known: {', '.join(WORKLOAD_COMPONENTS)}")
    kube, kcm = kubernetes_components(kubernetes_version, tools_dir)
    wanted = ((ETCD, KWOK, kube) + ((kcm,) if controllers else ()) + ((KUEUE,) if with_kueue else ())
              + tuple(WORKLOAD_COMPONENTS[n] for n in workload_controllers))
    dirs = {c.name: ensure_component(c, root, tools_dir, log) for c in wanted}
    return Binaries(
        etcd=dirs["etcd"] / "etcd",
        kube_apiserver=dirs["kubernetes"] / "kube-apiserver",
        kube_scheduler=dirs["kubernetes"] / "kube-scheduler",
        kwok=dirs["kwok"] / "kwok",
        kueue=dirs["kueue"] / "kueue" if with_kueue else None,
        kube_controller_manager=dirs[kcm.name] / "kube-controller-manager" if controllers else None,
        kubernetes_version=kube.version(tools_dir),
        workload_controllers={n: dirs[n] / n for n in workload_controllers},
    )


def ensure_helm(root: Path | None = None, tools_dir: Path = TOOLS_DIR, log: TextIO = sys.stderr) -> Path:
    """The helm binary, from the cache or freshly built (``cluster build --with-helm``)."""
    return ensure_component(HELM, root or cache_root(), tools_dir, log) / "helm"


def ensure_component(component: Component, root: Path, tools_dir: Path, log: TextIO) -> Path:
    """Return the cache directory of ``component``, building it first if it is missing.

    A file lock serialises concurrent callers (two test sessions, a shell and CI), and the
    build goes to a temporary directory renamed into place, so a crash never leaves a
    half-built entry that looks complete.
    """
    version = component.version(tools_dir)
    final = root / f"{component.name}-{version}"
    if is_cached(component, root, tools_dir):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{component.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_cached(component, root, tools_dir):
            return final
        go = find_go()
        build_log = root / f"{component.name}-{version}.build.log"
        staging = Path(tempfile.mkdtemp(prefix=f".{component.name}-", dir=root))
        staging.chmod(0o755)  # mkdtemp makes it owner-only; the binaries are not secret
        try:
            _build(go, component, version, tools_dir / component.tool_dir, staging, build_log, log)
            _check_versions(component, version, staging, go)
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


def find_go() -> str:
    """Path of the ``go`` command, or BuildError saying how to get one."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "no Go toolchain: `go` is not on PATH. Install Go (the helper modules in tools/ "
            "say which version in their `go` line) or put prebuilt binaries in "
            f"{cache_root()} (see docs/local-cluster.md)"
        )
    return go


def go_env(base: dict[str, str] | None = None, module_dir: Path | None = None) -> dict[str, str]:
    """The environment for ``go``: static binaries, no cgo toolchain needed; in a helper module
    whose go.mod names a ``toolchain`` (Kubernetes 1.38 needs Go 1.27), ``GOTOOLCHAIN`` set to
    it, so the go command fetches that toolchain from the Go module proxy for this build only."""
    env = dict(os.environ if base is None else base)
    env["CGO_ENABLED"] = "0"
    wanted = toolchain(module_dir / "go.mod") if module_dir is not None else None
    if wanted:
        env["GOTOOLCHAIN"] = wanted
    return env


def build_command(go: str, component: Component, version: str, out_dir: Path) -> list[str]:
    """The ``go build`` invocation for ``component`` (run inside its helper module)."""
    # One package: name the output file, since Go would call go.etcd.io/etcd/server/v3
    # "server". Several: a directory, each binary named after its package.
    if len(component.packages) == 1:
        (name,) = component.packages
        output = str(out_dir / name)
    else:
        output = str(out_dir) + os.sep
    # -buildvcs=false: the helper module's own git state says nothing about the binaries, and
    # stamping it fails in checkouts git considers unsafe (other owner).
    return [
        go, "build", "-v", "-trimpath", "-buildvcs=false",
        "-ldflags", " ".join(component.ldflags(version)),
        "-o", output,
        *component.packages.values(),
    ]


def _build(
    go: str, component: Component, version: str, module_dir: Path, out_dir: Path, build_log: Path, log: TextIO
) -> None:
    label = f"{component.name} {version} ({', '.join(component.packages)})"
    started = time.monotonic()
    print(f"railyard: building {label} from the Go module proxy; a cold build takes many minutes, "
          f"log: {build_log}", file=log, flush=True)
    env = go_env(module_dir=module_dir)
    with open(build_log, "w") as out:
        # Step 1 fetches every needed module (proxy failures surface here) and counts packages.
        listing = subprocess.run(
            [go, "list", "-deps", *component.packages.values()],  # std too: a cold cache compiles it
            cwd=module_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        out.write(listing.stderr)
        if listing.returncode != 0:
            raise BuildError(_explain(label, listing.stderr, build_log))
        total = sum(1 for line in listing.stdout.splitlines() if line.strip())
        proc = subprocess.Popen(
            build_command(go, component, version, out_dir),
            cwd=module_dir, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )
        progress = Progress(log, f"{component.name}: packages compiled", total)
        stop = threading.Event()

        def heartbeat() -> None:
            # Linking kube-apiserver prints nothing for a minute: keep saying we are alive (in
            # a log; a terminal has the live count).
            while not stop.wait(30):
                if not progress.live:
                    print(f"railyard:   {component.name}: {progress.done}/{total} packages compiled, "
                          f"{_elapsed(started)}", file=log, flush=True)

        ticker = threading.Thread(target=heartbeat, daemon=True)
        ticker.start()
        tail: list[str] = []
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                tail = (tail + [line])[-40:]
                if not line.startswith(("#", " ", "\t")) and " " not in line.strip():
                    progress.step()  # `go build -v` prints each package it compiles
            code = proc.wait()
        finally:
            progress.close()
            stop.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if code != 0:
        raise BuildError(_explain(label, "".join(tail), build_log))
    print(f"railyard: built {label} in {_elapsed(started)}", file=log, flush=True)


def _check_versions(component: Component, version: str, directory: Path, go: str = "go") -> None:
    """Refuse binaries whose ``--version`` (or build info) does not report the pinned version."""
    marker = component.version_marker(version)
    for name in component.packages:
        if not component.answers_version:
            _check_build_info(component, version, directory / name, go)
            continue
        try:
            result = subprocess.run([str(directory / name), *component.version_args],
                                    capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"{name} built from {component.module} {version} does not run: {exc}") from exc
        reported = (result.stdout + result.stderr).strip()
        if marker not in reported:
            raise BuildError(f"{name} built from {component.module} {version} reports {reported!r}")


def _check_build_info(component: Component, version: str, binary: Path, go: str) -> None:
    """The module line ``go version -m`` prints for ``component.module`` must name ``version``."""
    try:
        result = subprocess.run([go, "version", "-m", str(binary)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"cannot read the build info of {binary}: {exc}") from exc
    if not build_info_names(result.stdout, component.module, version):
        raise BuildError(f"{binary.name} built from {component.module} {version} does not embed that module "
                         f"version (go version -m: {result.stdout.strip()[:300]!r})")


def build_info_names(build_info: str, module: str, version: str) -> bool:
    """True if ``go version -m`` output lists ``module`` at ``version`` (as main module or dep)."""
    for line in build_info.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] in ("mod", "dep") and fields[1] == module and fields[2] == version:
            return True
    return False


def module_dir(component: Component, tools_dir: Path = TOOLS_DIR) -> Path:
    """The pinned module's source tree in GOMODCACHE (``go mod download`` first, so it is there).

    The CRDs and webhook configurations of Kueue and the workload controllers are read from here
    at ``cluster up``: they belong to the same version as the binary and are never copied into
    this repository.
    """
    version = component.version(tools_dir)
    go = find_go()
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{component.module}@{version}"],
        cwd=tools_dir / component.tool_dir, env=go_env(), capture_output=True, text=True,
    )
    try:
        info = json.loads(result.stdout)
    except ValueError:
        info = {}
    directory = info.get("Dir")
    if result.returncode != 0 or not directory:
        detail = info.get("Error") or (result.stderr.strip().splitlines() or ["no output"])[-1]
        hint = " (check the network or GOPROXY)" if any(m in detail for m in _PROXY_ERRORS) else ""
        raise BuildError(f"cannot get the source of {component.module} {version}: `go mod download` "
                         f"in tools/{component.tool_dir} failed{hint}: {detail}")
    return Path(directory)


def _explain(label: str, output: str, build_log: Path) -> str:
    # Without go's "to add: go get ..." hint lines, which name no module that is missing.
    lines = [line.strip() for line in output.strip().splitlines()
             if line.strip() and not line.strip().startswith(("go get ", "go mod download "))]
    last = lines[-1] if lines else "no output"
    failed = [line for line in lines if any(marker in line for marker in _PROXY_ERRORS)]
    if failed:
        # The line that names the module (a refusal's "server response" follows it).
        proxy = os.environ.get("GOPROXY") or _go_env_value("GOPROXY") or "unset"
        return (f"cannot build {label}: fetching modules from the Go module proxy failed "
                f"(GOPROXY={proxy}): {failed[-1]}; check the network or GOPROXY; full log: {build_log}")
    if "missing go.sum entry" in last:
        last = (last.removesuffix("; to add:")
                + " (the helper module's go.sum lacks that module: see the top of its go.mod)")
    return f"cannot build {label}: {last}; full log: {build_log}"


def _go_env_value(key: str) -> str:
    go = shutil.which("go")
    if not go:
        return ""
    result = subprocess.run([go, "env", key], capture_output=True, text=True)
    return result.stdout.strip()


def _elapsed(since: float) -> str:
    seconds = int(time.monotonic() - since)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def describe(root: Path | None = None, tools_dir: Path = TOOLS_DIR) -> list[str]:
    """One line per component and pinned version: whether it is cached (for ``cluster build``)."""
    others = [c for v in list(kubernetes_versions(tools_dir))[1:] for c in kubernetes_components(v, tools_dir)]
    lines = []
    for component in COMPONENTS + OPTIONAL_COMPONENTS + tuple(others):
        version = component.version(tools_dir)
        state = "cached" if is_cached(component, root, tools_dir) else "not built yet"
        if component in OPTIONAL_COMPONENTS and state != "cached":
            state += f" (optional: --with-{component.name})"
        elif component in others and state != "cached":
            state += f" (optional: --kubernetes-version {version.removeprefix('v')})"
        lines.append(f"{component.name} {version}: {state} in {cached_dir(component, root, tools_dir)}")
    return lines

