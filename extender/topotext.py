"""The text topology format shared by tests, benchmarks and ``railyard cluster up``.

A drawing, nesting by indentation, nodes after a colon::

    scheme topograph            # optional: which label keys the words become (default topograph)
    gpus 8                      # optional: GPUs per node when a node does not say (default 8)
    block b1
      rack r1
        nvl n1: h1 h2[2/8]      # h2 has 2 of 8 GPUs free (6 in use)
        nvl n2: h3[8/8 cordoned] h4[8/8 notready]
      rack r2: h5[8/8 taint=dedicated=infer:NoSchedule] h6[4 label=pool=a]

A ``scheme`` line at the left margin after some nodes starts another node pool labelled with
that scheme: a cluster of several fabrics (GB200 racks with Topograph v1 tiers beside GKE
nodes), each pool planned on its own tree.

Node flags inside brackets: ``FREE/TOTAL`` or ``TOTAL``, ``cordoned``, ``notready``,
``taint=KEY[=VALUE]:EFFECT``, ``label=KEY=VALUE``. A node drawn directly under a rack has no
NVLink label: that is how a drawing says "label missing".

Level words are positions, the same in every scheme: ``block`` is a drawing's first level,
``rack`` its second, ``nvl`` its third (a node drawn under ``rack`` has no ``nvl`` label). Each
scheme maps them to its own label keys, broadest first; its other levels take their own names,
and a word with a ``/`` is taken as a label key as is:

==============  ======================  ======================  ============================
scheme          block                   rack                    nvl (and other words)
==============  ======================  ======================  ============================
topograph       spine                   leaf                    accelerator; core
topograph-v0.1  spine                   block (its leaf tier)   accelerator; datacenter
topograph-v1    tier-1                  tier-0                  domain; subnvl, tier-N
gke             block                   subblock                host
eks             layer-1                 layer-2                 layer-3; layer-N
oci             rdma.hpc_island_id      rdma.network_block_id   rdma.local_block_id
oci-host        host.network_block_id   host.rack_id            -
clique          -                       ClusterUUID             nvidia.com/gpu.clique
X+clique        scheme X                scheme X                nvidia.com/gpu.clique
==============  ======================  ======================  ============================

The keys are the label presets' (``adapters/kubeobjects/labels.PRESETS``): each word names a
preset level by its short name. (``topograph`` keys are ``network.topology.nvidia.com/*`` of
Topograph v0.3-v0.5, ``topograph-v0.1`` the same prefix at v0.1.0, ``topograph-v1``
``fabric.topograph.run/tier-N`` and ``accelerator.topograph.run/*``, ``gke``
``cloud.google.com/gce-topology-*``, ``eks`` ``topology.k8s.aws/network-node-layer-*``, ``oci``
``oci.oraclecloud.com/*``.) With a clique, ``nvl`` is ``nvidia.com/gpu.clique = <rack
value>.<nvl value>``: the rack names the ClusterUUID.

A compact generator is one line of ``key=value`` words and expands to a drawing::

    blocks=2 racks=4 nvl=2 nodes=4 gpus=8 scheme=topograph

(``racks`` per block, ``nvl`` per rack, ``nodes`` per NVLink domain; rack and NVLink names repeat
across parents, as they often do in real clusters.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extender.adapters.kubeobjects.labels import CLIQUE, NUMBERED, level_key
from extender.settings import DEFAULT_GPU_RESOURCE as GPU_RESOURCE

_LEVELS: dict[str, dict[str, str]] = {
    # word -> the short name of the preset's level it becomes; block, rack and nvl are positions
    "topograph": {"block": "spine", "rack": "leaf", "nvl": "nvlink", "core": "core", "spine": "spine", "leaf": "leaf"},
    "topograph-v0.1": {"block": "spine", "rack": "block", "nvl": "nvlink", "datacenter": "datacenter",
                       "spine": "spine"},
    "topograph-v1": {"block": "tier-1", "rack": "tier-0", "nvl": "nvlink", "subnvl": "nvlink-sub"},
    "gke": {"block": "block", "rack": "subblock", "nvl": "gce-host", "subblock": "subblock", "host": "gce-host"},
    "eks": {"block": "layer-1", "rack": "layer-2", "nvl": "layer-3"},
    "oci": {"block": "hpc-island", "rack": "network-block", "nvl": "local-block"},
    "oci-host": {"block": "network-block", "rack": "rack"},
    "clique": {},
}

WORDS: dict[str, dict[str, str]] = {
    scheme: {word: level_key(scheme, name) for word, name in words.items()} for scheme, words in _LEVELS.items()}
"""Per scheme, each level word of a drawing -> the label key it becomes."""


class TopologyTextError(ValueError):
    """The drawing or generator line cannot be read; the message names the line."""


@dataclass(frozen=True)
class TopologySpec:
    nodes: list[dict[str, Any]]
    """Kubernetes Node objects."""
    used_gpus: dict[str, int] = field(default_factory=dict)
    """Node name -> GPUs already in use (the drawing's ``h4[2/8]`` means 6)."""
    text: str = ""

    def filler_pods(self, namespace: str = "railyard-fill") -> list[dict[str, Any]]:
        """Running pods that hold ``used_gpus``, one per node: the drawing's existing load."""
        return [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"fill-{node}", "namespace": namespace, "uid": f"fill-{node}",
                             "labels": {"app.kubernetes.io/part-of": "railyard-fill"}},
                "spec": {
                    "nodeName": node,
                    "containers": [{
                        "name": "fill",
                        "image": "fake",
                        "resources": {"requests": {GPU_RESOURCE: str(n)}, "limits": {GPU_RESOURCE: str(n)}},
                    }],
                    "tolerations": [{"operator": "Exists"}],
                },
                "status": {"phase": "Running"},
            }
            for node, n in sorted(self.used_gpus.items())
            if n > 0
        ]


