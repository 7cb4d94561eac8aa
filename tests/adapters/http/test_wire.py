"""The extender wire shapes, pinned by golden JSON as kube-scheduler sends and reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.adapters.http import wire
from extender.adapters.http.verbs import VERBS
from extender.core.verdicts import FilterVerdict
from tests.topologies import TRANSLATE

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str):
    return json.loads((GOLDEN / name).read_text())


class Recorder:
    """The handler port, answering from fixed values and recording what it was given."""

    def __init__(self, verdict=None, scores=(), kept=None):
        self.verdict, self.scores, self.kept = verdict, list(scores), kept
        self.calls = []

    def filter(self, pod, node_names):
        self.calls.append(("filter", pod.name, node_names))
        return self.verdict

    def prioritize(self, pod, node_names):
        self.calls.append(("prioritize", pod.name, node_names))
        return self.scores

    def bind(self, namespace, name, uid, node):
        self.calls.append(("bind", namespace, name, uid, node))

    def preempt(self, pod, victims):
        self.calls.append(("preempt", pod.name, victims))
        return self.kept


def test_filter_golden():
    verdict = FilterVerdict(
        node_names=(),
        failed={"gpu-001": "gang ml/llama: pod llama-0 is planned on gpu-002", "gpu-002": "node(s) cordoned"},
        failed_unresolvable={"gpu-003": "gang ml/llama needs 4 pods x 8 GPUs within one rack; best rack r1 fits 3"})
    h = Recorder(verdict=verdict)
    reply = VERBS["filter"](h, TRANSLATE, golden("filter_args.json"))
    assert h.calls == [("filter", "llama-0", ["gpu-001", "gpu-002", "gpu-003"])]
    assert reply == golden("filter_result.json")
    assert list(reply) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]


def test_filter_reasons_go_out_only_when_no_node_passes():
    # kube-scheduler reads them only when the attempt fails (schedule_one.go, v1.37.2).
    verdict = FilterVerdict(node_names=("gpu-002",), failed={"gpu-001": "planned on gpu-002"},
                            failed_unresolvable={"gpu-003": "no"})
    reply = VERBS["filter"](Recorder(verdict=verdict), TRANSLATE, golden("filter_args.json"))
    assert reply == {"Nodes": None, "NodeNames": ["gpu-002"], "FailedNodes": {},
                     "FailedAndUnresolvableNodes": {}, "Error": ""}


def test_filter_with_nothing_passing_still_returns_a_list():
    # Both Nodes and NodeNames null reads as "zero nodes fit" only by accident: always a list.
    reply = VERBS["filter"](Recorder(verdict=FilterVerdict(node_names=())), TRANSLATE, golden("filter_args.json"))
    assert reply["NodeNames"] == [] and reply["Error"] == ""


def test_prioritize_golden():
    h = Recorder(scores=[("gpu-001", 0), ("gpu-002", 10), ("gpu-003", 3)])
    assert VERBS["prioritize"](h, TRANSLATE, golden("filter_args.json")) == golden("prioritize_result.json")


def test_prioritize_score_out_of_range_is_refused():
    with pytest.raises(ValueError, match="score 11 for gpu-001 is outside 0..10"):
        VERBS["prioritize"](Recorder(scores=[("gpu-001", 11)]), TRANSLATE, golden("filter_args.json"))


def test_bind_golden():
    h = Recorder()
    assert VERBS["bind"](h, TRANSLATE, golden("bind_args.json")) == golden("bind_result.json")
    assert h.calls == [("bind", "ml", "llama-0", "0b6c5a3e-2f0c-4c52-9d0b-1f7c1e1a0001", "gpu-002")]


def test_preempt_meta_victims_golden():
    h = Recorder(kept={"gpu-001": ["v-1", "v-2"]})
    reply = VERBS["preempt"](h, TRANSLATE, golden("preempt_args_meta.json"))
    assert h.calls == [("preempt", "llama-0", {"gpu-001": ["v-1", "v-2"], "gpu-002": ["v-3"]})]
    assert reply == golden("preempt_result.json")


def test_preempt_full_victims_are_read_by_uid():
    h = Recorder(kept={"gpu-001": ["v-1"]})
    reply = VERBS["preempt"](h, TRANSLATE, golden("preempt_args_full.json"))
    assert h.calls == [("preempt", "llama-0", {"gpu-001": ["v-1"]})]
    assert reply == {"NodeNameToMetaVictims": {"gpu-001": {"Pods": [{"UID": "v-1"}], "NumPDBViolations": 0}}}


def test_filter_error_golden():
    body = golden("filter_args.json")
    body["NodeNames"] = ["gpu-001", 7]
    with pytest.raises(wire.BadRequest) as exc:
        wire.decode_extender_args(body)
    assert wire.filter_error(f"bad filter request: {exc.value}") == golden("filter_error.json")


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b.pop("Pod"), "ExtenderArgs.Pod is missing"),
    (lambda b: b.update(Pod=None), "ExtenderArgs.Pod: expected a JSON object, got null"),
    (lambda b: b.update(Pod=[]), "ExtenderArgs.Pod: expected a JSON object, got an array"),
    (lambda b: b["Pod"].pop("metadata"), "ExtenderArgs.Pod.metadata: expected a JSON object, got null"),
    (lambda b: b["Pod"]["metadata"].update(name=""), "ExtenderArgs.Pod.metadata.name is empty"),
    (lambda b: b.pop("NodeNames"), "ExtenderArgs.NodeNames is missing or null"),
    (lambda b: b.update(NodeNames=None, Nodes={"items": []}), "nodeCacheCapable: true"),
    (lambda b: b.update(NodeNames="gpu-001"), "ExtenderArgs.NodeNames: expected an array of node names, got a string"),
])
def test_extender_args_errors_name_the_field(mutate, message):
    body = golden("filter_args.json")
    mutate(body)
    with pytest.raises(wire.BadRequest, match=message.replace(".", r"\.").replace("[", r"\[")):
        wire.decode_extender_args(body)


@pytest.mark.parametrize("field, value, message", [
    ("PodUID", None, "ExtenderBindingArgs.PodUID: expected a string, got null"),
    ("Node", "", "ExtenderBindingArgs.Node is empty"),
    ("PodName", 3, "ExtenderBindingArgs.PodName: expected a string, got an integer"),
])
def test_binding_args_errors_name_the_field(field, value, message):
    body = golden("bind_args.json")
    body[field] = value
    with pytest.raises(wire.BadRequest, match=message):
        wire.decode_binding_args(body)


def test_binding_args_missing_field():
    body = golden("bind_args.json")
    del body["PodNamespace"]
    with pytest.raises(wire.BadRequest, match="ExtenderBindingArgs.PodNamespace is missing"):
        wire.decode_binding_args(body)


@pytest.mark.parametrize("body, message", [
    ([], "ExtenderBindingArgs: expected a JSON object, got an array"),
    ("x", "ExtenderBindingArgs: expected a JSON object, got a string"),
])
def test_binding_args_not_an_object(body, message):
    with pytest.raises(wire.BadRequest, match=message):
        wire.decode_binding_args(body)


def test_preempt_errors_name_the_field():
    body = golden("preempt_args_meta.json")
    body["NodeNameToMetaVictims"]["gpu-002"]["Pods"][0]["UID"] = 5
    with pytest.raises(wire.BadRequest, match=r"NodeNameToMetaVictims\['gpu-002'\]\.Pods\[0\]\.UID"):
        wire.decode_preemption_args(body)
    body["NodeNameToMetaVictims"] = None
    with pytest.raises(wire.BadRequest, match="both null"):
        wire.decode_preemption_args(body)


names = st.lists(st.text(min_size=1, max_size=20), max_size=50, unique=True)


@given(names, names)
def test_filter_result_round_trips_through_json(passing, failing):
    verdict = FilterVerdict(node_names=tuple(passing), failed={n: f"reason {n}" for n in failing})
    reply = json.loads(json.dumps(wire.encode_filter_result(verdict)))
    assert reply["NodeNames"] == passing
    assert reply["FailedNodes"] == ({} if passing else {n: f"reason {n}" for n in failing})
    args = wire.decode_extender_args({"Pod": {"metadata": {"name": "p"}}, "Nodes": None, "NodeNames": passing})
    assert args["NodeNames"] == passing


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20)


def near_miss(golden_name):
    """Golden bodies with one field replaced by an arbitrary JSON value."""
    body = golden(golden_name)

    def mutate(path_value):
        path, value = path_value
        out = json.loads(json.dumps(body))
        target = out
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return out

    paths = []

    def walk(obj, prefix):
        if isinstance(obj, dict):
            for k, v in obj.items():
                paths.append((*prefix, k))
                walk(v, (*prefix, k))

    walk(body, ())
    return st.tuples(st.sampled_from(paths), json_values).map(mutate)


@pytest.mark.parametrize("decode, fixture", [
    (wire.decode_extender_args, "filter_args.json"),
    (wire.decode_binding_args, "bind_args.json"),
    (wire.decode_preemption_args, "preempt_args_meta.json"),
    (wire.decode_preemption_args, "preempt_args_full.json"),
])
@given(data=st.data())
def test_decoders_raise_only_bad_request(decode, fixture, data):
    body = data.draw(st.one_of(json_values, near_miss(fixture)))
    try:
        args = decode(body)
    except wire.BadRequest:
        return
    if decode is wire.decode_preemption_args:  # what the verb reads next must not fail either
        wire.victim_uids(args)
        wire.pdb_violations(args)
