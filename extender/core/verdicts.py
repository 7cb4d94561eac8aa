"""Results the core hands to adapters, and the sentences operators read.

A placement "no" is not an exception: it is a verdict with numbers, shown by
``kubectl describe pod`` (FailedNodes), in Events, in ``railyard plan`` and ``ExplainPod``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from extender.core.placement.planner import NoPlacement, Placement
from extender.core.placement.slices import SliceRule
from extender.core.cluster.topology import Domain, Topology, format_path


@dataclass(frozen=True)
class FilterVerdict:
    """The answer to one filter call: nodes that pass and why the others do not."""

    node_names: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    """Unschedulable: preemption or time may help."""
    failed_unresolvable: Mapping[str, str] = field(default_factory=dict)
    """UnschedulableAndUnresolvable: preemption cannot help."""


MAX_REASON_CHARS = 1024
"""A reason is repeated on every node of a filter reply and quotes what a pod's creator wrote:
longer ones are cut (saying how long they were), so 5,000 nodes cost at most 5 MiB."""


def cut(text: str) -> str:
    """``text`` in at most ``MAX_REASON_CHARS`` characters."""
    if len(text) <= MAX_REASON_CHARS:
        return text
    tail = f"... ({len(text)} characters in all)"
    return text[:MAX_REASON_CHARS - len(tail)] + tail


def describe_demand(demand: tuple[int, ...]) -> str:
    """``16 pods x 8 GPUs`` or ``4 pods x 8 GPUs + 1 pod x 0 GPUs``."""
    counts: dict[int, int] = {}
    for s in demand:
        counts[s] = counts.get(s, 0) + 1
    parts = [f"{n} pod{'s' if n != 1 else ''} x {s} GPU{'s' if s != 1 else ''}"
             for s, n in sorted(counts.items(), reverse=True)]
    return " + ".join(parts) or "0 pods"


def _nodes(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def explain_no_placement(topo: Topology, np: NoPlacement) -> str:
    if np.invalid:
        return cut(f"gang {np.gang}: " + "; ".join(np.invalid))
    need = f"gang {np.gang} needs {describe_demand(np.demand)}"
    if np.slices is not None:
        need += f" in {_slices(topo, np.slices, sum(1 for g in np.demand if g > 0))}"
    if np.within is not None and np.within.level >= 0:
        need += (f" within {topo.level_word(np.within.level)} {format_path(np.within.path)}, "
                 f"where its running members are")
    elif np.bound_level >= 0:
        need += f"{', all' if np.slices else ''} within one {topo.level_key(np.bound_level)}"
    if np.exclusive is not None:
        need += f", in {topo.level_word(np.exclusive)} domains no other pod uses"
    if np.best is None:
        return f"{need}; the cluster has no nodes"
    b = np.blockers
    why = []
    for count, what in ((b.cordoned, "cordoned"), (b.not_ready, "not ready"), (b.outside, "outside that domain"),
                        (b.refused, "refused by kube-scheduler's filters"),
                        (b.unmatched, "not matching the pods' node selector or affinity"), (b.tainted, "tainted")):
        if count:
            why.append(f"{_nodes(count)} {what}")
    why += [f"{_nodes(n)} short of {resource}" for resource, n in b.short]
    if b.held:
        why.append(f"{_nodes(b.held)} held exclusively by other gangs")
    if b.shared and np.exclusive is not None:
        why.append(f"{_nodes(b.shared)} in {topo.level_word(np.exclusive)} domains other pods use")
    if b.reserved_gpus:
        why.append(f"{b.reserved_gpus} GPUs reserved for other gangs")
    if b.used_gpus:
        why.append(f"{b.used_gpus} GPUs in use")
    if np.within is not None and np.within.level >= 0:
        where = "that domain"
    elif np.bound_level >= 0:
        where = f"best {topo.level_word(np.bound_level)} {format_path(np.best.path)}"
    else:
        where = "the cluster"
    text = f"{need}; {where} fits {np.fits}"
    if np.slices is not None:
        size = np.slices.size
        wanted = sum(1 for g in np.demand if g > 0) // size
        text = f"{need}; {where} holds {np.slices_fit} of {wanted} slices"
        if np.fits > np.slices_fit * size:
            text += (f": it fits {np.fits} pod{'s' if np.fits != 1 else ''}, "
                     f"but only {np.slices_fit * size} in whole slices")
    return text + (f" ({', '.join(why)})" if why else "")


def _slices(topo: Topology, rule: SliceRule, pods: int) -> str:
    """``8 slices of 4 pods, each within one network.topology.nvidia.com/accelerator`` (exclusive:
    ``each within a network.topology.nvidia.com/accelerator of its own``)"""
    n = pods // rule.size
    within = f"a {topo.level_key(rule.level)} of its own" if rule.exclusive else f"one {topo.level_key(rule.level)}"
    return f"{n} slice{'s' if n != 1 else ''} of {rule.size} pod{'s' if rule.size != 1 else ''}, each within {within}"


def explain_placement(topo: Topology, p: Placement) -> str:
    gpus = sum(s.gpus for s in p.slots)
    nodes = len({s.node for s in p.slots})
    if p.level < 0:
        where = "across the cluster (no shared domain)"
    else:
        where = f"within {topo.level_key(p.level)} {format_path(p.domain.path)}"
    pods = len(p.slots)
    text = f"gang {p.gang}: {pods} pod{'s' if pods != 1 else ''}, {gpus} GPUs on {nodes} node{'s' if nodes != 1 else ''} {where}"
    if p.slices is not None:
        text += f", in {_slices(topo, p.slices, sum(1 for s in p.slots if s.gpus > 0))}"
    if p.home is not None and p.home.level >= 0:
        text += f"; kept beside its running members in {topo.level_word(p.home.level)} {format_path(p.home.path)}"
    if not p.preferred_met:
        text += "; preferred level not available, placed wider"
    return text


def where_planned(topo: Topology, p: Placement | None) -> str:
    if p is None:
        return "no plan"
    if p.level < 0:
        return "planned across the cluster"
    return f"planned within {topo.level_key(p.level)} {format_path(p.domain.path)}"


# -- filter, for a gang member ----------------------------------------------------------------


def reserved_node(gang: str, node: str, member: str, where: str) -> str:
    return f"gang {gang} reserved node {node} for {member} ({where})"


def one_too_many(gang: str, min_member: int, member: str) -> str:
    return (f"gang {gang} has {min_member} planned GPU members and every slot is taken; "
            f"pod {member} is one too many (set railyard.io/min-member)")


def node_refused(node: str, member: str, gang: str, refused: list[str]) -> str:
    shown = ", ".join(refused[:5]) + (f" and {len(refused) - 5} more" if len(refused) > 5 else "")
    return (f"node {node} planned for {member} (gang {gang}) was rejected by kube-scheduler's own filters; "
            f"planning again without {len(refused)} refused node{'s' if len(refused) != 1 else ''} ({shown})")


def still_listing(missing: list[str], gang: str) -> str:
    return (f"railyard is still listing {', '.join(sorted(missing))} after a start; gang {gang} is "
            f"planned once it has (the scheduler retries the pod)")


def settling(gang: str, members: int, quiet: float, interval: float) -> str:
    return (f"gang {gang} declares no size: {members} member{'s' if members != 1 else ''} seen, the newest "
            f"{quiet:.1f}s ago; it is planned once no new member appears for {interval:g}s "
            f"(declare the size to skip the wait: railyard.io/min-member or its PodGroup's)")


def preferring(topo: Topology, narrow: NoPlacement, wider: Placement, left: float, wait: float,
               asked: float | None) -> str:
    """A gang waits for its preferred level (``narrow``: why none holds it now) though it fits
    wider now (``wider``)."""
    capped = f", capped from {asked:g}s by gangs.max_preferred_wait_seconds" if asked is not None else ""
    return (f"{explain_no_placement(topo, narrow)}; it waits {max(left, 0.0):.0f}s more (of {wait:g}s{capped}) "
            f"for one, holding nothing, then takes a wider domain: it fits now "
            f"{where_planned(topo, wider).removeprefix('planned ')}")


def holds_exclusively(topo: Topology, domains: tuple[Domain, ...], p: Placement | None) -> str:
    """An exclusive gang's claim on ``domains``, planned as ``p``."""
    nodes = sum(d.end - d.start for d in domains)
    gpus = sum(topo.nodes[i].gpus for d in domains for i in range(d.start, d.end))
    planned_gpus = sum(s.gpus for s in p.slots) if p is not None else 0
    where = ", ".join(format_path(d.path) for d in domains[:8]) + (", ..." if len(domains) > 8 else "")
    word = topo.level_word(domains[0].level) if domains else "node"
    return (f"it holds {len(domains)} {word} domain{'s' if len(domains) != 1 else ''} exclusively ({where}: "
            f"{_nodes(nodes)}, {gpus} GPUs, {gpus - planned_gpus} of them kept free of other pods) until its last "
            f"pod ends")