def load(source: str | Path) -> TopologySpec:
    """A drawing or a generator line, given as text or as a path to a file holding it."""
    text = str(source)
    if isinstance(source, Path) or ("\n" not in text and Path(text).is_file()):
        try:
            text = Path(source).read_text()
        except OSError as exc:
            raise TopologyTextError(f"{source}: cannot read: {exc.strerror}") from None
    if "\n" not in text and ":" not in text and "=" not in text and text.strip():
        raise TopologyTextError(f"{text}: no such file (and not a drawing: nodes follow a colon)")
    lines = [ln for ln in (_strip(x) for x in text.splitlines()) if ln.strip()]
    if len(lines) == 1 and all("=" in w for w in lines[0].split()):
        text = generate(**_generator_args(lines[0]))
    return parse(text)


def generate(blocks: int = 2, racks: int = 4, nvl: int = 2, nodes: int = 4, gpus: int = 8,
             scheme: str = "topograph") -> str:
    """A regular drawing: blocks x racks x NVLink domains x nodes."""
    out = [f"scheme {scheme}", f"gpus {gpus}"]
    clique = scheme == "clique" or scheme.endswith("+clique")
    for b in range(1, blocks + 1):
        if scheme != "clique":
            out.append(f"block b{b}")
        for r in range(1, racks + 1):
            # The ClusterUUID of a clique is global: keep it unique when it stands alone.
            out.append(f"  rack {f'b{b}r{r}' if clique else f'r{r}'}")
            for n in range(1, nvl + 1):
                hosts = " ".join(f"b{b}-r{r}-n{n}-h{h}" for h in range(1, nodes + 1))
                out.append(f"    nvl n{n}: {hosts}")
    return "\n".join(out) + "\n"


_NODE = re.compile(r"([a-z0-9][a-z0-9.-]*)(?:\[([^\]]*)\])?")
_TOKEN = re.compile(r"[^\s\[]+\[[^\]]*\]?|\S+")


def parse(text: str) -> TopologySpec:
    scheme = "topograph"
    default_gpus = 8
    stack: list[tuple[int, str, str]] = []  # (indent, word, value)
    nodes: list[dict[str, Any]] = []
    used: dict[str, int] = {}
    seen: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _strip(raw)
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        head, sep, rest = body.partition(":") if not body.startswith(("scheme ", "gpus ")) else (body, "", "")
        words = head.split()
        if words[0] == "scheme" and len(words) == 2 and indent == 0:
            stack.clear()  # at the left margin, a pool of its own label scheme (several fabrics)
            scheme = words[1]
            base = scheme.removesuffix("+clique")
            if base not in WORDS:
                raise TopologyTextError(f"line {lineno}: unknown scheme {scheme!r} (known: {', '.join(WORDS)})")
            continue
        if words[0] == "gpus" and len(words) == 2:
            if not words[1].isdigit():
                raise TopologyTextError(f"line {lineno}: gpus must be a number, got {words[1]!r}")
            default_gpus = int(words[1])
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if words[0] == "nodes" and len(words) == 1 and sep:
            pass  # nodes directly under the enclosing domain
        elif len(words) == 2:
            _label_key(scheme, words[0], lineno)  # validate the word early
            stack.append((indent, words[0], words[1]))
        else:
            raise TopologyTextError(f"line {lineno}: expected 'LEVEL VALUE' or 'LEVEL VALUE: NODES', got {body!r}")
        if not sep:
            continue
        labels = _labels_for(scheme, stack, lineno)
        for token in _TOKEN.findall(rest):
            match = _NODE.fullmatch(token)
            if not match:
                raise TopologyTextError(f"line {lineno}: cannot read node {token!r} (NAME or NAME[FLAGS], lowercase)")
            name, flags = match.group(1), match.group(2)
            if name in seen:
                raise TopologyTextError(f"line {lineno}: node {name} drawn twice")
            seen.add(name)
            node, in_use = _node(name, flags, labels, default_gpus, lineno)
            nodes.append(node)
            if in_use:
                used[name] = in_use
    if not nodes:
        raise TopologyTextError("the topology has no nodes")
    return TopologySpec(nodes, used, text)


