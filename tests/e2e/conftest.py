"""Fixtures that run real local clusters (``railyard cluster up``) and always tear them down.

- ``local_cluster``: a factory, module scope. ``local_cluster(nodes=[...] | topology="...",
  extender=False)`` starts a cluster through the real command line and returns a
  ``helpers.Cluster``; every cluster it started is stopped when the module ends, pass or fail.
  ``kubernetes_version="1.38.0-beta.0"`` runs that pinned version (skipped locally while it is
  not built), ``controllers=False`` runs no kube-controller-manager.
- ``gpu_cluster``: one shared cluster per session (no extender): four
  schedulable 8-GPU nodes in two racks, one cordoned node, one tainted node
  (``helpers.default_nodes()``).
- ``kueue_binaries``: what ``local_cluster(..., kueue=True)`` needs (the optional Kueue build
  and its fixed-path metrics certificate), or skip / fail as for the other binaries.
- ``controller_binaries``: what ``local_cluster(..., workload_controllers=("jobset", "lws", "trainer"))``
  needs (the optional JobSet, LeaderWorkerSet and Kubeflow Trainer builds), or skip / fail.

When an e2e test fails, the end of each running cluster's railyard log (``logs/extender*.log``)
is attached to its report: a flake seen once in CI can be read without running it again.

Binaries: with ``CI=true`` they are built if missing and any failure fails the tests; without
it, e2e tests skip (with a reason) when the binaries were never built, instead of starting a
long Go build inside a test run. ``railyard cluster build`` builds them.
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from extender.localcluster import binaries, cluster, kueue as kueue_mod, workloads
from extender.localcluster.errors import ClusterError

from .helpers import Cluster, core_api, default_nodes, node_list, run_railyard


LOG_TAIL_LINES = 120
"""Lines of each railyard log attached to a failed e2e test's report."""
_running: list[Path] = []
"""Workdirs of the clusters up now (every starter's), for the failure report."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def control_plane_binaries() -> binaries.Binaries:
    """The binaries, or skip (locally, never built) / fail (CI, or a build that broke)."""
    if not _in_ci() and not all(binaries.is_cached(c) for c in binaries.COMPONENTS):
        pytest.skip("control-plane binaries not built yet: run `railyard cluster build` "
                    "(with CI=true the tests build them and fail instead of skipping)")
    try:
        return binaries.ensure()
    except ClusterError as exc:
        pytest.fail(f"cannot get the control-plane binaries: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kueue_binaries(control_plane_binaries) -> binaries.Binaries:
    """The binaries with Kueue's manager, or skip (locally, never built) / fail (CI)."""
    if not _in_ci() and not binaries.is_cached(binaries.KUEUE):
        pytest.skip("Kueue not built yet: run `railyard cluster build --with-kueue` "
                    "(with CI=true the tests build it and fail instead of skipping)")
    try:
        bins = binaries.ensure(with_kueue=True)
        kueue_mod.ensure_metrics_cert()
    except ClusterError as exc:
        if not _in_ci():
            pytest.skip(f"cannot run Kueue here: {exc}")
        pytest.fail(f"cannot run Kueue: {exc}", pytrace=False)
    return bins


@pytest.fixture(scope="session")
def controller_binaries(control_plane_binaries) -> binaries.Binaries:
    """The binaries with every workload controller, or skip (locally, never built) / fail (CI)."""
    names = tuple(workloads.CONTROLLERS)
    if not _in_ci() and not all(binaries.is_cached(binaries.WORKLOAD_COMPONENTS[n]) for n in names):
        pytest.skip("workload controllers not built yet: run `railyard cluster build --with-jobset --with-lws "
                    "--with-trainer` (with CI=true the tests build them and fail instead of skipping)")
    try:
        return binaries.ensure(workload_controllers=names)
    except ClusterError as exc:
        pytest.fail(f"cannot get the workload controllers: {exc}", pytrace=False)


def _need_kubernetes(version: str) -> None:
    """Skip (locally) while that version's binaries were never built; fail on an unpinned one."""
    try:
        components = binaries.kubernetes_components(version)
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    if not _in_ci() and not all(binaries.is_cached(c) for c in components):
        pytest.skip(f"Kubernetes {version} not built yet: run `railyard cluster build --kubernetes-version {version}` "
                    "(with CI=true `cluster up` builds it and a failure fails)")