def held_node(topo: Topology, node: str, gang: str, domain: Domain) -> str:
    """A lone pod's reason on a node of a domain an exclusive gang holds."""
    return (f"node {node} is in {topo.level_word(domain.level)} {format_path(domain.path)}, held exclusively by "
            f"gang {gang} (railyard.io/exclusive-topology) until its last pod ends")


def gang_grew(gang: str, member: str) -> str:
    return f"gang {gang} grew to include {member}; planning again"


def member_deleted(member: str, gang: str) -> str:
    return f"member {member} was deleted while gang {gang} waited; planning again"


def member_moved(member: str, gang: str, now_in: str) -> str:
    return f"member {member} of gang {gang} now belongs to gang {now_in}, planned with it; planning again"


def plan_emptied(gang: str) -> str:
    return (f"gang {gang} holds no slot of its plan any more (its members were bound outside railyard's "
            f"bind, deleted, or planned with another gang); planning again")


def member_unshown(member: str, gang: str, why: str) -> str:
    return (f"member {member} of gang {gang} was forgotten: filter asked about it but the watch never "
            f"showed the pod ({why}); planning again")


def node_deleted(node: str, gang: str) -> str:
    return f"node {node} was deleted while gang {gang} waited; planning again"


# -- filter, for a pod of no gang -------------------------------------------------------------