def _strip(line: str) -> str:
    return line.split("#", 1)[0].rstrip()


def _generator_args(line: str) -> dict[str, Any]:
    args: dict[str, Any] = {}
    allowed = {"blocks", "racks", "nvl", "nodes", "gpus", "scheme"}
    for word in line.split():
        key, _, value = word.partition("=")
        if key not in allowed:
            raise TopologyTextError(f"generator: unknown key {key!r} (known: {', '.join(sorted(allowed))})")
        if key == "scheme":
            if value.removesuffix("+clique") not in WORDS:
                raise TopologyTextError(f"generator: unknown scheme {value!r}")
            args[key] = value
        elif not value.isdigit() or int(value) <= 0:
            raise TopologyTextError(f"generator: {key} must be a positive integer, got {value!r}")
        else:
            args[key] = int(value)
    return args


def _label_key(scheme: str, word: str, lineno: int) -> str | None:
    """The label key a level word becomes; None for a clique's rack (it only names the UUID)."""
    if "/" in word:
        return word
    base = scheme.removesuffix("+clique")
    clique = scheme != base or scheme == "clique"
    if clique and word == "nvl":
        return CLIQUE
    key = WORDS[base].get(word)
    prefix = NUMBERED.get(base, ("", ""))[0]
    if key is None and prefix and word.startswith(prefix) and word[len(prefix):].isdigit():
        key = level_key(base, word)  # tier-N, layer-N
    if key is None and clique and word == "rack":
        return None
    if key is None:
        raise TopologyTextError(
            f"line {lineno}: level word {word!r} has no label in scheme {scheme} "
            f"(words: {', '.join(sorted(WORDS[base])) or 'rack, nvl'}; or write a label key)"
        )
    return key


def _labels_for(scheme: str, stack: list[tuple[int, str, str]], lineno: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    rack = None
    for _, word, value in stack:
        key = _label_key(scheme, word, lineno)
        if word == "rack":
            rack = value
        if key == CLIQUE:
            value = value if "." in value or rack is None else f"{rack}.{value}"
        if key is not None:
            labels[key] = value
    return labels


def _node(name: str, flags: str | None, labels: dict[str, str], default_gpus: int,
          lineno: int) -> tuple[dict[str, Any], int]:
    total, free = default_gpus, default_gpus
    unschedulable, ready = False, True
    taints: list[dict[str, str]] = []
    extra: dict[str, str] = {}
    for flag in (flags or "").split():
        if re.fullmatch(r"\d+/\d+", flag):
            free, total = (int(x) for x in flag.split("/"))
        elif flag.isdigit():
            total = free = int(flag)
        elif flag == "cordoned":
            unschedulable = True
        elif flag == "notready":
            ready = False
        elif flag.startswith("taint="):
            m = re.fullmatch(r"taint=([^=:]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)", flag)
            if not m:
                raise TopologyTextError(f"line {lineno}: node {name}: cannot read {flag!r} (taint=KEY[=VALUE]:EFFECT)")
            taint = {"key": m.group(1), "effect": m.group(3)}
            if m.group(2):
                taint["value"] = m.group(2)
            taints.append(taint)
        elif flag.startswith("label=") and flag.count("=") == 2:
            _, key, value = flag.split("=")
            extra[key] = value
        else:
            raise TopologyTextError(f"line {lineno}: node {name}: unknown flag {flag!r}")
    if free > total:
        raise TopologyTextError(f"line {lineno}: node {name}: {free} free of {total} GPUs")
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    resources = {GPU_RESOURCE: str(total), "cpu": "128", "memory": "2048Gi", "pods": "110"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**labels, **extra, "kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
    return node, total - free
