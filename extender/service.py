"""railyard's use cases over the core, with no transport: what-if planning here; the live
extender's verbs (filter, prioritize, bind, preempt) build on the same pieces.

Takes raw Kubernetes objects (dicts), translates them once with ``adapters.kubeobjects``
and hands facts to the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from extender.adapters import kubeobjects as ko
from extender.core.planner import NoPlacement, Placement, plan
from extender.core.state import ClusterState, Reservation
from extender.core.verdicts import explain_no_placement, explain_placement


@dataclass(frozen=True)
class GangAnswer:
    """One gang's what-if answer, as ``railyard plan`` prints it."""

    gang: str
    feasible: bool
    level: str | None
    domain: list[str | None] | None
    placement: dict[str, str]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "gang": self.gang,
            "feasible": self.feasible,
            "level": self.level,
            "domain": self.domain,
            "placement": self.placement,
            "reason": self.reason,
        }


@dataclass
class WhatIf:
    """A cluster loaded from objects, ready to plan pending gangs in order."""

    state: ClusterState
    gpu_resource: str = ko.GPU_RESOURCE
    podgroups: dict[str, ko.PodGroupFacts] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, nodes: Sequence[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = (),
             podgroups: Iterable[Mapping[str, Any]] = (), levels: Sequence[str] | None = None,
             gpu_resource: str = ko.GPU_RESOURCE) -> "WhatIf":
        choice = ko.explicit_levels(levels) if levels else ko.detect_levels(nodes)
        state = ClusterState(choice.levels)
        problems = list(choice.problems)
        for node in nodes:
            facts = ko.node_facts(node, choice.levels, gpu_resource)
            if not facts.name:
                problems.append("a node without metadata.name was skipped")
                continue
            state.upsert_node(facts)
        unknown_nodes = 0
        for pod in pods:
            usage = ko.pod_usage(pod, gpu_resource)
            if usage is None:
                continue
            if state.node(usage.node) is None:
                unknown_nodes += 1
            state.upsert_pod(usage)
        if unknown_nodes:
            problems.append(f"{unknown_nodes} pod(s) on nodes that are not in the node list were ignored")
        problems.extend(state.topology.problems)
        groups = {f.key: f for f in map(ko.podgroup_facts, podgroups)}
        return cls(state, gpu_resource, groups, problems)

    def plan_pending(self, pending: Iterable[Mapping[str, Any]]) -> list[GangAnswer]:
        """Plan each gang in order of first appearance; each sees the ones before it reserved."""
        answers = []
        for key, members in ko.group_pods(pending).items():
            gang = ko.gang_spec(key, members, self.podgroups, self.gpu_resource)
            result = plan(gang, self.state.snapshot())
            answers.append(self._answer(result, {ko.pod_key(p) for p in members}))
            if isinstance(result, Placement):
                self.state.reserve(Reservation(key, result.slots, math.inf))
        return answers

    def _answer(self, result: Placement | NoPlacement, members: set[str]) -> GangAnswer:
        topo = self.state.topology
        if isinstance(result, NoPlacement):
            return GangAnswer(result.gang, False, None, None, {}, explain_no_placement(topo, result))
        return GangAnswer(
            gang=result.gang,
            feasible=True,
            level=topo.level_key(result.level),
            domain=list(result.domain.path),
            placement={s.member: s.node for s in result.slots if s.member in members},
            reason=explain_placement(topo, result),
        )