def unreadable_pod(pod: str, problems: tuple[str, ...]) -> str:
    return cut(f"pod {pod} is not placed: {'; '.join(problems)}")


def node_blocked(why: str, gpus: int) -> str:
    return f"node(s) {why}; pod needs {gpus} GPUs"


def too_few_gpus(free: int, reserved: int, gpus: int) -> str:
    # No node name: kube-scheduler counts identical reasons ("39 node(s) have ..."), and one
    # distinct reason per node made the pod's condition list every node.
    return f"node(s) have {max(free, 0)} free GPUs ({reserved} reserved for gangs); pod needs {gpus}"


def not_sized(problem: str) -> str:
    return f"{problem}; railyard cannot count the pod's GPUs and leaves it to kube-scheduler (no gang hold)"


# -- permit (bind) ------------------------------------------------------------------------------


def unknown_pod(member: str) -> str:
    return (f"pod {member} is unknown to railyard (not seen by filter, not in the cache); the scheduler "
            f"will retry it")


def not_planned(gang: str, phase: str, reason: str) -> str:
    return f"gang {gang} is {phase}, not planned: {reason}"


def wrong_node(member: str, node: str, gang: str, planned: str | None) -> str:
    return f"pod {member} was sent to bind on {node} but gang {gang} planned {planned or 'no node'}"


def timed_out(gang: str, waiting: int, need: int, seconds: float | None, missing: list[str]) -> str:
    within = "its timeout" if seconds is None else f"{seconds:.0f}s"
    names = ", ".join(missing[:5]) or "members not created yet"
    return (f"gang {gang} timed out at bind: {waiting}/{need} GPU members arrived within {within}; "
            f"not arrived: {names}{' ...' if len(missing) > 5 else ''}")


def gang_bound(gang: str, pods: int) -> str:
    return f"gang {gang} bound: {pods} pods"


def binding_failed(member: str, node: str, error: str) -> str:
    return f"binding {member} to {node} failed: {error}"


def eviction_failed(member: str, error: str) -> str:
    return f"evicting {member} after a failed gang bind failed too: {error}"


def compensated(gang: str, failed: int, total: int, first: str) -> str:
    return (f"gang {gang}: {failed}/{total} Bindings failed ({first}); "
            f"{total - failed} bound members evicted so the gang restarts whole")


# -- explain ------------------------------------------------------------------------------------


def names_no_gang(member: str) -> str:
    return f"pod {member} names no gang: filter checks free GPUs node by node, nothing is reserved"


def never_filtered(member: str) -> str:
    return (f"not planned yet: kube-scheduler has not sent {member} to railyard's filter (check "
            f"spec.schedulerName and that the scheduler's extender config points at railyard)")


