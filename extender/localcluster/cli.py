"""``railyard cluster up | down | status | restart-extender | leader | restart-replica | build``: the local GPU cluster from the shell.

``up`` prints the admin kubeconfig path alone on stdout (scripts read it); everything else,
progress included, goes to stderr. Every failure is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import yaml

from extender.localcluster import binaries, cluster, replicas, workloads
from extender.localcluster.errors import ClusterError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="run a local control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok; "
             "optionally Kueue, JobSet, LeaderWorkerSet, Kubeflow Trainer) with fake GPU nodes",
        description="A real local control plane on 127.0.0.1 with kwok GPU nodes. See docs/local-cluster.md.",
    )
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")

    up = sub.add_parser("up", help="start a cluster and wait until every part is healthy")
    _workdir(up)
    source = up.add_mutually_exclusive_group()
    source.add_argument("--nodes", type=Path, metavar="FILE",
                        help="a Kubernetes NodeList (JSON or YAML), created as given")
    source.add_argument("--topology", metavar="FILE|SPEC",
                        help="a text topology file or generator line (default: "
                             f"{cluster.nodes_mod.DEFAULT_TOPOLOGY!r})")
    up.add_argument("--scheduler-config", type=Path, metavar="FILE",
                    help="a KubeSchedulerConfiguration to run instead of the generated one")
    up.add_argument("--no-extender", dest="extender", action="store_false",
                    help="run a plain kube-scheduler without the railyard extender")
    up.add_argument("--no-controllers", dest="controllers", action="store_false",
                    help="run no kube-controller-manager (nothing creates the pods of Jobs or StatefulSets, "
                         "nothing garbage-collects)")
    _kubernetes_version(up, "kube-apiserver, kube-scheduler and kube-controller-manager of this pinned "
                            "Kubernetes version, built on first use")
    up.add_argument("--apiserver-port", type=_port, default=0, metavar="PORT",
                    help="API server port on 127.0.0.1 (default: a free one)")
    up.add_argument("--feature-gates", type=_gates, default={}, metavar="NAME=BOOL,...",
                    help="Kubernetes feature gates for kube-apiserver, kube-scheduler and kube-controller-manager, "
                         "e.g. GenericWorkload=true,TopologyAwareWorkloadScheduling=true")
    up.add_argument("--runtime-config", type=lambda t: tuple(x for x in t.split(",") if x), default=(),
                    metavar="GROUP/VERSION=BOOL,...",
                    help="kube-apiserver --runtime-config, e.g. scheduling.k8s.io/v1beta1=true")
    up.add_argument("--gpus-as-dra", action="store_true",
                    help="publish the nodes' nvidia.com/gpu as DRA devices: NVIDIA's gpu.nvidia.com DeviceClass "
                         "(extendedResourceName nvidia.com/gpu), one ResourceSlice per node, no GPUs in "
                         "allocatable (docs/dra.md)")
    up.add_argument("--steer-lone-pods", action="store_true",
                    help="lone GPU pods reach railyard too (its filter, preemption veto and bind), at their "
                         "scheduling speed: the GPU resource beside the gang marker in managedResources "
                         "(docs/reference.md, \"Steering lone GPU pods\")")
    up.add_argument("--with-kueue", dest="kueue", action="store_true",
                    help="also run Kueue's manager (tools/kueue): its CRDs, webhooks on 127.0.0.1, "
                         "integrations pod and batch/job")
    up.add_argument("--kueue-feature-gates", type=_gates, default={}, metavar="NAME=BOOL,...",
                    help="Kueue feature gates, e.g. TopologyAwareScheduling=false (TAS is on by default)")
    _with_controllers(up, "also run")
    up.add_argument("--replicas", type=int, default=1, metavar="N",
                    help="kube-scheduler + railyard pairs (default 1); above 1 the schedulers elect a "
                         "leader on a Lease in kube-system, as the manifests' two replicas do")
    up.add_argument("--extender-set", dest="extender_settings", type=_setting, action="append", default=[],
                    metavar="NAME=VALUE",
                    help="a railyard setting for every extender of the cluster, e.g. "
                         "gangs.binding_pause_seconds=2 (repeatable; VALUE is read as YAML)")
    up.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS",
                    help="how long each component may take to become healthy (default: 180)")
    up.set_defaults(func=run_up)

    down = sub.add_parser("down", help="stop every process `up` started in the workdir")
    _workdir(down)
    down.set_defaults(func=run_down)

    status = sub.add_parser("status", help="say what runs (exit 0 only if every component runs)")
    _workdir(status)
    status.set_defaults(func=run_status)

    restart = sub.add_parser("restart-extender",
                             help="stop the extender if it runs and start it again on the same port")
    _workdir(restart)
    restart.add_argument("--replica", type=int, default=1, metavar="N", help="which replica's extender (default 1)")
    restart.set_defaults(func=run_restart_extender)

    leader = sub.add_parser("leader", help="print the replica whose kube-scheduler leads (with --replicas)")
    _workdir(leader)
    leader.add_argument("--kill", action="store_true",
                        help="SIGKILL the leading kube-scheduler and its railyard (a failover test)")
    leader.set_defaults(func=run_leader)

    replica = sub.add_parser("restart-replica",
                             help="start a replica's railyard and kube-scheduler again (after `leader --kill`)")
    _workdir(replica)
    replica.add_argument("replica", type=int, metavar="N")
    replica.set_defaults(func=run_restart_replica)

    build = sub.add_parser("build", help="build or reuse the control-plane binaries, print their directory")
    build.add_argument("--with-kueue", action="store_true",
                       help="also build Kueue's manager (tools/kueue; optional, only `up --with-kueue` runs it)")
    _kubernetes_version(build, "build this pinned Kubernetes version instead (repeatable)", repeat=True)
    build.add_argument("--with-helm", action="store_true",
                       help="also build helm (tools/helm; optional, for the chart's tests in tests/manifests and tests/e2e)")
    _with_controllers(build, "also build")
    build.set_defaults(func=run_build)


def _kubernetes_version(parser: argparse.ArgumentParser, text: str, repeat: bool = False) -> None:
    parser.add_argument("--kubernetes-version", dest="kubernetes_versions" if repeat else "kubernetes_version",
                        action="append" if repeat else "store", default=[] if repeat else None, metavar="VERSION",
                        help=f"{text}, e.g. 1.38.0-beta.0 (pinned by tools/kube*/go.mod; `cluster build` "
                             "lists them; default: tools/kube's)")


def _with_controllers(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--with-jobset``, ``--with-lws``, ``--with-trainer`` (docs/local-cluster.md)."""
    for name, controller in workloads.CONTROLLERS.items():
        needs = "".join(f" and {workloads.CONTROLLERS[n].title}" for n in controller.needs)
        parser.add_argument(f"--with-{name}", dest="workload_controllers", action="append_const", const=name, default=[],
                            help=f"{verb} {controller.title}{needs} (tools/{controller.component.tool_dir}; "
                                 "its CRDs and webhooks on 127.0.0.1)")


