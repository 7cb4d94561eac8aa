"""``railyard demo``: the main job on an embedded default.

Starts a local cluster (etcd, kube-apiserver, kube-scheduler, kwok, railyard) with a few hundred
simulated GPU nodes, submits a mix of gangs and single GPU pods through the real API, watches the
real kube-scheduler place them through railyard, and prints a short report: each gang bound all at
once or why not, where it landed, how long it took. Tears the cluster down unless ``--keep``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_TOPOLOGY = "blocks=2 racks=8 nvl=2 nodes=8 gpus=8 scheme=topograph"
"""256 nodes x 8 GPUs: 2 spine blocks x 8 leaves x 2 NVLink domains of 8 nodes."""
NAMESPACE = "demo"


@dataclass(frozen=True)
class GangOrder:
    name: str
    pods: int
    gpus: int
    required: str | None = None
    preferred: str | None = None
    note: str = ""


WORKLOAD = (
    GangOrder("llama", 8, 8, required="nvlink", note="fills one NVLink domain exactly"),
    GangOrder("mixtral", 16, 8, preferred="leaf", note="one leaf (rack) of 2 NVLink domains"),
    GangOrder("gpt", 32, 8, note="no request: as tight as it fits"),
    GangOrder("bert", 4, 4, required="nvlink", note="4 x 4 GPUs"),
    GangOrder("giant", 12, 8, required="nvlink", note="no NVLink domain has 12 nodes: must wait whole"),
)
SINGLES = (1, 2, 4, 8, 1, 2, 4, 1, 2, 1, 1, 2, 4, 8, 1, 2)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="local GPU cluster + railyard + sample gangs, then a short report",
                       description=__doc__.splitlines()[0])
    p.add_argument("--topology", default=DEFAULT_TOPOLOGY, help=f"drawing file or generator line (default: {DEFAULT_TOPOLOGY!r})")
    p.add_argument("--workdir", type=Path, default=Path(".railyard/demo"), help="cluster state and logs")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for placements")
    p.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from extender.localcluster import cluster, config
    from extender.localcluster.errors import ClusterError

    try:
        info = cluster.up(cluster.UpOptions(workdir=args.workdir, topology=args.topology))
    except ClusterError as exc:
        print(f"railyard demo: {exc}", file=sys.stderr)
        return 1
    view = config.view_url(info.ports)
    print(f"railyard demo: the live topology view is at {view}", file=sys.stderr)
    try:
        return _run_workload(info.kubeconfig, args.timeout)
    finally:
        print(f"\ntopology view: {view} while the cluster runs{'' if args.keep else ' (--keep leaves it up)'}; "
              "what it shows: docs/view.md, a picture of it: docs/img/view.png")
        if args.keep:
            print(f"\ncluster kept: export KUBECONFIG={info.kubeconfig}; "
                  f"`railyard cluster down --workdir {args.workdir}` stops it")
        else:
            cluster.down(info.workdir, quiet=True)


def _run_workload(kubeconfig: Path, timeout: float) -> int:
    import kubernetes

    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=config)
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))
    try:
        api.create_namespace({"apiVersion": "v1", "kind": "Namespace",  # type: ignore[arg-type]  # sent as is
                              "metadata": {"name": NAMESPACE}})
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
    nodes = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in _items(api.list_node)}

    pods = []
    # Members of different gangs arrive interleaved, as controllers create them.
    for i in range(max(g.pods for g in WORKLOAD)):
        for g in WORKLOAD:
            if i < g.pods:
                pods.append(_gang_pod(g, i))
        if i < len(SINGLES):
            pods.append(_pod(f"single-{i}", SINGLES[i], {}, {}))
    created = {}
    for body in pods:
        api.create_namespaced_pod(NAMESPACE, body)  # type: ignore[arg-type]  # a dict is sent as it is
        created[body["metadata"]["name"]] = time.monotonic()
    print(f"railyard demo: created {len(WORKLOAD)} gangs ({sum(g.pods for g in WORKLOAD)} pods) and "
          f"{len(SINGLES)} single GPU pods on {len(nodes)} nodes", file=sys.stderr)

    bound_at: dict[str, float] = {}
    node_of: dict[str, str] = {}
    expected = {f"{g.name}-{i}" for g in WORKLOAD if g.name != "giant" for i in range(g.pods)}
    expected |= {f"single-{i}" for i in range(len(SINGLES))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not expected <= bound_at.keys():
        for pod in _items(lambda **kw: api.list_namespaced_pod(NAMESPACE, **kw)):
            name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
            if node and name not in bound_at:
                bound_at[name], node_of[name] = time.monotonic(), node
        time.sleep(0.2)
    messages = {p["metadata"]["name"]: _unschedulable_message(p)
                for p in _items(lambda **kw: api.list_namespaced_pod(NAMESPACE, **kw))}
    ok = _report(nodes, created, bound_at, node_of, messages)
    return 0 if ok else 1


def _report(nodes: dict[str, dict[str, str]], created: dict[str, float], bound_at: dict[str, float],
            node_of: dict[str, str], messages: dict[str, str]) -> bool:
    from extender.adapters import kubeobjects as ko
    from extender.core.model import NodeFacts

    levels = ko.detect_levels([NodeFacts(name, labels) for name, labels in nodes.items()]).levels
    ok = True
    print("\ngang      pods  result                     landed in                              time to bind  bind spread")
    for g in WORKLOAD:
        names = [f"{g.name}-{i}" for i in range(g.pods)]
        bound = [n for n in names if n in bound_at]
        if len(bound) == len(names):
            spread = max(bound_at[n] for n in names) - min(bound_at[n] for n in names)
            ttb = max(bound_at[n] for n in names) - min(created[n] for n in names)
            where = _landed(levels, [nodes[node_of[n]] for n in names])
            result = "bound all at once" if spread < 2.0 else f"bound over {spread:.1f}s"
            print(f"{g.name:9s} {len(names):4d}  {result:26s} {where:38s} {ttb:9.1f} s  {spread:8.2f} s")
            ok &= spread < 2.0
        elif not bound:
            print(f"{g.name:9s} {len(names):4d}  none bound (waits whole)   -")
            print(f"          why: {messages.get(names[0]) or 'no reason recorded yet'}")
            ok &= g.name == "giant"
        else:
            print(f"{g.name:9s} {len(names):4d}  PARTIAL: {len(bound)}/{len(names)} bound")
            ok = False
    singles = [f"single-{i}" for i in range(len(SINGLES))]
    placed = [n for n in singles if n in bound_at]
    print(f"\nsingle GPU pods: {len(placed)}/{len(singles)} bound "
          f"(median {sorted(bound_at[n] - created[n] for n in placed)[len(placed) // 2] if placed else 0:.1f} s after creation)")
    ok &= len(placed) == len(singles)
    print("\n" + ("demo OK: every gang bound whole or waited whole" if ok else "demo FAILED: see above"))
    return ok


def _landed(levels: Any, labels: list[dict[str, str]]) -> str:
    """The narrowest level all nodes share, and how many nodes were used."""
    hosts = {lab.get("kubernetes.io/hostname") for lab in labels}
    if len(hosts) == 1:
        return f"1 node ({hosts.pop()})"
    shared, path = "no shared domain", []
    for lvl in levels:
        values = {lvl.value(lab) for lab in labels}
        if len(values) != 1 or None in values:
            break
        path.append(values.pop())
        shared = f"one {lvl.name or lvl.key} ({'/'.join(path)})"
    return f"{shared}, {len(hosts)} nodes"


def _gang_pod(g: GangOrder, index: int) -> dict[str, Any]:
    annotations = {"railyard.io/min-member": str(g.pods), "railyard.io/sim-runtime": "600s"}
    if g.required:
        annotations["railyard.io/required-topology"] = g.required
    if g.preferred:
        annotations["railyard.io/preferred-topology"] = g.preferred
    labels = {"scheduling.x-k8s.io/pod-group": g.name, "batch.kubernetes.io/job-completion-index": str(index)}
    return _pod(f"{g.name}-{index}", g.gpus, labels, annotations)


def _pod(name: str, gpus: int, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    annotations = {"railyard.io/sim-runtime": "600s", **annotations}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "containers": [{"name": "main", "image": "trainer",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def _unschedulable_message(pod: dict[str, Any]) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond.get("message") or ""
    return ""


def _items(list_call) -> list[dict[str, Any]]:
    """List through the client without building its model objects."""
    import json

    resp = list_call(_preload_content=False)
    return json.loads(resp.data)["items"]