# -- preemption (core.gangs.preemption, service/preemption.py) ------------------------------------


def _pods(n: int) -> str:
    return f"{n} pod{'s' if n != 1 else ''}"


def preempting(gang: str, priority: int, word: str, path: str, pods: Mapping[int, int],
               released: list[tuple[str, int]], outside: int, needed: int, free: int, leaving: int) -> str:
    """``evicting 3 pods of priority 100 in nvlink s1/l2/n3 to place gang ml/llama (priority
    1000): 24 GPUs needed, 8 free``; ``pods``: victim priority -> pods."""
    parts = []
    count = sum(pods.values())
    if count:
        by = sorted(pods.items())
        if len(by) == 1:
            parts.append(f"evicting {_pods(count)} of priority {by[0][0]}")
        else:
            parts.append(f"evicting {_pods(count)} (" + ", ".join(f"{n} of priority {p}" for p, n in by) + ")")
    if released:
        gangs = ", ".join(f"{g} (priority {p})" for g, p in released)
        parts.append(f"releasing the reservation{'s' if len(released) > 1 else ''} of gang"
                     f"{'s' if len(released) > 1 else ''} {gangs}")
    if not parts:
        parts.append("waiting for the pods already leaving")
    text = (f"{' and '.join(parts)} in {word} {path} to place gang {gang} (priority {priority}): "
            f"{needed} GPUs needed, {free} free")
    if leaving:
        text += f", {leaving} being freed by earlier evictions"
    if outside:
        text += (f"; {outside} of the evicted pods run outside {path}: members of running gangs, "
                 f"evicted whole so no gang runs partly")
    return text


def preempted_pod(victim: str, victim_priority: int, gang: str, priority: int, word: str, path: str,
                  whole_gang: str | None) -> str:
    whole = f", a member of gang {whole_gang}, which is evicted whole" if whole_gang else ""
    return (f"pod {victim} (priority {victim_priority}{whole}) evicted by railyard to place gang {gang} "
            f"(priority {priority}) in {word} {path}")


def reservation_preempted(victim: str, victim_priority: int, gang: str, priority: int, word: str, path: str) -> str:
    return (f"reservation of gang {victim} (priority {victim_priority}) released to place gang {gang} "
            f"(priority {priority}) in {word} {path}; planning again")


def eviction_blocked(gang: str, blocked: Mapping[str, str], seconds: float) -> str:
    first, message = next(iter(blocked.items()))
    more = f" and {len(blocked) - 1} more" if len(blocked) > 1 else ""
    return (f"gang {gang}: evicting {first}{more} was refused ({message}); choosing again without "
            f"{'them' if more else 'it'} for {seconds:.0f}s")


def victims_leaving(gang: str, node: str, member: str, pods: int) -> str:
    if not pods:
        return (f"gang {gang} reserved node {node} for {member}; the pods evicted there are gone, waiting "
                f"for kube-scheduler to see it")
    return (f"gang {gang} reserved node {node} for {member}; waiting for {_pods(pods)} evicted there "
            f"to terminate")


def cannot_preempt(gang: str, priority: int, word: str, path: str, fits: int, count: int,
                   outranking: int, guarded: int, protected: int) -> str:
    why = [f"{outranking} GPUs held by pods of priority {priority} or more"]
    if guarded:
        why.append(f"{guarded} by running gangs with a member of priority {priority} or more")
    if protected:
        why.append(f"{protected} by pods whose eviction was just refused")
    return (f"gang {gang} (priority {priority}) cannot preempt: best {word} {path} fits {fits} of "
            f"{_pods(count)} even with every pod it may evict gone ({', '.join(why)})")


def cannot_preempt_invalid(gang: str, problems: list[str]) -> str:
    return f"gang {gang} cannot preempt: " + "; ".join(problems)


def never_preempts(gang: str, member: str) -> str:
    return f"gang {gang} does not preempt: pod {member} has preemptionPolicy Never; it waits for free GPUs"


def cannot_preempt_no_gpus(gang: str) -> str:
    return f"gang {gang} asks for no GPUs: railyard preempts nothing for it"


def cannot_preempt_empty(gang: str) -> str:
    return f"gang {gang} cannot preempt: the cluster has no nodes"