def _workdir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", type=Path, default=cluster.DEFAULT_WORKDIR, metavar="DIR",
                        help=f"where pids, logs, PKI and the kubeconfig live (default: {cluster.DEFAULT_WORKDIR})")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range 0-65535: {port}")
    return port


def _gates(text: str) -> dict[str, bool]:
    gates = {}
    for item in filter(None, text.split(",")):
        name, sep, value = item.partition("=")
        if not sep or value.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"not NAME=true|false: {item!r}")
        gates[name] = value.lower() == "true"
    return gates


def _setting(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"not NAME=VALUE: {text!r}")
    try:
        return name, yaml.safe_load(value)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f"{name}: value {value!r} is not YAML") from None


def run_up(args: argparse.Namespace) -> int:
    options = cluster.UpOptions(
        workdir=args.workdir,
        nodes_file=args.nodes,
        topology=args.topology,
        scheduler_config=args.scheduler_config,
        extender=args.extender,
        controllers=args.controllers,
        kubernetes_version=args.kubernetes_version,
        apiserver_port=args.apiserver_port,
        timeout=args.timeout,
        feature_gates=args.feature_gates,
        runtime_config=args.runtime_config,
        kueue=args.kueue,
        kueue_feature_gates=args.kueue_feature_gates,
        workload_controllers=tuple(args.workload_controllers),
        replicas=args.replicas,
        extender_settings=dict(args.extender_settings),
        gpus_as_dra=args.gpus_as_dra,
        steer_lone_pods=args.steer_lone_pods,
    )
    # A polite kill of `up` must still stop what it started: turn SIGTERM into an exception.
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        info = cluster.up(options)
    except ClusterError as exc:
        return _fail(exc)
    except Terminated:
        print("railyard: terminated; stopped what was started", file=sys.stderr)
        return 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(info.kubeconfig, flush=True)
    return 0