class ClusterStarter:
    """Starts clusters with ``railyard cluster up`` and stops every one of them on ``stop_all``."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._workdirs: list[Path] = []
        atexit.register(self.stop_all)  # last resort if pytest itself is torn down abruptly

    def __call__(self, *, nodes: list[dict[str, Any]] | None = None, topology: str | None = None,
                 extender: bool = False, scheduler_config: Path | None = None,
                 kueue: bool = False, kueue_feature_gates: str | None = None,
                 feature_gates: dict[str, bool] | None = None, runtime_config: tuple[str, ...] = (),
                 gpus_as_dra: bool = False, steer_lone_pods: bool = False, replicas: int = 1,
                 extender_settings: dict[str, Any] | None = None,
                 kubernetes_version: str | None = None, controllers: bool = True,
                 workload_controllers: tuple[str, ...] = ()) -> Cluster:
        if kubernetes_version is not None:
            _need_kubernetes(kubernetes_version)
        workdir = self._tmp.mktemp("cluster")
        args = ["cluster", "up", "--workdir", str(workdir)]
        if kubernetes_version is not None:
            args += ["--kubernetes-version", kubernetes_version]
        if not controllers:
            args.append("--no-controllers")
        if nodes is not None:
            nodes_file = workdir.parent / f"{workdir.name}-nodes.json"
            nodes_file.write_text(json.dumps(node_list(nodes)))
            args += ["--nodes", str(nodes_file)]
        if topology is not None:
            if "\n" in topology:
                topology_file = workdir.parent / f"{workdir.name}-topology.txt"
                topology_file.write_text(topology)
                topology = str(topology_file)
            args += ["--topology", topology]
        if scheduler_config is not None:
            args += ["--scheduler-config", str(scheduler_config)]
        if not extender:
            args.append("--no-extender")
        if kueue:
            args.append("--with-kueue")
        if kueue_feature_gates:
            args += ["--kueue-feature-gates", kueue_feature_gates]
        if feature_gates:
            args += ["--feature-gates", ",".join(f"{k}={str(v).lower()}" for k, v in sorted(feature_gates.items()))]
        if runtime_config:
            args += ["--runtime-config", ",".join(runtime_config)]
        if gpus_as_dra:
            args.append("--gpus-as-dra")
        if steer_lone_pods:
            args.append("--steer-lone-pods")
        args += [f"--with-{name}" for name in workload_controllers]
        if replicas != 1:
            args += ["--replicas", str(replicas)]
        for key, value in (extender_settings or {}).items():
            args += ["--extender-set", f"{key}={json.dumps(value)}"]
        self._workdirs.append(workdir)  # before `up`: stop_all also cleans a half start
        _running.append(workdir)
        result = run_railyard(*args, check=False)
        if result.returncode != 0:
            pytest.fail(f"railyard {' '.join(args)} exited {result.returncode}:\n{result.stderr}", pytrace=False)
        kubeconfig = Path(result.stdout.strip().splitlines()[-1])
        return Cluster(workdir=workdir, kubeconfig=kubeconfig, extender=extender, core=core_api(kubeconfig))

    def stop_all(self) -> None:
        while self._workdirs:
            workdir = self._workdirs.pop()
            if workdir in _running:
                _running.remove(workdir)
            cluster.down(workdir, quiet=True)


@pytest.fixture(scope="module")
def local_cluster(control_plane_binaries, tmp_path_factory) -> Iterator[ClusterStarter]:
    starter = ClusterStarter(tmp_path_factory)
    try:
        yield starter
    finally:
        starter.stop_all()


@pytest.fixture(scope="session")
def gpu_cluster(control_plane_binaries, tmp_path_factory) -> Iterator[Cluster]:
    starter = ClusterStarter(tmp_path_factory)
    try:
        yield starter(nodes=default_nodes())
    finally:
        starter.stop_all()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/e2e is an e2e test, marked or not."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed e2e test's report ends with the last lines of every running railyard's log."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed or call.when == "teardown":
        return
    for workdir in _running:
        for log in sorted((workdir / "logs").glob("extender*.log")):
            lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"{workdir.name}/{log.name} (last {len(lines)} lines)", "\n".join(lines)))
