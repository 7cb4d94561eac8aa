"""Hypothesis against every HTTP verb of the real server in front of the real service.

Each drawn body (see ``strategies``) goes over loopback as bytes. Every answer must be a clear
one: 200 (an answer, perhaps with ``Error``) or 400 with a message, JSON either way; never 500.
Afterwards: nothing in the log at ERROR or with a traceback, what the service keeps about pods
and gangs within its bounds, and a real gang still binds whole.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from extender.adapters.quantity import QuantityError, json_quantity
from tests.fuzz import strategies as fz
from tests.fuzz.live import Live, LogWatch, rss_bytes
from tests.topologies import TRANSLATE

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "80"))
"""Per verb (FUZZ_EXAMPLES=2000 for a long run); at 80 the file takes 5-20 s on the project's
2-core machine."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=False, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])


@pytest.fixture(scope="module")
def live():
    live = Live()
    live.ext.ctx.pods.max_unshown, live.ext.ctx.pods.max_unshown_bytes = 200, 8 << 20  # reached within the run
    with LogWatch() as watch:
        live.watch = watch
        live.held = 0
        live.outcomes = {}
        live.steered = []
        live.rss_before = rss_bytes()
        yield live
    live.close()


def send(live: Live, verb: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes] | None:
    """POST; None when the call is still held after 0.3 s (a bind waiting for a gang that never completes)."""
    try:
        return live.request("POST", f"/scheduler/{verb}", body, headers, timeout=0.3 if verb == "bind" else 30)
    except (socket.timeout, TimeoutError):
        assert verb == "bind", f"{verb} did not answer within 30 s"
        live.held += 1
        return None


def record(live: Live, verb: str, value: object, got: tuple[int, bytes] | None) -> None:
    """Count outcomes (shown with -s); remember pods filter steered, for bind to name."""
    outcome = "held" if got is None else str(got[0])
    reply = json.loads(got[1]) if got is not None else None
    if verb in ("filter", "bind") and got is not None:
        outcome += f" Error: {reply['Error'][:50]}" if reply["Error"] else " ok"
        if verb == "filter" and not reply["Error"]:
            why = [*reply["FailedNodes"].values(), *reply["FailedAndUnresolvableNodes"].values(), ""][0]
            outcome += " (passes)" if reply["NodeNames"] else f" (nowhere: {why[:40]})"
    live.outcomes[(verb, outcome)] = live.outcomes.get((verb, outcome), 0) + 1
    if verb == "filter" and got is not None and got[0] == 200 and reply["NodeNames"]:
        meta = value["Pod"]["metadata"]
        ns = meta.get("namespace") or "default"
        if live.ext.ctx.pods.seen_pod(f"{ns}/{meta['name']}"):
            live.steered.append((ns, meta["name"], meta.get("uid") or "x", reply["NodeNames"][0]))


