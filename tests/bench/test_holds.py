"""Issue 23 item 3: what railyard held, read from its own topology view, explains a gang B placed
wider than the watch says it could have (``bench/harness/holds.py``, ``pergang._why``)."""

from __future__ import annotations

import gzip
import json

from bench.harness import holds, pergang, runner
from extender.adapters.topoview import topology_json
from extender.core.gangs.starvation import DRAIN
from tests.service.test_starvation import big, cluster, planned


def test_the_view_document_railyard_serves_gives_each_nodes_holds_by_job():
    ext, clock, _ = cluster(starvation=60)  # a1 and b1 run an 8-GPU pod each
    assert planned(ext, big()) == []
    clock.now += 61
    assert planned(ext, big()) == []  # starving: it drains one NVLink domain
    drained = sorted(s.node for s in ext.ctx.state.reservations()[f"ml/big{DRAIN}"].slots)
    busy, free = drained if drained[0] in ("a1", "b1") else drained[::-1]
    got = holds.held_by_node(topology_json(ext.topology_view()))
    assert got == {busy: {"gpus": 8, "used": 8, "held": {"big": 8}},
                   free: {"gpus": 8, "used": 0, "held": {"big": 8}}}


PATHS = {n: ("b1", "r1", nvl, n) for nvl, names in (("n1", ("a1", "a2", "a3")), ("n2", ("b1", "b2")))
         for n in names}


class Job:
    name, pods, gpus, required = "g", 3, 8, None


def test_gpus_held_for_other_gangs_are_not_free_on_railyards_view_and_nothing_is_taken_twice():
    free = {"a1": 8, "a2": 8, "a3": 8, "b1": 8, "b2": 8}
    assert pergang.fewest_domains(PATHS, free, 3, 8)["nvl"] == 1  # the watch's view: n1 holds it
    poll = {"t": 5.0, "nodes": {
        "a1": {"gpus": 8, "used": 0, "held": {"big": 8}},  # a drain for another gang
        "b1": {"gpus": 8, "used": 0, "held": {"g": 8}},  # the gang's own plan: still its room
    }}
    assert holds.fewest_on_view(poll, free, PATHS, Job()) == {"block": 1, "leaf": 1, "nvl": 2, "host": 3}
    # A held node whose GPUs a pod still uses (the drain waits for them) is not free either way:
    # what the watch already took is not taken again from another node.
    busy = {**free, "a3": 0}
    poll = {"t": 5.0, "nodes": {"a3": {"gpus": 8, "used": 8, "held": {"big": 8}}}}
    assert holds.fewest_on_view(poll, busy, PATHS, Job()) == pergang.fewest_domains(PATHS, busy, 3, 8)


def test_the_plan_is_the_last_change_of_what_the_gang_held_before_it_bound_else_the_state_at_its_first_binding():
    polls = [{"t": 1.0, "nodes": {}},
             {"t": 3.0, "nodes": {"a1": {"gpus": 8, "used": 0, "held": {"big": 8}}}},
             {"t": 6.0, "nodes": {"b1": {"gpus": 8, "used": 0, "held": {"g": 8}}}}]
    # Planned between the polls at 3 s and 6 s.
    assert holds.planned_at(polls, "g", created=2.0, first_bound=7.0, bound=8.0) == ((3.0, 6.0), polls[2])
    # Planned and bound between two polls: what was held when its first member bound.
    assert holds.planned_at(polls, "h", created=2.0, first_bound=4.5, bound=4.6) == ((4.5,), polls[1])
    assert holds.planned_at(polls, "h", created=0.0, first_bound=0.5, bound=0.6) is None
    # A starving gang drains a1 from 3 s (another node frees at 5 s), and is planned on b1 and b2
    # between 5 s and 6 s: the drain is not its plan.
    drain = {"gpus": 8, "used": 8, "held": {"g": 8}}
    starving = [{"t": 3.0, "nodes": {"a1": drain}},
                {"t": 5.0, "nodes": {"a1": drain, "a2": {"gpus": 8, "used": 0, "held": {"big": 8}}}},
                {"t": 6.0, "nodes": {"b1": {"gpus": 8, "used": 0, "held": {"g": 8}},
                                     "b2": {"gpus": 8, "used": 0, "held": {"g": 8}}}},
                {"t": 8.0, "nodes": {"b2": {"gpus": 8, "used": 8, "held": {"g": 8}}}}]  # b1's member bound
    assert holds.planned_at(starving, "g", created=2.0, first_bound=7.0, bound=9.0) == ((5.0, 6.0), starving[2])
    # Its first poll after its creation: that moment alone (nothing earlier is its).
    assert holds.planned_at(starving, "g", created=2.5, first_bound=4.0, bound=9.0) == ((3.0, 3.0), starving[0])


def test_a_plan_between_two_moments_is_explained_by_the_looser_of_them():
    tight, loose = {"block": 1, "leaf": 1, "nvl": 1, "host": 3}, {"block": 2, "leaf": 2, "nvl": 2, "host": 3}
    assert holds.loosest([tight, loose]) == loose
    assert holds.loosest([None, tight]) == tight
    assert holds.loosest([None]) is None


def test_why_says_reserved_when_only_railyards_holds_explain_the_span():
    rec = {"spans": {"block": 1, "leaf": 1, "nvl": 2, "host": 3},
           "fewest": {"block": 1, "leaf": 1, "nvl": 1, "host": 3}, "fewest_created": None, "fewest_held": None}
    assert pergang._why(rec, "nvl") == "planner"
    assert pergang._why({**rec, "fewest_on_view": {"block": 1, "leaf": 1, "nvl": 2, "host": 3}}, "nvl") == "reserved"
    assert pergang._why({**rec, "fewest_on_view": None}, "nvl") == "planner"  # it did not fit: explains nothing


def test_the_poller_keeps_changes_counts_failures_and_the_arm_directory_keeps_them(tmp_path):
    docs = iter([{"tree": {"name": "cluster", "nodes": []}},
                 {"tree": {"name": "cluster", "nodes": []}},
                 OSError("refused"),
                 {"tree": {"name": "cluster", "nodes": [{"name": "a1", "gpus": 8, "used": 0,
                                                         "held": {"ml/g": 8}}]}}])

    def fetch(url):
        doc = next(docs)
        if isinstance(doc, Exception):
            raise doc
        return doc

    poller = holds.ViewPoller("http://127.0.0.1:1/topology.json", [0.0], fetch=fetch)
    for _ in range(4):
        poller.poll_once()
    assert [p["nodes"] for p in poller.polls] == [{}, {"a1": {"gpus": 8, "used": 0, "held": {"g": 8}}}]
    assert poller.failures == 1

    result = runner.ArmResult("B", {}, 10.0, 1.0, holds=poller.polls)
    runner.save(result, tmp_path)
    assert json.loads(gzip.decompress((tmp_path / "holds.json.gz").read_bytes())) == poller.polls
    assert runner.load(tmp_path, "B").holds == poller.polls
