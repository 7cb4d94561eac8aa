"""``railyard explain`` against a real gRPC server on loopback."""

from __future__ import annotations

import json

from extender import cli
from tests.grpc.test_servicer import Served, bind_request, steer
from tests.service.test_live import wait_until
from tests.topologies import gang


def test_explain_prints_phase_reason_plan_and_fit_table(capsys):
    s = Served()
    try:
        pods = gang("g", 2, 8, annotations={"railyard.io/required-topology": "nvlink"})
        plan = steer(s, pods)
        held = s.stub.Bind.future(bind_request(pods[0], plan["g-0"]))
        wait_until(lambda: s.ext.debug_gangs()[0]["phase"].startswith("waiting"))
        assert cli.main(["explain", "ml/g-1", "--grpc", s.target]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == "pod ml/g-1: gang ml/g is waiting (1/2 GPU members at bind), 60s before it times out"
        assert out[1].startswith("reason: gang ml/g: 2 pods, 16 GPUs on 2 nodes within "
                                 "network.topology.nvidia.com/accelerator b1/r1/n1")
        assert out[2:5] == ["plan:", "  ml/g-0  h1", "  ml/g-1  h2"]
        assert out[5] == ("fit of 2 pods within one network.topology.nvidia.com/accelerator "
                          "(its own reservation counted as free):")
        assert out[6].split() == ["DOMAIN", "NODES", "GPUS", "AVAILABLE", "FITS", "BLOCKED"]
        assert out[7].split() == ["b1/r1/n1", "2", "16", "16", "2/2", "0"]
        assert out[9].split() == ["b1/r2/n3", "2", "16", "8", "1/2", "0"]

        assert cli.main(["explain", "ml/g-1", "--grpc", s.target, "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["fit"][0]["fits"] == 2 and answer["quorum"] == 2

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