def run_down(args: argparse.Namespace) -> int:
    stopped = cluster.down(args.workdir)
    if not stopped:
        print(f"railyard: nothing was running in {args.workdir.resolve()}", file=sys.stderr)
    return 0


def run_status(args: argparse.Namespace) -> int:
    procs, state = cluster.status(args.workdir)
    if not procs:
        print(f"no cluster in {args.workdir.resolve()}")
        return 1
    for proc in procs:
        print(f"{proc.name:15} {'running' if proc.running else 'NOT running':12} pid {proc.pid}")
    if state:
        print(f"api server      {state.get('apiServer')}  (Kubernetes {state.get('kubernetes') or '?'}, "
              f"{state.get('nodes')} nodes, {state.get('phase')})")
        print(f"extender        {state.get('extender') or 'off'}")
        print(f"topology view   {state.get('view') or 'off'}")
        manager = state.get("controllerManager")
        print(f"controllers     {', '.join(manager['controllers']) if manager else 'off (--no-controllers)'}")
        kueue = state.get("kueue")
        if kueue:
            tas = "on" if kueue.get("topologyAwareScheduling") else "off"
            print(f"kueue           {kueue.get('version')}  webhooks {kueue.get('webhooks')}, "
                  f"health {kueue.get('health')}, metrics {kueue.get('metrics')}, TAS {tas}")
        for name, controller in (state.get("workloadControllers") or {}).items():
            print(f"{name:15} {controller.get('version')}  webhooks {controller.get('webhooks')}, "
                  f"health {controller.get('health')}, metrics {controller.get('metrics')}")
        print(f"kubeconfig      {state.get('kubeconfig')}")
    return 0 if all(p.running for p in procs) else 1


def run_restart_extender(args: argparse.Namespace) -> int:
    try:
        (pid,) = replicas.restart(args.workdir, args.replica, ("extender",))
    except ClusterError as exc:
        return _fail(exc)
    print(pid, flush=True)
    return 0


def run_leader(args: argparse.Namespace) -> int:
    """Prints ``<index> <scheduler> <extender>`` of the leading replica (before a kill)."""
    try:
        lead = replicas.leader(args.workdir)
        if args.kill:
            replicas.kill(args.workdir, lead["index"])
    except ClusterError as exc:
        return _fail(exc)
    print(lead["index"], lead["scheduler"], lead["extender"], flush=True)
    return 0


def run_restart_replica(args: argparse.Namespace) -> int:
    try:
        replicas.restart(args.workdir, args.replica)
    except ClusterError as exc:
        return _fail(exc)
    return 0


def run_build(args: argparse.Namespace) -> int:
    try:
        wanted = workloads.resolve(args.workload_controllers)
        for version in args.kubernetes_versions or [None]:
            bins = binaries.ensure(with_kueue=args.with_kueue, kubernetes_version=version,
                                   workload_controllers=wanted)
        if args.with_helm:
            binaries.ensure_helm()
    except ClusterError as exc:
        return _fail(exc)
    for line in binaries.describe():
        print(line, file=sys.stderr)
    print(bins.kube_apiserver.parent.parent)
    return 0


class Terminated(BaseException):
    """SIGTERM during ``up`` (a BaseException, like KeyboardInterrupt, so no handler eats it)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def _fail(exc: Exception) -> int:
    print(f"railyard: {exc}", file=sys.stderr)
    return 1
