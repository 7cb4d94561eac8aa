"""Where a pod may run: the node filters of kube-scheduler that railyard models, as pure functions.

- NodeUnschedulable and readiness: cordoned or NotReady nodes take nothing (``View.blocked``).
- TaintToleration: every NoSchedule/NoExecute taint must be tolerated.
- NodeAffinity: every ``spec.nodeSelector`` pair, and required node affinity (any term; in a
  term every requirement; ``matchFields`` on ``metadata.name``).
- NodeResourcesFit: every requested resource (cpu, memory, ephemeral-storage, hugepages, pods,
  extended resources) fits the node's allocatable minus what pods and reservations take.

What else kube-scheduler checks (volumes, inter-pod affinity, topology spread, DRA claims, host
ports) railyard does not model: it learns it from the NodeNames its filter is called with (the
nodes that passed the scheduler's own filters) and plans again without the nodes refused.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from extender.core.model import Eligibility, NodeFacts, Requirement, Resources, SelectorTerm, tolerates_all
from extender.core.cluster.state import View

UNBOUNDED = 1 << 30
"""Room on a node for a pod that requests nothing a node can run out of."""


def requirement_holds(req: Requirement, labels: Mapping[str, str]) -> bool:
    """k8s.io/apimachinery labels.Requirement.Matches, for the node selector operators."""
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        left, right = _int64(value), _int64(req.values[0])
        if left is None or right is None:
            return False
        return left > right if op == "Gt" else left < right
    return False  # an operator the API server would have refused


def term_matches(term: SelectorTerm, node: NodeFacts) -> bool:
    if not term.expressions and not term.fields:
        return False  # an empty term matches no objects (NodeSelectorTerm semantics)
    if not all(requirement_holds(r, node.labels) for r in term.expressions):
        return False
    fields = {"metadata.name": node.name}
    return all(requirement_holds(r, fields) for r in term.fields)


def labels_match(e: Eligibility, node: NodeFacts) -> bool:
    """nodeSelector and required node affinity."""
    labels = node.labels
    if any(labels.get(k) != v for k, v in e.node_selector):
        return False
    return e.required is None or any(term_matches(t, node) for t in e.required)


def preference(e: Eligibility, node: NodeFacts) -> int:
    """Sum of the weights of the preferred terms the node matches (NodeAffinity's score)."""
    return sum(w for w, t in e.preferred if term_matches(t, node))


def room(requests: Resources, allocatable: Mapping[str, int], taken: Mapping[str, int]) -> int:
    """How many pods with these requests fit in what is left of a node."""
    best = UNBOUNDED
    for name, amount in requests:
        if amount > 0:
            n = (allocatable.get(name, 0) - taken.get(name, 0)) // amount
            if n < best:
                if n <= 0:
                    return 0
                best = n
    return best


def short_of(requests: Resources, allocatable: Mapping[str, int], taken: Mapping[str, int]) -> str | None:
    """The first resource a node lacks for one more such pod, or None."""
    for name, amount in requests:
        if amount > 0 and allocatable.get(name, 0) - taken.get(name, 0) < amount:
            return name
    return None


def label_mask(view: View, e: Eligibility, taints: bool = True) -> Sequence[bool]:
    """Per node index: labels (and taints, unless ``taints`` is False) admit the pod; cached
    per node-label generation."""
    key = (view.labels_generation, e.node_selector, e.required, e.tolerations if taints else None)
    cache = view.masks
    mask = cache.get(key)
    if mask is None:
        nodes = view.topology.nodes
        if e.node_selector or e.required is not None:
            mask = [labels_match(e, n) for n in nodes]
        else:
            mask = [True] * len(nodes)
        for i, node_taints in view.taints.items() if taints else ():
            if mask[i] and not tolerates_all(e.tolerations, node_taints):
                mask[i] = False
        if len(cache) >= 64:
            cache.clear()
        cache[key] = mask
    return mask


def _int64(text: str) -> int | None:
    t = text.strip()
    body = t[1:] if t[:1] in "+-" else t
    if not body or not body.isascii() or not body.isdigit() or len(body) > 19:
        return None
    n = int(t)
    return n if -(2**63) <= n < 2**63 else None
