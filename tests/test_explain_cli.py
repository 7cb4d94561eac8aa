"""``railyard explain`` against a real gRPC server on loopback."""

from __future__ import annotations

import json

from extender import cli
from tests.adapters.grpc.test_servicer import Served, bind_request, steer
from tests.service.test_live import wait_until
from tests.topologies import gang


def test_explain_prints_phase_reason_plan_and_fit_table(capsys):
    s = Served()
    try:
        pods = gang("g", 2, 8, annotations={"railyard.io/required-topology": "nvlink"})
        plan = steer(s, pods)
        held = s.stub.Bind.future(bind_request(pods[0], plan["g-0"]))
        wait_until(lambda: s.ext.debug_gangs()[0].phase.startswith("waiting"))
        assert cli.main(["explain", "ml/g-1", "--grpc", s.target]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == "pod ml/g-1: gang ml/g is waiting (1/2 GPU members at bind), 60s before it times out"
        assert out[1].startswith("reason: gang ml/g: 2 pods, 16 GPUs on 2 nodes within "
                                 "network.topology.nvidia.com/accelerator b1/r1/n1")
        assert out[2:5] == ["plan:", "  ml/g-0  h1", "  ml/g-1  h2"]
        assert out[5] == "ranks:"
        assert [line.split() for line in out[6:9]] == [
            ["RANK", "SLICE", "POD", "NODE", "SPINE", "LEAF", "NVLINK"],
            ["0", "-", "ml/g-0", "h1", "b1", "b1/r1", "b1/r1/n1"],
            ["1", "-", "ml/g-1", "h2", "b1", "b1/r1", "b1/r1/n1"]]
        assert out[9] == ("fit of 2 pods within one network.topology.nvidia.com/accelerator "
                          "(its own reservation counted as free):")
        assert out[10].split() == ["DOMAIN", "NODES", "GPUS", "AVAILABLE", "FITS", "BLOCKED"]
        assert out[11].split() == ["b1/r1/n1", "2", "16", "16", "2/2", "0"]
        assert out[13].split() == ["b1/r2/n3", "2", "16", "8", "1/2", "0"]

        assert cli.main(["explain", "ml/g-1", "--grpc", s.target, "-o", "json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["fit"][0]["fits"] == 2 and answer["quorum"] == 2
        assert cli.main(["explain", "ml/g-1", "--grpc", s.target, "--json"]) == 0  # the older spelling
        assert json.loads(capsys.readouterr().out) == answer

        assert cli.main(["explain", "ml/ghost", "--grpc", s.target]) == 1
        assert "NOT_FOUND: pod ml/ghost is unknown to railyard" in capsys.readouterr().err
        s.stub.Bind(bind_request(pods[1], plan["g-1"]))
        held.result(timeout=5)
    finally:
        s.close()


def test_explain_says_when_nothing_listens(capsys):
    assert cli.main(["explain", "ml/x", "--grpc", "127.0.0.1:1", "--timeout", "2"]) == 2
    assert capsys.readouterr().err.startswith("railyard explain: UNAVAILABLE")
    assert cli.main(["explain", "no-slash"]) == 2


def test_explain_a_sliced_gang_lists_ranks_with_slices_and_whole_slices_per_domain(capsys):
    s = Served()
    try:
        pods = gang("s", 4, 4, annotations={"railyard.io/slice-size": "2", "railyard.io/slice-required-topology": "node",
                                            "railyard.io/required-topology": "leaf"})
        plan = steer(s, pods)
        held = s.stub.Bind.future(bind_request(pods[0], plan["s-0"]))
        wait_until(lambda: s.ext.debug_gangs()[0].phase.startswith("waiting"))
        assert cli.main(["explain", "ml/s-3", "--grpc", s.target]) == 0
        out = capsys.readouterr().out.splitlines()
        at = out.index("ranks (slices of 2 within one kubernetes.io/hostname):")
        assert [line.split() for line in out[at + 1:at + 6]] == [
            ["RANK", "SLICE", "POD", "NODE", "SPINE", "LEAF", "NVLINK"],
            ["0", "0", "ml/s-0", "h1", "b1", "b1/r1", "b1/r1/n1"],
            ["1", "0", "ml/s-1", "h1", "b1", "b1/r1", "b1/r1/n1"],
            ["2", "1", "ml/s-2", "h2", "b1", "b1/r1", "b1/r1/n1"],
            ["3", "1", "ml/s-3", "h2", "b1", "b1/r1", "b1/r1/n1"]]
        table = out[out.index("fit of 4 pods within one network.topology.nvidia.com/leaf "
                              "(its own reservation counted as free):") + 1:]
        # r1: h1 and h2 hold a slice each, h3 one (8 free); h4 has 2 GPUs free: none. r2: h5 one.
        assert [line.split() for line in table] == [
            ["DOMAIN", "NODES", "GPUS", "AVAILABLE", "FITS", "BLOCKED", "SLICES"],
            ["b1/r1", "4", "32", "26", "4/4", "0", "2/2"],
            ["b1/r2", "2", "16", "8", "2/4", "0", "1/2"]]
        rest = [s.stub.Bind.future(bind_request(p, plan[p["metadata"]["name"]])) for p in pods[1:]]
        for call in [held, *rest]:
            call.result(timeout=5)
    finally:
        s.close()


def test_explain_shows_a_rails_column_only_for_a_rail_aligned_gang():
    from extender.api.v1 import extender_pb2 as pb
    from extender.commands.explain import _ranks
    from google.protobuf.json_format import MessageToDict

    def answer(rails):
        reply = pb.ExplainPodResponse(ranks=[pb.MemberAddress(rank=0, pod="ml/r-0", node="a2", rails=rails)])
        return MessageToDict(reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)

    assert [line.split() for line in _ranks(answer(["0", "1", "2", "3"]))[1:]] == [
        ["RANK", "SLICE", "POD", "NODE", "RAILS"], ["0", "-", "ml/r-0", "a2", "0,1,2,3"]]
    assert _ranks(answer([]))[1].split() == ["RANK", "SLICE", "POD", "NODE"]