def refused_quantity(pod: Any) -> str | None:
    """The first request, limit or overhead value the API server would refuse, in any container
    kind, or None; written apart from railyard's translator. The API server
    (ValidateResourceQuantityValue, pkg/apis/core/validation) refuses a negative value, and a
    fraction of an integer resource: pods, and an extended resource (a name with a domain other
    than kubernetes.io). Only the shapes railyard reads are walked (dicts in lists)."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return None
    lists = [(where, spec.get(where)) for where in ("containers", "initContainers")]
    stated = [("overhead", spec.get("overhead"))]
    for where, items in lists:
        for c in items if isinstance(items, list) else []:
            res = c.get("resources") if isinstance(c, dict) else None
            if isinstance(res, dict):
                stated += [(f"{where} {part}", res.get(part)) for part in ("requests", "limits")]
    for where, values in stated:
        for name, raw in values.items() if isinstance(values, dict) else []:
            try:
                q = json_quantity(raw)
            except QuantityError:
                return f"{where} {name}: {raw!r:.40}"
            integer = name == "pods" or ("/" in name and "kubernetes.io/" not in name)
            if q < 0 or (integer and q.denominator != 1):
                return f"{where} {name}: {raw!r:.40}"
    return None


def check_answer(verb: str, value: Any, got: tuple[int, bytes] | None) -> None:
    if got is None:
        return
    status, data = got
    assert status in (200, 400), (status, data[:500])
    names = value.get("NodeNames") if isinstance(value, dict) else None
    reply = json.loads(data)
    if verb in ("filter", "bind"):
        assert isinstance(reply["Error"], str)
        if status == 400:
            assert reply["Error"].startswith(f"bad {verb} request: ")
    if verb == "filter" and status == 200 and not reply["Error"] and isinstance(names, list):
        assert set(reply["NodeNames"]) <= set(names)
        assert set(reply["FailedNodes"]) | set(reply["FailedAndUnresolvableNodes"]) <= set(names)
        # A value it cannot read, or one the API server would refuse wherever it sits: nowhere,
        # and nothing to preempt.
        refused = refused_quantity(value["Pod"])
        if TRANSLATE.pod(value["Pod"]).problems or refused:
            assert reply["NodeNames"] == [] and set(reply["FailedAndUnresolvableNodes"]) == set(names), (refused, reply)
    if verb == "prioritize" and status == 200 and isinstance(reply, list):
        assert all(0 <= h["Score"] <= 10 for h in reply), reply[:5]
    if status == 400 and verb in ("prioritize", "preempt"):
        assert reply["Error"].startswith(f"bad {verb} request: ")


@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt", "bind"])  # bind names pods filter saw
@FUZZ
@given(data=st.data())
def test_every_verb_answers_bad_input_clearly(live, verb, data):
    value = data.draw(fz.BODIES[verb](live.node_names))
    # Drawn every time, used by bind only (the draws must not depend on the server's state).
    # Mostly a pod filter steered and the API server has (3 in 4 each): otherwise the Binding that
    # is taken is rare enough that some runs of 80 examples never take one.
    steer, plausible = data.draw(st.integers(0, 3)) > 0, data.draw(fz.plausible_pod())
    exists = data.draw(st.integers(0, 3)) > 0
    if verb == "bind" and steer:  # a pod filter has just steered, as the scheduler binds it
        live.steered.clear()
        args = {"Pod": plausible, "NodeNames": live.node_names}
        record(live, "filter", args, send(live, "filter", json.dumps(args).encode(), {}))
        if live.steered:
            value = dict(zip(("PodNamespace", "PodName", "PodUID", "Node"), live.steered.pop()))
            if exists:  # the API server has it: its Binding is taken
                live.binder.existing.add(f"{value['PodNamespace']}/{value['PodName']}")
    body, headers = data.draw(fz.raw_body(value))
    got = send(live, verb, body, headers)
    check_answer(verb, value, got)
    record(live, verb, value, got)
    if data.draw(st.integers(0, 9)) == 0:
        live.clock.now += data.draw(st.sampled_from([1.0, 30.0, 61.0]))


@FUZZ
@given(path=st.one_of(st.text(max_size=20), st.sampled_from(["filter/", "FILTER", "bind?x=1", "../healthz", ""])),
       method=st.sampled_from(["GET", "PUT", "DELETE", "PATCH", "POST"]))
def test_unknown_verbs_and_methods_are_4xx(live, path, method):
    from urllib.parse import quote
    status, data = live.request(method, "/scheduler/" + quote(path, safe="/?="), b"{}")
    assert 400 <= status < 500 or (method == "POST" and status in (200, 400)), (status, data[:200])


def test_zz_outcomes(live):
    """What the fuzz reached, by verb (-s shows it): every verb got past its checks sometimes."""
    for verb, outcome in sorted(live.outcomes):
        print(f"{live.outcomes[verb, outcome]:5d} {verb} {outcome}")
    reached = {verb for verb, outcome in live.outcomes if outcome.startswith("200") and "Error" not in outcome}
    assert reached == {"filter", "prioritize", "preempt", "bind"}


def test_zzz_after_the_fuzz(live):
    """Runs last in this module (pytest keeps file order): what the fuzz left behind."""
    assert live.watch.problems() == []
    # Refused calls are logged at most once per 10 s per verb and outcome.
    assert len(live.watch.warnings()) <= 20
    held = live.held_state()
    assert held["pods_unshown"] <= 201 and held["pods_pending"] <= 201 + 10, held
    assert live.rss_before and rss_bytes() - live.rss_before < 200 << 20
    live.forget_the_fuzz()
    deadline = time.monotonic() + 30  # held binds see their gang forgotten, then answer
    while live.http._counters.held_binds:
        assert time.monotonic() < deadline, (f"{live.http._counters.held_binds} binds still held",
                                             live.ext.debug_gangs(), live.held_state(), live.clock.now)
        live.ext.explain("fuzz/tick")
        time.sleep(0.1)
    live.clock.now += 61  # and the gang book's next collection
    live.ext.explain("fuzz/tick")
    # Running: the drawing's two filler pods (h4, h6).
    assert live.held_state() == {"gangs": 0, "reservations": 0, "pods_pending": 0, "pods_bound": 0,
                                 "pods_running": 2, "pods_seen": 0, "pods_unshown": 0}, (
        live.ext.debug_gangs(), live.ext.ctx.state.reservations())
    live.assert_a_real_gang_binds_whole()
    assert live.watch.problems() == []
