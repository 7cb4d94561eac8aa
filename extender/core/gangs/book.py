"""The gang book: every gang's plan, reservation and permit decision, in kube-scheduler's
words (coscheduling's Permit: Allow, Wait, Reject), as pure bookkeeping over ClusterState.

    filter   prepare(rec, member)          a finished round retries; an unsized gang that
                                           grew is unreserved
             unsettled(rec, reason)        an unsized gang still grows: it waits, holding nothing
             reserve(rec, spec, now)       plan the whole gang; reserve its slots, or keep why not
                                           (or why it waits by choice: ``preferring_until``)
             preempts(rec, reason)         a preemptor's reservation says what it evicts
             steer(rec, member, names)     the member's one planned node, or the reason (a node
                                           kube-scheduler refused: unreserve, plan again without it;
                                           another candidate placement is no refusal)
    bind     permit(gang, member, uid, node) -> Allow | Wait | Reject
             outcome(gang, member, round)  what became of a member that waits (None: still waiting)
             bindings_done(...)            every Binding created: bound (or, with leads, started);
                                           else the members to evict
             later_bound(...)              a started gang's later member: bound, or its error alone
             compensated(...)              the evictions are done: the gang starts again whole
    events   member_deleted, node_deleted, node_changed, expire(now), collect(now),
             end_claims(now, running)      an exclusive gang's domains open once it holds
                                           nothing and runs nothing
    notices  what the gangs' pods should be told (Events), taken by the service

Time is an argument; nothing here waits, locks or does I/O. The service holds one lock around
every call and does the waiting and the Bindings (``extender/service/``). Only the book
writes a record (``tests/core/gangs/test_records.py``); the others read it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Collection, Sequence

from extender.core import verdicts
from extender.core.gangs import patience, starvation, warm
from extender.core.gangs.lifecycle import HOLDING, RESERVED, Event, Phase, next_phase
from extender.core.gangs.record import BOUND, FAILED, TIMED_OUT, UNRESERVED, GangRecord, Outcome, Tried
from extender.core.model import BLOCKING_EFFECTS, GangSpec, NodeFacts, PodFacts, tolerates_all
from extender.core.placement import capacity
from extender.core.placement.address import kept_seat
from extender.core.placement.homes import plan_near
from extender.core.placement.planner import NoPlacement, Placement, named_slot
from extender.core.cluster.topology import Domain, another_placement
from extender.core.ports import NullObserver, Observer
from extender.core.cluster.state import ClusterState, Reservation, Slot, View, claim_slot, claimable, keep_bound
from extender.core.verdicts import FilterVerdict

GC_SECONDS = 60.0
"""Gangs that hold nothing and have no pending pod are forgotten after this long."""

CLAIM_GRACE_SECONDS = 10.0
"""A just-bound exclusive gang keeps its domains this long while none of its pods is seen running."""

REPLAN_SECONDS = 0.5
"""A gang that found no room is not planned again within this long unless the cluster, its
request or the nodes kube-scheduler refused changed: the retries of its members that follow one
change (kube-scheduler tries each of them in turn) read the reason of the first one's plan."""

SHORT_OF_ROOM_SECONDS = 5.0
"""Nor within this long, whatever changed, while the cluster's free GPUs cannot hold its request
(``capacity.lacks_room``) and no step of its starvation is due: every pod that ends somewhere
in a busy cluster would have each waiting gang planned in full again, under the service lock
(the ``gangs`` run: 2,600 plans of 2-10 ms each, which filter calls waited behind). Its
reason's numbers are at most this old."""

@dataclass(frozen=True)
class Allow:
    """Every planned member (with leads: every lead) waits at permit: create these Bindings
    (member -> (uid, node))."""

    round: int
    members: dict[str, tuple[str, str]]
    later: bool = False
    """A later member of a started gang, bound alone: report with ``later_bound``, never compensated."""


@dataclass(frozen=True)
class Wait:
    round: int


@dataclass(frozen=True)
class Reject:
    reason: str
    unreserved: bool = False
    """The gang holds no reservation (its round ended); else the member is not where planned."""


PermitDecision = Allow | Wait | Reject


