"""``cluster up / down / status``: start the local control plane, wait until healthy, stop it.

Order of ``up``: check the workdir and every input (nothing started yet) -> binaries (built
once per machine and Kubernetes version) -> PKI and kubeconfig -> etcd -> kube-apiserver
(/readyz) -> nodes and filler pods -> kwok (/healthz) -> extender (/readyz) -> kube-scheduler
(/readyz, informers synced) -> kube-controller-manager (its controllers built; not with
``--no-controllers``) -> with ``--with-kueue``: Kueue (``managers.py``: CRDs Established,
manager /readyz, webhook configurations until the API server calls them) -> with
``--with-jobset`` and the other workload controllers: each the same way (``workloads.py``) ->
every node listed. The extender starts before the scheduler so the scheduler's first pod never
meets a missing extender. Any failure, Ctrl-C included, stops what was started before the error
is raised: ``up`` never leaves a half cluster running.

Workdir layout::

    <workdir>/kubeconfig          admin kubeconfig (certs inlined), printed by ``up``
    <workdir>/cluster.json        ports, URLs, node count: what ``status`` shows
    <workdir>/pids/<name>.pid     "<pid> <start time>" per running process
    <workdir>/logs/<name>.log     each component's output
    <workdir>/pki/  etcd/  scheduler-config.yaml  kwok-stages.yaml
    <workdir>/kueue-config.yaml  kueue/certs/   with --with-kueue
    <workdir>/<controller>-config.yaml  <controller>/   with --with-jobset, --with-lws, --with-trainer
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TextIO

import yaml

from extender.localcluster import binaries as binaries_mod, kustomize, managers, workloads
from extender.localcluster import admission, config, dra, identity, kueue as kueue_mod, nodes as nodes_mod, pki as pki_mod, processes
from extender.localcluster.apiclient import (CREATE_PARALLELISM, ApiClient, api_message, http_ok, http_text, wait_healthy,
                                             wait_healthy_or_restart)
from extender.localcluster.errors import ClusterError
from extender.localcluster.progress import Progress

#: Stop order for ``down`` (reverse of start). Names are also the log and pid file names.
COMPONENTS = ("trainer", "lws", "jobset", "kueue", "kube-controller-manager", "kube-scheduler", "extender", "kwok",
              "kube-apiserver", "etcd")
DEFAULT_WORKDIR = Path(".railyard/cluster")


@dataclass(frozen=True)
class UpOptions:
    """What ``cluster up`` was asked for."""

    workdir: Path = DEFAULT_WORKDIR
    nodes_file: Path | None = None
    topology: str | None = None
    """A topology file path, or a generator line such as ``blocks=2 racks=4 ...``."""
    scheduler_config: Path | None = None
    """A KubeSchedulerConfiguration to use instead of the generated one."""
    extender: bool = True
    apiserver_port: int = 0
    """0 = pick a free port."""
    node_set: nodes_mod.NodeSet | None = None
    """Nodes given directly (tests); wins over ``nodes_file`` and ``topology``."""
    binaries: binaries_mod.Binaries | None = None
    """Prebuilt binaries; None = ``binaries.ensure()`` at ``kubernetes_version``."""
    kubernetes_version: str | None = None
    """kube-apiserver, kube-scheduler and kube-controller-manager of this pinned version
    (``--kubernetes-version``, e.g. ``1.38.0-beta.0``); None = the default (``tools/kube``)."""
    controllers: bool = True
    """Run kube-controller-manager with ``config.CONTROLLERS`` (``--no-controllers``: without)."""
    timeout: float = 180.0
    """Seconds each component may take to become healthy."""
    feature_gates: dict[str, bool] = field(default_factory=dict)
    """Kubernetes feature gates for kube-apiserver, kube-scheduler and kube-controller-manager alike, e.g.
    ``{"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}`` (native gangs)."""
    runtime_config: tuple[str, ...] = ()
    """kube-apiserver ``--runtime-config`` entries, e.g. ``("scheduling.k8s.io/v1beta1=true",)``."""
    kueue: bool = False
    """Also run Kueue's manager (``--with-kueue``): CRDs, webhooks, ``kueue`` process."""
    kueue_feature_gates: dict[str, bool] = field(default_factory=dict)
    """Kueue feature gates (its Configuration's ``featureGates``), e.g.
    ``{"TopologyAwareScheduling": False}``; unset gates keep Kueue's defaults."""
    workload_controllers: tuple[str, ...] = ()
    """Workload controllers to run (``--with-jobset``, ``--with-lws``, ``--with-trainer``): names
    of ``workloads.CONTROLLERS``; Trainer brings JobSet."""
    gpus_as_dra: bool = False
    """Publish the nodes' GPUs as DRA devices (ResourceSlices), not allocatable (``dra.py``)."""
    steer_lone_pods: bool = False
    """Lone GPU pods reach railyard too (``--steer-lone-pods``; ``config.steer_lone_pods``)."""
    replicas: int = 1
    """kube-scheduler + railyard pairs (``--replicas``): above 1, the schedulers elect a leader
    on a Lease (``config.LEADER_LEASE``), each pair on its own ports, as the manifests run them."""
    extender_settings: dict[str, Any] = field(default_factory=dict)
    """railyard settings by dotted name, for every railyard (``--extender-set NAME=VALUE``)."""


@dataclass(frozen=True)
class ClusterInfo:
    """A running cluster, as ``up`` returns it and ``cluster.json`` records it."""

    workdir: Path
    kubeconfig: Path
    api_url: str
    ports: config.Ports
    extender_url: str | None
    nodes: int
    seconds: float = 0.0
    pids: dict[str, int] = field(default_factory=dict)
    kueue: dict[str, Any] | None = None
    """What runs of Kueue (version, URLs, feature gates), as ``cluster.json`` records it."""
    workload_controllers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The workload controllers that run (version, URLs), by name."""


KWOK_STARTUP_RACE = "fatal error: concurrent map writes"
"""How kwok v0.7.0 dies when its node and pod controllers build their first CEL environments at
once: easycel v0.6.0 caches types in a map without a lock (``types.go`` ``getTrait``, called from
kwok's ``pkg/utils/cel/environment.go`` ``NewEnvironment``). Seen once in a CI run's ~60 cluster
starts; kwok started again comes up."""


def _say(log: TextIO, message: str) -> None:
    print(f"railyard: {message}", file=log, flush=True)


# --------------------------------------------------------------------------- up

def up(options: UpOptions, log: TextIO = sys.stderr) -> ClusterInfo:
    """Start a cluster in ``options.workdir`` and return once every part is healthy."""
    started = time.monotonic()
    workdir = Path(options.workdir).resolve()
    check_workdir(workdir)
    node_set = resolve_nodes(options)
    custom_config = _read_scheduler_config(options.scheduler_config)
    if options.extender:
        check_extender_available()
    if options.apiserver_port and processes.port_in_use(options.apiserver_port):
        raise ClusterError(f"port {options.apiserver_port} on 127.0.0.1 is in use; pick another --apiserver-port or 0")
    if options.replicas < 1:
        raise ClusterError(f"--replicas must be 1 or more, got {options.replicas}")
    if options.extender_settings and not options.extender:
        raise ClusterError("railyard settings were given with --no-extender")
    try:
        config.extender_settings(options.extender_settings)
    except ValueError as exc:
        raise ClusterError(str(exc)) from None
    if options.kueue_feature_gates and not options.kueue:
        raise ClusterError("Kueue feature gates were given without --with-kueue")
    problems = kueue_mod.gate_problems(options.kueue_feature_gates) if options.kueue else []
    if problems:
        raise ClusterError("; ".join(problems))
    wanted = workloads.resolve(options.workload_controllers)
    if wanted and not options.controllers:
        raise ClusterError(f"--with-{wanted[0]} needs kube-controller-manager (its Jobs and StatefulSets have "
                           "no pods without it); drop --no-controllers")
    bins = options.binaries or binaries_mod.ensure(
        log=log, with_kueue=options.kueue, kubernetes_version=options.kubernetes_version,
        controllers=options.controllers, workload_controllers=wanted)
    if options.controllers and bins.kube_controller_manager is None:
        raise ClusterError("the binaries given have no kube-controller-manager; build it "
                           "(`railyard cluster build`) or run with --no-controllers")
    kueue_sources = _kueue_sources(bins) if options.kueue else None
    controller_sources = workloads.load_sources(wanted, bins)

    try:
        workdir.mkdir(parents=True, exist_ok=True)
        for stale in ("etcd", "pki", "cluster.json", "kubeconfig"):
            _remove(workdir / stale)
    except OSError as exc:
        raise ClusterError(f"cannot use workdir {workdir}: {exc.strerror or exc}") from exc
    try:
        info = _start_all(workdir, options, node_set, custom_config, bins, kueue_sources, controller_sources,
                          log, started)
    except BaseException as exc:
        _say(log, "start failed; stopping what was started")
        down(workdir, log=log, quiet=True)
        if isinstance(exc, ClusterError) or not isinstance(exc, Exception):  # Ctrl-C, SIGTERM
            raise
        raise ClusterError(f"cluster up failed: {type(exc).__name__}: {exc}") from exc
    return info


def _start_all(
    workdir: Path,
    options: UpOptions,
    node_set: nodes_mod.NodeSet,
    custom_config: dict[str, Any] | None,
    bins: binaries_mod.Binaries,
    kueue_sources: kustomize.Sources | None,
    controller_sources: dict[str, kustomize.Sources],
    log: TextIO,
    started: float,
) -> ClusterInfo:
    ports, replicas = _pick_ports(options.apiserver_port, kueue=kueue_sources is not None, replicas=options.replicas,
                                  controllers=options.controllers, view=options.extender)
    pki = pki_mod.generate(workdir / "pki", service_ip=config.SERVICE_IP)
    api_url = f"https://{config.HOST}:{ports.apiserver}"
    kubeconfig_file = workdir / "kubeconfig"
    kubeconfig_file.write_text(config.dump_yaml(config.kubeconfig(pki, api_url)))
    kubeconfig_file.chmod(0o600)
    ext_url = config.extender_url(ports) if options.extender else None
    controllers = _controllers_state(ports, options.feature_gates) if options.controllers else None
    _write_state(workdir, ports, kubeconfig_file, api_url, ext_url, len(node_set.nodes), "starting",
                 replicas=replicas, kubernetes=bins.kubernetes_version, controllers=controllers)

    env = processes.clean_env()
    timeout = options.timeout
    api_extra, kube_extra = config.feature_flags(options.feature_gates, options.runtime_config)

    _say(log, f"starting etcd on 127.0.0.1:{ports.etcd_client}")
    etcd = processes.start(workdir, "etcd", config.etcd_args(bins.etcd, workdir / "etcd", ports), env)
    wait_healthy(workdir, etcd, lambda: http_ok(f"http://{config.HOST}:{ports.etcd_client}/health"), timeout)

    _say(log, f"starting kube-apiserver on {api_url}")
    apiserver = processes.start(
        workdir, "kube-apiserver", config.apiserver_args(bins.kube_apiserver, pki, ports, workdir / "pki") + api_extra, env)
    api = ApiClient(api_url, pki)
    wait_healthy(workdir, apiserver, lambda: api.ok("/readyz"), timeout)

    _say(log, f"creating {len(node_set.nodes)} nodes" + (", their GPUs as DRA devices" if options.gpus_as_dra else ""))
    if ext_url is not None:
        node_set = admission.advertised(node_set)
    if options.gpus_as_dra:
        create_dra(api, node_set)
    else:
        create_nodes(api, node_set, log)

    stages_file = workdir / "kwok-stages.yaml"
    stages_file.write_text(config.kwok_stages_text())
    _say(log, "starting kwok")
    kwok = processes.start(workdir, "kwok", config.kwok_args(bins.kwok, kubeconfig_file, stages_file, ports), env)
    kwok = wait_healthy_or_restart(workdir, kwok, lambda: http_ok(f"http://{config.HOST}:{ports.kwok}/healthz"),
                                   timeout, KWOK_STARTUP_RACE, lambda message: _say(log, message), env)

    ha = len(replicas) > 1
    for replica in replicas:
        rendered = config.render_scheduler_config(
            custom_config, kubeconfig_file, config.extender_base(replica.ports) if options.extender else None)
        if options.steer_lone_pods:
            rendered = config.steer_lone_pods(rendered, str(options.extender_settings.get("placement.gpu_resource", dra.GPU)))
        (workdir / replica.config_name).write_text(config.dump_yaml(config.leader_election(rendered) if ha else rendered))

    if ext_url is not None:
        _say(log, "installing the admission policy that marks and gates gang members")
        admission.install(api, rendered, str(options.extender_settings.get("placement.gpu_resource", dra.GPU)), timeout)
        # Not admin: the ServiceAccount and RBAC from manifests/, so e2e tests prove them enough.
        extender_kubeconfig = workdir / "extender.kubeconfig"
        user = identity.create_extender_identity(api, pki.ca_cert, api_url, extender_kubeconfig)
        chosen = {**dra.EXTENDER_SETTINGS, **options.extender_settings} if options.gpus_as_dra else options.extender_settings
        settings_file = workdir / "railyard-settings.yaml" if chosen else None
        if settings_file is not None:
            settings_file.write_text(config.dump_yaml(config.extender_settings(chosen)))
        for replica in replicas:
            p = replica.ports
            _say(log, f"starting the railyard extender {replica.extender_name} on 127.0.0.1:{p.extender} as {user}; "
                      f"topology view {config.view_url(p)}")
            extender = processes.start(
                workdir, replica.extender_name,
                config.extender_args(extender_kubeconfig, workdir / replica.config_name, p,
                                     settings_file=settings_file), env)
            wait_healthy(workdir, extender, lambda: http_ok(f"http://{config.HOST}:{p.extender}/readyz"), timeout)
    for replica in replicas:
        p = replica.ports
        _say(log, f"starting {replica.scheduler_name}" + (" (extender on)" if ext_url else " (no extender)")
             + (f", leader election on Lease {'/'.join(config.LEADER_LEASE)}" if ha else ""))
        scheduler = processes.start(
            workdir, replica.scheduler_name,
            config.scheduler_args(bins.kube_scheduler, workdir / replica.config_name, kubeconfig_file, p,
                                  leader_elect=ha) + kube_extra, env)
        wait_healthy(
            workdir, scheduler,
            lambda: http_ok(f"https://{config.HOST}:{p.scheduler}/readyz", insecure=True), timeout)

    if controllers is not None:
        assert bins.kube_controller_manager is not None
        _say(log, f"starting kube-controller-manager: {', '.join(config.CONTROLLERS)}")
        manager = processes.start(
            workdir, "kube-controller-manager",
            config.controller_manager_args(bins.kube_controller_manager, kubeconfig_file, ports) + kube_extra, env)
        health = f"https://{config.HOST}:{ports.controller_manager}/healthz?verbose"
        wait_healthy(workdir, manager, lambda: config.CONTROLLER_MANAGER_READY in (http_text(health, insecure=True) or ""),
                     timeout)

    kueue_state = None
    if kueue_sources is not None:
        assert bins.kueue is not None
        kueue_state = _start_kueue(workdir, api, pki, ports, bins.kueue, kueue_sources, kubeconfig_file,
                                   options.kueue_feature_gates, env, log, timeout)
    workload_state = workloads.start(workdir, api, pki, bins, controller_sources, kubeconfig_file,
                                        [p for r in replicas for p in r.ports.as_dict().values()], env, log, timeout)

    missing = api.missing_nodes(node_set.names)
    if missing:
        raise ClusterError(f"{len(missing)} nodes are missing after creation, e.g. {missing[0]}")
    seconds = time.monotonic() - started
    _write_state(workdir, ports, kubeconfig_file, api_url, ext_url, len(node_set.nodes), "running", kueue_state,
                 replicas=replicas, kubernetes=bins.kubernetes_version, controllers=controllers,
                 workload_controllers=workload_state)
    _say(log, f"cluster ready in {seconds:.0f}s: {len(node_set.nodes)} nodes; "
              f"export KUBECONFIG={kubeconfig_file}")
    return ClusterInfo(
        workdir=workdir, kubeconfig=kubeconfig_file, api_url=api_url, ports=ports,
        extender_url=ext_url, nodes=len(node_set.nodes), seconds=seconds,
        pids={p.name: p.pid for p in processes.recorded(workdir)}, kueue=kueue_state,
        workload_controllers=workload_state,
    )


def _controllers_state(ports: config.Ports, feature_gates: dict[str, bool]) -> dict[str, Any]:
    """What ``cluster.json`` records of kube-controller-manager."""
    return {"controllers": list(config.CONTROLLERS),
            "health": f"https://{config.HOST}:{ports.controller_manager}/healthz",
            "featureGates": dict(feature_gates)}


def _kueue_sources(bins: binaries_mod.Binaries) -> kustomize.Sources:
    """Kueue's CRDs and webhook configurations from its module, and its metrics cert: checked
    before anything starts."""
    if bins.kueue is None:
        raise ClusterError("--with-kueue needs the Kueue binary; the binaries given have none")
    sources = kueue_mod.load_sources(binaries_mod.module_dir(binaries_mod.KUEUE))
    kueue_mod.ensure_metrics_cert()
    return sources


def _start_kueue(
    workdir: Path,
    api: ApiClient,
    pki: pki_mod.Pki,
    ports: config.Ports,
    binary: Path,
    sources: kustomize.Sources,
    kubeconfig_file: Path,
    feature_gates: dict[str, bool],
    env: dict[str, str],
    log: TextIO,
    timeout: float,
) -> dict[str, Any]:
    """Install and run Kueue (``managers.py``); return its state."""
    version = binaries_mod.KUEUE.version()
    cert_dir, config_file = workdir / "kueue" / "certs", workdir / "kueue-config.yaml"
    managers.start(workdir, api, pki, managers.Manager(
        name="kueue", title=f"Kueue {version}", sources=sources, webhook_port=ports.kueue_webhook,
        health_port=ports.kueue_health, cert_dir=cert_dir, config_file=config_file,
        config=kueue_mod.manager_config(ports, cert_dir, feature_gates),
        argv=kueue_mod.manager_args(binary, config_file, kubeconfig_file), env=env,
        probe=kueue_mod.gates_pods, namespace=kueue_mod.NAMESPACE), log, timeout)
    gates = kueue_mod.effective_gates(feature_gates)
    return {
        "version": version,
        "webhooks": kueue_mod.webhook_base(ports),
        "health": f"http://{config.HOST}:{ports.kueue_health}",
        "metrics": f"https://{config.HOST}:{ports.kueue_metrics}/metrics",
        "frameworks": list(kueue_mod.FRAMEWORKS),
        "featureGates": gates,
        "topologyAwareScheduling": kueue_mod.tas_enabled(gates),
    }


def check_workdir(workdir: Path) -> None:
    """Refuse a workdir that holds a running cluster or the pid files of a crashed one."""
    recorded = processes.recorded(workdir)
    if not recorded:
        return
    alive = [p.name for p in recorded if processes.is_alive(p)]
    if alive:
        raise ClusterError(
            f"a cluster is already running in {workdir} ({', '.join(alive)}); "
            f"run `railyard cluster down --workdir {workdir}` first or use another --workdir")
    raise ClusterError(
        f"{workdir} is left over from a crashed run (pid files of {', '.join(p.name for p in recorded)}, "
        f"no process); run `railyard cluster down --workdir {workdir}` to clean it up")


def resolve_nodes(options: UpOptions) -> nodes_mod.NodeSet:
    if options.node_set is not None:
        return options.node_set
    if options.nodes_file is not None and options.topology is not None:
        raise ClusterError("give --nodes or --topology, not both")
    if options.nodes_file is not None:
        return nodes_mod.load_node_list(options.nodes_file)
    if options.topology is not None:
        return nodes_mod.load_topology(options.topology)
    return nodes_mod.load_topology(nodes_mod.DEFAULT_TOPOLOGY)


def check_extender_available() -> None:
    """The extender is ``railyard serve``; fail early if this checkout does not have it."""
    if importlib.util.find_spec("extender.commands.serve") is None:
        raise ClusterError(
            "the railyard extender is not available yet (extender/commands/serve.py is missing); "
            "run `railyard cluster up --no-extender` for a plain kube-scheduler")


def _read_scheduler_config(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ClusterError(f"cannot read scheduler config {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ClusterError(f"scheduler config {path} is not YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(doc, dict) or doc.get("kind") != "KubeSchedulerConfiguration":
        raise ClusterError(f"scheduler config {path} is not a KubeSchedulerConfiguration")
    return doc


def _pick_ports(apiserver_port: int, kueue: bool = False, replicas: int = 1,
                controllers: bool = True, view: bool = True) -> tuple[config.Ports, list[config.Replica]]:
    picked: set[int] = set()

    def fresh() -> int:
        while True:
            port = processes.free_port()
            if port not in picked:
                picked.add(port)
                return port

    ports = config.Ports(
        etcd_client=fresh(), etcd_peer=fresh(), apiserver=apiserver_port or fresh(),
        scheduler=fresh(), kwok=fresh(), extender=fresh(), extender_grpc=fresh(), extender_view=fresh() if view else 0,
        **({"kueue_webhook": fresh(), "kueue_health": fresh(), "kueue_metrics": fresh()} if kueue else {}),
        **({"controller_manager": fresh()} if controllers else {}),
    )
    more = [config.Replica(i, dataclasses.replace(ports, scheduler=fresh(), extender=fresh(), extender_grpc=fresh(),
                                                  extender_view=fresh() if view else 0))
            for i in range(2, replicas + 1)]
    return ports, [config.Replica(1, ports), *more]


def _write_state(workdir: Path, ports: config.Ports, kubeconfig_file: Path, api_url: str,
                 ext_url: str | None, nodes: int, phase: str, kueue: dict[str, Any] | None = None,
                 replicas: Sequence[config.Replica] = (), kubernetes: str = "",
                 controllers: dict[str, Any] | None = None,
                 workload_controllers: dict[str, dict[str, Any]] | None = None) -> None:
    state = {
        "phase": phase, "kubeconfig": str(kubeconfig_file), "apiServer": api_url,
        "kubernetes": kubernetes, "extender": ext_url, "view": config.view_url(ports) if ext_url else None,
        "nodes": nodes, "ports": ports.as_dict(),
        "replicas": [r.as_dict(extender=ext_url is not None) for r in replicas],
        "controllerManager": controllers,
    }
    if len(replicas) > 1:
        state["leaderLease"] = "/".join(config.LEADER_LEASE)
    if kueue is not None:
        state["kueue"] = kueue
    if workload_controllers:
        state["workloadControllers"] = workload_controllers
    (workdir / "cluster.json").write_text(json.dumps(state, indent=2) + "\n")


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def create_nodes(api: ApiClient, node_set: nodes_mod.NodeSet, log: TextIO) -> None:
    """Create every node (concurrently), then one filler pod per node with GPUs in use; the
    count on ``log`` at a terminal."""
    fillers = [nodes_mod.filler_pod(n, g) for n, g in sorted(node_set.used_gpus.items())]
    with ThreadPoolExecutor(CREATE_PARALLELISM) as pool, \
            Progress(log, "nodes and filler pods created", len(node_set.nodes) + len(fillers)) as progress:
        for _ in pool.map(lambda n: api.create("/api/v1/nodes", n), node_set.nodes):
            progress.step()
        if fillers:
            api.create("/api/v1/namespaces", {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": nodes_mod.FILL_NAMESPACE}})
            path = f"/api/v1/namespaces/{nodes_mod.FILL_NAMESPACE}/pods"
            for _ in pool.map(lambda p: api.create(path, p), fillers):
                progress.step()


def create_dra(api: ApiClient, node_set: nodes_mod.NodeSet) -> None:
    """``--gpus-as-dra``: the GPU DeviceClass, the nodes without allocatable GPUs, a
    ResourceSlice per GPU node, and an allocated claim per node with GPUs in use."""
    objects = dra.as_dra(node_set)
    api.create(f"{dra.API}/deviceclasses", dra.DEVICE_CLASS)
    with ThreadPoolExecutor(CREATE_PARALLELISM) as pool:
        list(pool.map(lambda n: api.create("/api/v1/nodes", n), objects.nodes))
        list(pool.map(lambda s: api.create(f"{dra.API}/resourceslices", s), objects.slices))
        if objects.claims:
            api.create("/api/v1/namespaces", {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": nodes_mod.FILL_NAMESPACE}})
        path = f"{dra.API}/namespaces/{nodes_mod.FILL_NAMESPACE}/resourceclaims"
        list(pool.map(lambda c: api.create(path, c[0]), objects.claims))
        for claim, status in objects.claims:
            code, data = api.request("PATCH", f"{path}/{claim['metadata']['name']}/status", status,
                                     content_type="application/merge-patch+json")
            if code != 200:
                raise ClusterError(f"allocating ResourceClaim {claim['metadata']['name']} failed: "
                                   f"HTTP {code}: {api_message(data)}")


# ------------------------------------------------------------------ down/status

def down(workdir: Path, log: TextIO = sys.stderr, quiet: bool = False) -> list[str]:
    """Stop every process recorded in ``workdir`` (by PID), scheduler first; return their names.

    Works on whatever a crashed ``up`` left: only pid files are needed. The logs stay for
    reading; etcd's data and the state file go, so the next ``up`` starts clean.
    """
    workdir = Path(workdir).resolve()
    recorded = {p.name: p for p in processes.recorded(workdir)}
    # Clients of the API server first (together: each takes a second or more to exit), then
    # the API server, then etcd; anything unknown (a pid file from a newer version) with them.
    clients = [n for n in recorded if n not in ("kube-apiserver", "etcd")]
    waves = [clients, ["kube-apiserver"], ["etcd"]]
    stopped = []

    def stop(name: str) -> None:
        proc = recorded[name]
        was_alive = processes.is_alive(proc)
        processes.stop(workdir, proc)
        if was_alive:
            stopped.append(name)
            if not quiet:
                _say(log, f"stopped {name} (pid {proc.pid})")

    for wave in waves:
        names = [n for n in wave if n in recorded]
        with ThreadPoolExecutor(max(1, len(names))) as pool:
            list(pool.map(stop, names))
    for leftover in ("etcd", "cluster.json"):
        _remove(workdir / leftover)
    return stopped


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int
    running: bool


def status(workdir: Path) -> tuple[list[ComponentStatus], dict[str, Any] | None]:
    """Each recorded process and whether it runs, plus the state ``up`` wrote (if any)."""
    workdir = Path(workdir).resolve()
    procs = [ComponentStatus(p.name, p.pid, processes.is_alive(p)) for p in processes.recorded(workdir)]
    order = {name: i for i, name in enumerate(reversed(COMPONENTS))}
    procs.sort(key=lambda c: order.get(c.name, len(order)))
    try:
        state = json.loads((workdir / "cluster.json").read_text())
    except (OSError, ValueError):
        state = None
    return procs, state
