"""What a hostile or broken client sends, as Hypothesis strategies: pods with absurd quantities
and annotation values, wrong JSON types at every level, missing keys, unknown pods and nodes,
and raw bodies (invalid UTF-8, deep nesting, bad encodings). Shared by the HTTP, gRPC and e2e
fuzzers.

The values are the ones issue 11 found (``"1000000000000"`` min-member, 24- and 5,000-digit
numbers, ``"²"``, ``"abc"``, ``"1e9"``, ``"500m"``, ``1.5``, ``-8``, ``2**64``, negative overhead,
1 MB names) plus whatever Hypothesis draws around them, in every container kind (app, init,
sidecar) and the overhead alike.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

from hypothesis import strategies as st

GPU = "nvidia.com/gpu"
GROUP = "scheduling.x-k8s.io/pod-group"

ABSURD_NUMBERS = ["1000000000000", "9" * 24, "9" * 5000, "²", "١٢", "abc", "1e9", "500m", "-8", "0", "-0",
                  " 2", "2 ", "0x10", "1_000", "+3", "1.5", "NaN", "Infinity", "", "8Ei", "1e4294967296",
                  ".", "-", "Ki", ".Ei", "1" * 64, "1" * 65]
"""Quantity and annotation texts that are not what they look like."""
ABSURD_JSON = [1.5, -8, 2**63, 2**64, -(2**63), 0, 10**30, True, None, [], {}, [8], {"value": 8}]

LEVELS = ["spine", "leaf", "nvlink", "block", "kubernetes.io/hostname", "network.topology.nvidia.com/leaf",
          "nope", "", " leaf ", "leaf\x00"]


def names(real: list[str]) -> st.SearchStrategy[str]:
    """Node names: the real ones, unknown ones, odd characters, huge."""
    return st.one_of(st.sampled_from(real), st.text(max_size=30),
                     st.sampled_from(["", "h1 ", "H1", "h1\x00", "../h1", "h" * 100_000]))


def sometimes(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any], odds: int = 3) -> st.SearchStrategy[Any]:
    """``odd`` one time in ``odds``, else ``usual``: most calls must get past the first check."""
    return st.integers(0, odds - 1).flatmap(lambda i: odd if i == 0 else usual)


def quantity() -> st.SearchStrategy[Any]:
    return sometimes(st.sampled_from(["1", "2", "4", "8", 8, "8", "16"]), st.one_of(
        st.sampled_from(ABSURD_NUMBERS), st.sampled_from(ABSURD_JSON), st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12)))


def annotation_value() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(ABSURD_NUMBERS), st.sampled_from(LEVELS), st.text(max_size=20),
                     st.sampled_from(ABSURD_JSON))


RESOURCES = [GPU, "cpu", "memory", "pods", "example.com/x", "hugepages-2Mi"]
"""Names a container may request: integer resources (GPU, pods, an extended one) and others."""
FRACTIONS = ["500m", "0.5", "1.5", 1.5, "250m", "0.1n", "8500m"]
"""Fractions of a unit: cpu and memory may be, an integer resource may not."""


def resource_list() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(RESOURCES), quantity(), max_size=3)


@st.composite
def container(draw: st.DrawFn, init: bool = False) -> dict[str, Any]:
    """An app container, or an init container (a sidecar when its restartPolicy is Always)."""
    c: dict[str, Any] = {"name": draw(st.text(max_size=10)),
                         "resources": {part: draw(resource_list())
                                       for part in draw(st.sets(st.sampled_from(["requests", "limits"])))}}
    if init:
        c["restartPolicy"] = draw(st.sampled_from(["Always", "", None]))
    return c


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                      st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


@st.composite
def pod(draw: st.DrawFn, real_nodes: list[str], namespace: str = "fuzz") -> dict[str, Any]:
    """A Pod-shaped object, every part of which may be absurd, then perhaps broken at one path."""
    if draw(st.integers(0, 29)) == 0:
        name = "p" * 1_000_000  # echoed in reasons and gRPC details, and kept if nothing bounds it
    else:
        name = draw(st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), st.text(min_size=1, max_size=20)))
    labels: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    if draw(st.booleans()):
        labels[GROUP] = draw(sometimes(st.sampled_from(["g1", "g2", "g3"]), st.text(max_size=10)))
    for key in ("railyard.io/min-member", "railyard.io/timeout-seconds", "railyard.io/required-topology",
                "railyard.io/preferred-topology", "kueue.x-k8s.io/pod-group-total-count",
                "batch.kubernetes.io/job-completion-index"):
        if draw(st.integers(0, 3)) == 0:
            annotations[key] = draw(annotation_value())
    # Every container kind (app, init, sidecar) and the overhead draw from the same quantities:
    # one rule must hold wherever an odd value sits (issue 25 item 4).
    spec: dict[str, Any] = {"containers": draw(st.lists(container(), min_size=1, max_size=3))}
    if draw(st.integers(0, 2)) == 0:
        spec["initContainers"] = draw(st.lists(container(init=True), min_size=1, max_size=2))
    if draw(st.integers(0, 3)) == 0:
        spec["overhead"] = draw(resource_list())
    if draw(st.integers(0, 3)) == 0:  # a fraction the API server refuses, in one kind of container
        kind = draw(st.sampled_from(["containers", "init", "sidecar", "overhead"]))
        odd = {draw(st.sampled_from([GPU, "example.com/x", "pods"])): draw(st.sampled_from(FRACTIONS))}
        if kind == "overhead":
            spec["overhead"] = odd
        else:
            c = {"name": kind, "resources": {draw(st.sampled_from(["requests", "limits"])): odd}}
            if kind != "containers":
                c["restartPolicy"] = "Always" if kind == "sidecar" else None
            field = "containers" if kind == "containers" else "initContainers"
            spec[field] = [*spec.get(field, []), c]
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = draw(st.dictionaries(st.text(max_size=8), json_value, max_size=3))
    if draw(st.integers(0, 4)) == 0:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": draw(st.lists(json_value, max_size=3))}}}
    if draw(st.integers(0, 4)) == 0:
        spec["tolerations"] = draw(st.lists(json_value, max_size=3))
    if draw(st.integers(0, 5)) == 0:
        spec["nodeName"] = draw(names(real_nodes))
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": draw(st.sampled_from([namespace, "", "kube-system", "x" * 300])),
                     "uid": draw(st.text(max_size=12)), "labels": labels, "annotations": annotations},
        "spec": spec,
        "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "", "Bogus"]))},
    }
    return draw(broken(obj))


@st.composite
def plausible_pod(draw: st.DrawFn, namespace: str = "fuzz") -> dict[str, Any]:
    """A pod the API server would accept: the kind filter steers and bind then names (alone,
    or one of a small gang, perhaps of a size it never reaches)."""
    labels, annotations = {}, {}
    if draw(st.booleans()):
        labels[GROUP] = draw(st.sampled_from(["g1", "g2", "g3"]))
        annotations["railyard.io/min-member"] = str(draw(st.integers(1, 3)))
    gpus = str(draw(st.sampled_from([1, 2, 8])))
    return {"metadata": {"name": draw(st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)), "namespace": namespace,
                         "uid": "uid-" + draw(st.from_regex(r"[a-f0-9]{6}", fullmatch=True)),
                         "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: gpus}}}]},
            "status": {"phase": "Pending"}}


def broken(obj: dict[str, Any]) -> st.SearchStrategy[Any]:
    """``obj`` as is, or with one value at some path replaced by any JSON value, or deleted."""
    paths: list[tuple[Any, ...]] = []

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, (*path, k))
        elif isinstance(value, list):
            for i, v in enumerate(value[:2]):
                walk(v, (*path, i))

    walk(obj, ())

    @st.composite
    def mutate(draw: st.DrawFn) -> Any:
        how = draw(st.sampled_from(["keep", "keep", "keep", "replace", "delete"]))
        if how == "keep":
            return obj
        path = draw(st.sampled_from(paths))
        copy = json.loads(json.dumps(obj))
        if not path:
            return draw(json_value)
        parent = copy
        for step in path[:-1]:
            parent = parent[step]
        if how == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_value)
        return copy
    return mutate()


def node_names(real: list[str]) -> st.SearchStrategy[Any]:
    return sometimes(st.one_of(st.just(real), st.lists(st.sampled_from(real), max_size=8, unique=True)), st.one_of(
        st.lists(names(real), max_size=8), st.just(real * 3), st.sampled_from([None, "h1", 7, {"h1": True}]),
        st.lists(json_leaf, min_size=1, max_size=3)))


@st.composite
def extender_args(draw: st.DrawFn, real: list[str]) -> Any:
    """filter and prioritize bodies."""
    body: dict[str, Any] = {"Pod": draw(pod(real)), "NodeNames": draw(node_names(real))}
    if draw(st.integers(0, 5)) == 0:
        body["Nodes"] = draw(st.sampled_from([None, {"items": []}, "x"]))
    return draw(broken(body))


@st.composite
def binding_args(draw: st.DrawFn, real: list[str]) -> Any:
    body = {"PodName": draw(sometimes(st.sampled_from(["p", "g1-0", "real-0", "a"]), st.text(max_size=12))),
            "PodNamespace": draw(sometimes(st.just("fuzz"), st.sampled_from(["real", "", "x" * 300]))),
            "PodUID": draw(sometimes(st.just("uid-1"), st.text(max_size=12))),
            "Node": draw(sometimes(st.sampled_from(real), names(real)))}
    return draw(broken(body))


@st.composite
def preemption_args(draw: st.DrawFn, real: list[str]) -> Any:
    victims = draw(st.dictionaries(names(real), st.fixed_dictionaries({
        "Pods": st.lists(st.fixed_dictionaries({"UID": st.text(max_size=8)}), max_size=3),
        "NumPDBViolations": st.one_of(st.integers(-(2**63), 2**63 - 1), json_leaf)}), max_size=4))
    key = draw(st.sampled_from(["NodeNameToMetaVictims", "NodeNameToVictims"]))
    body = {"Pod": draw(pod(real)), "NodeNameToVictims": None, "NodeNameToMetaVictims": None, key: victims}
    return draw(broken(body))


BODIES = {"filter": extender_args, "prioritize": extender_args, "bind": binding_args, "preempt": preemption_args}


@st.composite
def raw_body(draw: st.DrawFn, value: Any) -> tuple[bytes, dict[str, str]]:
    """``value`` as the bytes a client might send, and the headers with them."""
    how = draw(sometimes(st.just("json"), st.sampled_from([
        "gzip", "deflate", "bad-gzip", "unknown-encoding", "binary", "invalid-utf8", "deep", "nan", "truncated",
        "bigint"]), odds=4))
    data = json.dumps(value).encode()
    if how == "json":
        return data, {}
    if how == "gzip":
        return gzip.compress(data), {"Content-Encoding": draw(st.sampled_from(["gzip", "x-gzip", " GZIP "]))}
    if how == "deflate":
        return zlib.compress(data), {"Content-Encoding": "deflate"}
    if how == "bad-gzip":
        return draw(st.binary(max_size=40)), {"Content-Encoding": draw(st.sampled_from(["gzip", "deflate"]))}
    if how == "unknown-encoding":
        return data, {"Content-Encoding": draw(st.sampled_from(["br", "zstd", "compress", "gzip, br", "\u00e9"]))}
    if how == "binary":
        return draw(st.binary(max_size=64)), {}
    if how == "invalid-utf8":
        return b'{"Pod": {"metadata": {"name": "\xff\xfe"}}, "NodeNames": ["h1"]}', {}
    if how == "deep":
        depth = draw(st.sampled_from([200, 1100, 100_000]))
        return b"[" * depth + b"]" * depth, {}
    if how == "nan":
        return b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": NaN}', {}
    if how == "truncated":
        return data[: draw(st.integers(0, max(len(data) - 1, 0)))], {}
    assert how == "bigint"
    return b'{"PodName": "p", "PodNamespace": "fuzz", "PodUID": 1' + b"0" * 30 + b', "Node": "h1"}', {}