@dataclass(frozen=True)
class Notice:
    """Something the gang's pods should tell their users (a Kubernetes Event on each)."""

    members: tuple[str, ...]
    reason: str
    """The Event's reason: GangWaiting, GangTimedOut, GangReplanned, GangCompensated, ..."""
    message: str
    warning: bool = True


@dataclass(frozen=True)
class Compensate:
    """Some Bindings failed: evict these members (member, uid), already bound, then report
    ``compensated`` so the gang restarts whole."""

    evict: tuple[tuple[str, str], ...]


class GangBook:
    def __init__(self, state: ClusterState, observer: Observer | None = None,
                 on_step: Callable[[GangRecord, Phase | None, Event | None], None] | None = None,
                 starvation_seconds: float = 0.0, drain_patience_seconds: float = 300.0) -> None:
        self.state = state
        self.starvation_seconds = starvation_seconds
        """A gang that has lacked room this long drains a domain (``core.gangs.starvation``); 0: never."""
        self.drain_patience_seconds = drain_patience_seconds
        """How long a drained gang waits for its drain while a wider domain holds it
        (``starvation.landing``; ``gangs.max_preferred_wait_seconds``)."""
        self.observer: Observer = observer or NullObserver()
        self.on_step = on_step
        """Called after every transition (and once for a new gang), to publish it."""
        self._gangs: dict[str, GangRecord] = {}
        self.notices: list[Notice] = []
        """What the gangs' pods should be told since the service last took them (``take_notices``)."""
        self._leftovers = itertools.count(1)
        self._next_gc = 0.0
        self.warm = warm.WarmHomes()
        """Where each workload's last instance was bound (``core.gangs.warm``)."""

    def get(self, key: str) -> GangRecord | None:
        return self._gangs.get(key)

    def phase(self, key: str) -> Phase | None:
        rec = self._gangs.get(key)
        return rec.phase if rec is not None else None

    def take_notices(self) -> list[Notice]:
        out, self.notices = self.notices, []
        return out

    def records(self) -> list[GangRecord]:
        return list(self._gangs.values())

    def __len__(self) -> int:
        return len(self._gangs)

    def record(self, key: str, now: float) -> GangRecord:
        rec = self._gangs.get(key)
        if rec is None:
            rec = self._gangs[key] = GangRecord(key, now)
            self._publish(rec, None, None)
        return rec

    # -- filter ------------------------------------------------------------------------------

    def prepare(self, rec: GangRecord, member: str) -> None:
        if rec.phase in (Phase.TIMED_OUT, Phase.REJECTED, Phase.BOUND):
            self._step(rec, Event.RETRY)
        if rec.phase in RESERVED and not rec.sized and member not in rec.members:
            self.unreserve(rec, Event.RETRY, verdicts.gang_grew(rec.key, member))

    def unsettled(self, rec: GangRecord, reason: str) -> None:
        """A PENDING gang of undeclared size got a member recently (``core.gangs.settle``): it is
        not planned yet and holds nothing; ``reason`` says until when."""
        rec.reason = reason
        rec.placement = None
        self._step(rec, Event.UNSETTLED)

    def reserve(self, rec: GangRecord, spec: GangSpec, now: float, refused: Collection[str] = (),
                homes: Sequence[Domain] = (), view: View | None = None) -> bool:
        """Plan the gang (PENDING) and reserve its slots, or keep the reason it has none. False:
        not planned, as its last plan found no room and stands (``_stands``).

        ``refused``: nodes kube-scheduler's filters left out for the planning member; nodes
        refused for the gang before are left out too. ``homes``: for a new round of a running
        gang, the domains it may use, nearest first (the first that holds it wins). ``view``:
        plan on this instead of the state's (a preemptor, on the state without its victims)."""
        refused = {*refused, *rec.refused}
        request = (spec, refused, tuple(homes))
        if view is None and self._stands(rec, spec, request, now):
            return False
        rec.tried = None
        drain = self.state.release(rec.key + starvation.DRAIN)  # the gang's own drain: room for its plan
        preempting, view = view is not None, view or self.state.view()
        aim, until = spec, None
        if patience.waits(spec, homes, drain is not None):
            rec.preferring_since = now if rec.preferring_since is None else rec.preferring_since
            aim, until = patience.aim(spec, rec.preferring_since, now)
        # In the first of its homes that holds it; a new instance of a workload back where its
        # last one was bound, when it fits there; a drained gang where it drained (``landing``).
        last = self.warm.home(spec.lineage or spec.key, self.state.topology, now) if not homes else None
        result = warm.inside(aim, view, refused, last) or plan_near(aim, view, refused, homes)
        topo = self.state.topology
        rec.waiting.clear()
        rec.results.clear()
        rec.sized = spec.sized
        rec.preferring_until = None
        if drain is not None and not preempting:  # a preemptor goes where its victims make room
            since = rec.unplaced_since if rec.unplaced_since is not None else now
            wider_at = since + self.starvation_seconds + self.drain_patience_seconds
            landing = starvation.landing(topo, drain, starvation.inside(spec, view, drain, refused), result,
                                         patient=now < wider_at)
            if landing is None:
                assert isinstance(result, Placement)
                self._await_drain(rec, spec, view, drain, result, homes, now, wider_at - now)
                return True
            result = landing
        if isinstance(result, NoPlacement) and until is not None and not result.invalid:
            # Waiting by choice only while a wider domain holds it (a read-only plan); when none
            # does it lacks room, and the starvation bound runs as for any gang (docs/slurm.md).
            wider = warm.inside(spec, view, refused, last) or plan_near(spec, view, refused, homes)
            if isinstance(wider, Placement):
                rec.reason = verdicts.preferring(topo, result, wider, until - now, spec.preferred_wait_seconds,
                                                 spec.preferred_wait_capped_from)
                rec.placement, rec.closest, rec.unplaced_since = None, result.best, None
                rec.preferring_until = until
                self._step(rec, Event.PREFERRING)
                return True
            result = wider
        if isinstance(result, NoPlacement):
            rec.reason = verdicts.explain_no_placement(topo, result)
            rec.placement, rec.closest = None, result.best
            if not result.invalid:
                rec.unplaced_since = now if rec.unplaced_since is None else rec.unplaced_since
                rec.reason += starvation.drain(self.state, rec, spec, self.starvation_seconds, homes, now, drain,
                                               lambda g: self._gangs.get(g))
                if not preempting:
                    rec.tried = Tried(self.state.writes, request, now)
            self._step(rec, Event.INVALID if result.invalid else Event.UNPLACEABLE)
            if rec.phase == Phase.REJECTED:
                self.observer.gang_finished("rejected")
            return True
        rec.unplaced_since = rec.closest = None
        rec.deadline = now + spec.timeout_seconds
        rec.timeout_seconds = spec.timeout_seconds
        rec.spec = spec
        rec.waiting_since = None
        rec.placement = result
        rec.members = tuple(m.key for m in spec.members)
        gpu_slots = tuple(s for s in result.slots if s.gpus > 0)
        rec.min_member = len(gpu_slots)
        rec.lead_size = spec.lead_size
        rec.leads = {m.key for m in spec.members if m.lead and m.gpus > 0}
        rec.reason = verdicts.explain_placement(topo, result)
        if result.exclusive is not None:
            # A round beside running members (homes) keeps the domains they are in.
            held = self.state.claims.claim(topo, rec.key, result.exclusive, [s.node for s in gpu_slots], bool(homes))
            rec.reason += "; " + verdicts.holds_exclusively(topo, held, result)
        if last is not None and last.start <= result.domain.start and result.domain.end <= last.end:
            rec.reason += "; " + verdicts.warm_restart(topo, spec.lineage or spec.key, last)
        if spec.timeout_capped_from is not None:
            capped = verdicts.timeout_capped(rec.key, spec.timeout_capped_from, spec.timeout_seconds)
            rec.reason += f"; {capped}"
            self.notices.append(Notice(rec.members, "GangTimeoutCapped", capped))
        for s in gpu_slots:  # a member whose slot another gang's plan held (its group label changed)
            other = self.state.slot_gang(s.member)
            if other is not None and other != rec.key:
                self.member_deleted(other, s.member, verdicts.member_moved(s.member, other, rec.key))
        self.state.reserve(Reservation(rec.key, gpu_slots, rec.deadline))
        self._step(rec, Event.PLANNED)
        self._report()
        return True

    def _stands(self, rec: GangRecord, spec: GangSpec, request: tuple[object, ...], now: float) -> bool:
        """Whether the gang's last plan, which found no room, answers for one made now with the
        same request: on the same cluster within ``REPLAN_SECONDS``; or within
        ``SHORT_OF_ROOM_SECONDS`` while the cluster's free GPUs, its own drain's counted, cannot
        hold it, unless a step of its starvation is due (the bound passed and it holds no
        drain; its drain's hold is half run out)."""
        tried = rec.tried
        if tried is None or tried.request != request:
            return False
        if tried.writes == self.state.writes and now < tried.at + REPLAN_SECONDS:
            return True
        if now >= tried.at + SHORT_OF_ROOM_SECONDS:
            return False
        drain = self.state.reservation(rec.key + starvation.DRAIN)
        if starvation.due(rec, drain, self.starvation_seconds, now):
            return False
        return capacity.lacks_room(spec, self.state.view(), starvation.held(drain))

    def _await_drain(self, rec: GangRecord, spec: GangSpec, view: View, drain: Reservation, wider: Placement,
                     homes: Sequence[Domain], now: float, left: float) -> None:
        """A drained gang keeps waiting for its drain (``starvation.landing``), held again."""
        rec.placement = None
        rec.closest, rec.reason = starvation.awaited(self.state.topology, view, rec.key, drain, wider, left)
        rec.reason += starvation.drain(self.state, rec, spec, self.starvation_seconds, homes, now, drain,
                                       lambda g: self._gangs.get(g))
        self._step(rec, Event.UNPLACEABLE)

    def preempts(self, rec: GangRecord, reason: str) -> None:
        """A preemptor's new reservation: its reason says what it evicts, and where."""
        rec.reason = reason

    def seat(self, rec: GangRecord, pod: PodFacts) -> Slot | None:
        """The member's slot; for a member created after planning, the one ``steer`` would give it."""
        return self.state.slot_of(pod.key) or claimable(self.state, rec.key, pod.gpus, pod.part,
                                                        prefer=kept_seat(rec.placement, rec.spec, pod.rank))

    def steer(self, rec: GangRecord, pod: PodFacts, names: Sequence[str]) -> FilterVerdict:
        """The member's one planned node; the reason on every other node. A planned node the
        scheduler's own filters refused (absent from ``names``) is left out from now on and
        the gang is unreserved, to be planned again at once."""
        if rec.phase not in HOLDING:
            failed = {n: rec.reason for n in names}
            return FilterVerdict((), {}, failed) if rec.phase == Phase.REJECTED else FilterVerdict((), failed)
        slot = self.state.slot_of(pod.key)
        if slot is None:
            placeholder = claim_slot(self.state, rec.key, pod.key, pod.gpus, pod.part,
                                     prefer=kept_seat(rec.placement, rec.spec, pod.rank))
            slot = self.state.slot_of(pod.key) if placeholder is not None else None
            if placeholder is not None:
                # A member created after planning is a member all the same: deleting it must
                # unreserve the gang like deleting any other; the plan names it from now on.
                rec.members = (*rec.members, pod.key)
                if pod.lead:
                    rec.leads.add(pod.key)
                rec.placement = named_slot(rec.placement, placeholder, pod.key)
                if rec.spec is not None and rec.spec.timeout_capped_from is not None:  # told like the rest
                    self.notices.append(Notice((pod.key,), "GangTimeoutCapped", verdicts.timeout_capped(
                        rec.key, rec.spec.timeout_capped_from, rec.spec.timeout_seconds)))
        if slot is None:
            reason = verdicts.one_too_many(rec.key, rec.min_member, pod.key)
            return FilterVerdict((), {}, {n: reason for n in names})
        if slot.node in names:
            reason = verdicts.reserved_node(rec.key, slot.node, pod.key,
                                            verdicts.where_planned(self.state.topology, rec.placement))
            return FilterVerdict((slot.node,), {n: reason for n in names if n != slot.node})
        if another_placement(self.state.topology, names, slot.node):
            # kube-scheduler's pod-group cycle (KEP-5732) tries each candidate placement in turn
            # with only its nodes: one without the planned node is not a refusal of it.
            where = verdicts.where_planned(self.state.topology, rec.placement)
            return FilterVerdict((), {n: verdicts.reserved_node(rec.key, slot.node, pod.key, where) for n in names})
        rec.refused[slot.node] = pod.key
        reason = verdicts.node_refused(slot.node, pod.key, rec.key, sorted(rec.refused))
        self.unreserve(rec, Event.RETRY, reason)
        return FilterVerdict((), {n: reason for n in names})

    # -- permit --------------------------------------------------------------------------------

    def permit(self, gang: str, member: str, uid: str, node: str, now: float = 0.0) -> PermitDecision:
        """Allow when every planned GPU member waits; with leads, when ``lead_size`` leads wait
        (with any other member already waiting); in a started gang, each later member at once."""
        rec = self._gangs[gang]
        if rec.phase not in RESERVED and rec.phase != Phase.STARTED:
            return Reject(verdicts.not_planned(gang, rec.phase.value, rec.reason), unreserved=True)
        slot = self.state.slot_of(member)
        if slot is None or slot.node != node:
            return Reject(verdicts.wrong_node(member, node, gang, slot.node if slot else None))
        if rec.phase == Phase.STARTED:
            if self.state.slot_gang(member) != gang:  # its slot is one of the leads' (bound) round
                return Reject(verdicts.wrong_node(member, node, gang, None))
            self._step(rec, Event.ALLOWED)
            return Allow(rec.round, {member: (uid, node)}, later=True)
        rec.waiting[member] = (uid, node)
        leads = len(rec.leads.intersection(rec.waiting))
        if len(rec.waiting) < rec.min_member and not (rec.lead_size and leads >= rec.lead_size):
            if rec.waiting_since is None:
                rec.waiting_since = now
            self._step(rec, Event.MEMBER_WAITING)
            waited, left = now - rec.waiting_since, (rec.deadline or now) - now
            message = (verdicts.waiting_for_leads(rec.key, leads, rec.lead_size, waited, left) if rec.lead_size
                       else verdicts.waiting(rec.key, len(rec.waiting), rec.min_member, waited, left))
            self.notices.append(Notice((member,), "GangWaiting", message, warning=False))
            return Wait(rec.round)
        self._step(rec, Event.ALLOWED)
        return Allow(rec.round, dict(rec.waiting))

    def outcome(self, gang: str, member: str, round_: int) -> Outcome | None:
        rec = self._gangs.get(gang)
        if rec is None:
            return Outcome(UNRESERVED, f"gang {gang} is no longer tracked")
        if rec.round == round_:
            if member not in rec.results:
                return None
            error = rec.results[member]
            return Outcome(FAILED, error) if error else Outcome(BOUND)
        if rec.ended is not None and rec.ended[0] == round_:
            return rec.ended[1]
        return Outcome(UNRESERVED, rec.reason)

    def deadline(self, gang: str) -> float:
        rec = self._gangs.get(gang)
        return rec.deadline if rec is not None and rec.deadline is not None else 0.0

    def bindings_done(self, gang: str, results: dict[str, str], members: dict[str, tuple[str, str]],
                      now: float) -> Compensate | None:
        """Every member's Binding result ("" or the error). All bound: the gang is BOUND (None).
        Otherwise the members bound so far are to be evicted."""
        rec = self._gangs[gang]
        if any(results.values()):
            return Compensate(tuple((k, members[k][0]) for k, error in results.items() if not error))
        rec.results = dict(results)
        rec.bound_uids.update(uid for uid, _ in members.values())
        rest = keep_bound(self.state, gang, set(members), f"{gang}#bound-{next(self._leftovers)}")
        if rest:
            # Leads bound (every all-at-once round binds every slot): the rest stay reserved.
            rec.waiting.clear()
            rec.reason = verdicts.leads_bound(gang, len(members), len(rest), [s.node for s in rest],
                                              (rec.deadline or now) - now)
            self.notices.append(Notice(tuple(members), "GangStarted", rec.reason, warning=False))
            self._remember(rec, now)
            self._step(rec, Event.LEADS_BOUND)
            return None
        self._bound(rec, now, len(members))
        return None

    def later_bound(self, gang: str, member: str, uid: str, error: str, now: float) -> Outcome:
        """A started gang's later member was bound (``error`` empty) or not: its own outcome only.
        A failed one keeps its slot, if the gang still holds it, for kube-scheduler's retry."""
        rec = self._gangs.get(gang)
        if error:
            return Outcome(FAILED, error)
        if rec is None:
            return Outcome(BOUND)
        rec.bound_uids.add(uid)
        rest = keep_bound(self.state, gang, {member}, f"{gang}#bound-{next(self._leftovers)}")
        if rec.phase == Phase.STARTED and not rest:
            self._bound(rec, now, rec.min_member)
        return Outcome(BOUND)

    def _remember(self, rec: GangRecord, now: float) -> None:
        """A first round was bound: its workload's next instance is planned back into its domain."""
        if rec.spec is not None and rec.placement is not None and not rec.spec.ranks:
            self.warm.remember(rec.spec.lineage or rec.key, self.state.topology, rec.placement.domain, now)

    def _bound(self, rec: GangRecord, now: float, pods: int) -> None:
        rec.refused.clear()
        rec.preferring_since, rec.ran = None, False
        rec.bound_at = now
        rec.reason = verdicts.gang_bound(rec.key, pods)
        if held := self.state.claims.claimed(self.state.topology, rec.key):
            rec.reason += "; " + verdicts.holds_exclusively(self.state.topology, held, rec.placement)
        if rec.phase == Phase.BINDING:
            self._remember(rec, now)
        self._step(rec, Event.BOUND)
        self.observer.gang_finished("bound")
        self.observer.gang_time_to_bind(now - rec.first_seen)

    def compensated(self, gang: str, results: dict[str, str], eviction_errors: dict[str, str]) -> None:
        """The bound members were evicted (or failed to be): the gang holds nothing again."""
        rec = self._gangs[gang]
        failed = {k: e for k, e in results.items() if e}
        failed.update(eviction_errors)
        reason = verdicts.compensated(gang, len(failed), len(results), next(iter(failed.values())))
        rec.results = {k: reason for k in results}
        self.state.release(gang)
        rec.reason = reason
        self.notices.append(Notice(tuple(results), "GangCompensated", reason))
        self._step(rec, Event.BIND_FAILED)
        self.observer.gang_finished("compensated")
        self._report()

    # -- cluster events and time -----------------------------------------------------------------

    def unreserve(self, rec: GangRecord, event: Event, reason: str, kind: str = UNRESERVED) -> None:
        """Give back every slot of the gang; members waiting at permit are rejected."""
        self.state.release(rec.key)
        rec.reason = reason
        told = tuple(dict.fromkeys([*rec.waiting, *rec.members]))
        self.notices.append(Notice(told, "GangTimedOut" if kind == TIMED_OUT else "GangReplanned", reason))
        self._step(rec, event)
        rec.ended = (rec.round, Outcome(kind, reason))
        rec.round += 1
        rec.waiting.clear()
        self._report()

    def member_deleted(self, gang: str, member: str, reason: str = "") -> bool:
        rec = self._gangs.get(gang)
        if rec is None or rec.phase not in RESERVED | {Phase.STARTED} or member not in rec.members:
            return False
        self.unreserve(rec, Event.MEMBER_LOST, reason or verdicts.member_deleted(member, gang))
        return True

    def node_deleted(self, name: str) -> bool:
        changed = False
        for rec in list(self._gangs.values()):
            if rec.phase in RESERVED | {Phase.STARTED} and rec.placement and any(
                    s.node == name for s in self._planned(rec)):
                self.unreserve(rec, Event.NODE_LOST, verdicts.node_deleted(name, rec.key))
                changed = True
        return changed

    def node_changed(self, node: NodeFacts) -> bool:
        """A node of a waiting plan that no longer takes its members (cordoned, NotReady, or a
        taint a member does not tolerate) ends the plan at once: unreserve, plan again."""
        changed = False
        for rec in list(self._gangs.values()):
            if rec.phase not in RESERVED | {Phase.STARTED} or rec.placement is None:
                continue
            if not any(s.node == node.name for s in self._planned(rec)):
                continue
            reason = _unusable(node, rec.spec)
            if reason is not None:
                self.unreserve(rec, Event.NODE_LOST, verdicts.node_unusable(node.name, reason, rec.key))
                changed = True
        return changed

    def expire(self, now: float) -> bool:
        """Time out gangs whose deadline passed before every member waited at permit, and plan
        again those that no longer hold any slot of their plan."""
        changed = False
        starvation.lapse(self.state, now)
        for key in self.state.expired(now):
            rec = self._gangs.get(key)
            if rec is not None and rec.phase in RESERVED:
                missing = [m for m in rec.members if m not in rec.waiting]
                reason = verdicts.timed_out(rec.key, len(rec.waiting), rec.min_member, rec.timeout_seconds, missing)
            elif rec is not None and rec.phase == Phase.STARTED:
                slots = len(self._held(rec))
                reason = verdicts.later_members_timed_out(rec.key, rec.min_member - slots, rec.min_member, slots,
                                                          rec.timeout_seconds)
            else:
                continue
            self.unreserve(rec, Event.DEADLINE, reason, TIMED_OUT)
            self.observer.gang_finished("timed_out")
            changed = True
        for key in self.state.take_emptied():  # planned, but no slot of the plan left to expire
            rec = self._gangs.get(key)
            if rec is not None and rec.phase in RESERVED and self.state.reservation(key) is None:
                self.unreserve(rec, Event.MEMBER_LOST, verdicts.plan_emptied(key))
                changed = True
        return changed

    def end_claims(self, now: float, running: Callable[[str], bool]) -> bool:
        """Give back the domains of exclusive gangs that hold no reservation and have no pod
        running (``running(gang)``): their last pod ended, or their round ended unbound. A gang
        bound in the last ``CLAIM_GRACE_SECONDS`` and not yet seen running keeps them while the
        watch catches up with its Bindings. True when some domain opened."""
        opened = False
        for gang in self.state.claims.gangs():
            rec = self._gangs.get(gang)
            if running(gang):
                if rec is not None:
                    rec.ran = True
                continue
            if rec is not None and (rec.phase in HOLDING or not rec.ran and rec.bound_at is not None
                                    and now - rec.bound_at < CLAIM_GRACE_SECONDS):
                continue
            opened |= self.state.claims.unclaim(gang)
        return opened

    def collect(self, now: float, has_pending: Callable[[str], bool]) -> None:
        """Forget gangs that hold nothing and have no pod left waiting (bounded memory)."""
        if now < self._next_gc:
            return
        self._next_gc = now + GC_SECONDS
        self.warm.prune(now)
        for key, rec in list(self._gangs.items()):
            if rec.phase in HOLDING or has_pending(key):
                continue
            if rec.bound_at is not None and now - rec.bound_at < GC_SECONDS:
                continue
            del self._gangs[key]

    # -- internals -------------------------------------------------------------------------------

    def _planned(self, rec: GangRecord) -> tuple[Slot, ...]:
        """The slots whose node the gang still needs: every planned one, a started gang's held ones."""
        if rec.phase == Phase.STARTED:
            return self._held(rec)
        return rec.placement.slots if rec.placement is not None else ()

    def _held(self, rec: GangRecord) -> tuple[Slot, ...]:
        """The slots the gang's own reservation holds (a started gang's: its later members')."""
        res = self.state.reservation(rec.key)
        return res.slots if res is not None else ()

    def _step(self, rec: GangRecord, event: Event) -> None:
        previous = rec.phase
        rec.phase = next_phase(rec.phase, event)
        self._publish(rec, previous, event)

    def _publish(self, rec: GangRecord, previous: Phase | None, event: Event | None) -> None:
        if self.on_step is not None:
            self.on_step(rec, previous, event)

    def _report(self) -> None:
        res = self.state.reservations()
        self.observer.reservations(len(res), sum(r.gpus for r in res.values()))


def _unusable(node: NodeFacts, spec: GangSpec | None) -> str | None:
    """Why the node no longer takes the gang's GPU members, or None."""
    if node.unschedulable:
        return "cordoned"
    if not node.ready:
        return "not ready"
    members = [e for gpus, e in spec.slots() if gpus > 0] if spec is not None else []
    for t in node.taints:
        if t.effect in BLOCKING_EFFECTS and not all(tolerates_all(e.tolerations, (t,)) for e in members):
            return f"tainted {t.key}{'=' + t.value if t.value else ''}:{t.effect}"
    return None