def waiting(gang: str, at_bind: int, need: int, seconds: float, left: float) -> str:
    return (f"gang {gang}: {at_bind}/{need} GPU members at bind, the first for {seconds:.0f}s; "
            f"the rest must arrive within {max(left, 0):.0f}s")


def held_by_others(gang: str, held: int, members: int, gates: list[str]) -> str:
    return (f"gang {gang}: {held} of {members} gated members still carry other scheduling gates "
            f"({', '.join(gates[:5])}{', ...' if len(gates) > 5 else ''}); railyard plans it once those are lifted")


def waiting_for_leads(gang: str, leads: int, need: int, seconds: float, left: float) -> str:
    return (f"gang {gang}: {leads}/{need} leads at bind, the first member for {seconds:.0f}s; the leads "
            f"bind once all {need} are here, within {max(left, 0):.0f}s (the others bind as they come)")


def leads_bound(gang: str, bound: int, slots: int, nodes: list[str], left: float) -> str:
    shown = ", ".join(sorted(set(nodes))[:5]) + (" ..." if len(set(nodes)) > 5 else "")
    return (f"gang {gang} started: {bound} pods bound first (its leads); {slots} slots stay reserved on "
            f"{shown} for the members its controller creates next, each bound as it comes, for {max(left, 0):.0f}s")


def later_members_timed_out(gang: str, bound: int, size: int, slots: int, seconds: float | None) -> str:
    within = "its timeout" if seconds is None else f"{seconds:.0f}s"
    return (f"gang {gang} timed out with {bound}/{size} GPU members bound: {slots} slots reserved for members "
            f"not created within {within} given back; a member created later is planned beside the bound ones")


def group_changed(gang: str, group: str, size: int, now_size: int, leads: int, now_leads: int) -> str:
    return (f"gang {gang}: its group {group} changed what it asks (size {size} -> {now_size}, leads {leads} -> "
            f"{now_leads}): planned again")


def warm_restart(topo: Topology, lineage: str, domain: Domain) -> str:
    return (f"back in {topo.level_word(domain.level)} {format_path(domain.path)}, where the last instance of "
            f"{lineage} was bound (warm restart)")


def timeout_capped(gang: str, asked: float, cap: float) -> str:
    return (f"gang {gang} asked to wait {asked:g}s at bind; capped to {cap:g}s, so the held bind calls end "
            f"before kube-scheduler's extender httpTimeout cuts them (gangs.max_timeout_seconds)")


def node_unusable(node: str, why: str, gang: str) -> str:
    return f"node {node} became {why} while gang {gang} waited; planning again"


def draining(gang: str, waited: float, bound: float, nodes: list[str], gpus: int) -> str:
    return (f"gang {gang} has lacked room for {waited:.0f}s (starvation bound {bound:g}s, "
            f"gangs.starvation_seconds): {gpus} GPUs on {len(nodes)} node{'s' if len(nodes) != 1 else ''} "
            f"where it fits once their pods finish ({', '.join(nodes[:5])}{' ...' if len(nodes) > 5 else ''}) "
            f"are held for it; no other gang or GPU pod is placed on them")


def awaiting_drain(topo: Topology, gang: str, drained: Domain, busy: int, gpus: int, wider: Placement,
                   left: float) -> str:
    """A drained gang waits for the GPUs held for it (``busy`` of ``gpus`` still in use, in
    ``drained``) though it fits now in a wider domain (``wider``)."""
    where = "across the cluster" if drained.level < 0 else f"in {topo.level_word(drained.level)} {format_path(drained.path)}"
    return (f"gang {gang} waits for the GPUs held for it {where}, {busy} of {gpus} still in use, though it fits now "
            f"{where_planned(topo, wider).removeprefix('planned ')}; it takes that wider domain if they are not free "
            f"in {max(left, 0.0):.0f}s (gangs.max_preferred_wait_seconds)")


def mark_failed(member: str, error: str) -> str:
    return f"recording the Binding round on {member} failed, so no member was bound: {error}"


def round_completed(gang: str, bindings: int, bound: int, nodes: list[str]) -> str:
    return (f"gang {gang}: finished a Binding round its extender had left at {bound}/{bound + bindings} members "
            f"bound: bound the other {bindings} to their planned nodes ({', '.join(nodes[:5])}"
            f"{' ...' if len(nodes) > 5 else ''})")
