"""The drawing format: what it produces and how it refuses bad drawings."""

from __future__ import annotations

import pytest

from extender import topotext
from extender.adapters import kubeobjects as ko
from extender.topotext import TopologyTextError
from tests.topologies import TRANSLATE


def test_drawing_becomes_nodes_with_labels_capacity_and_flags():
    spec = topotext.load("""
    gpus 4
    block b1
      rack r1
        nvl n1: h1 h2[1/4 cordoned] h3[8 notready]
      rack r2: h4[taint=k=v:NoExecute label=pool=a]
    """)
    h1, h2, h3, h4 = spec.nodes
    assert h1["metadata"]["labels"] == {
        "network.topology.nvidia.com/spine": "b1", "network.topology.nvidia.com/leaf": "r1",
        "network.topology.nvidia.com/accelerator": "n1", "kubernetes.io/hostname": "h1", "type": "kwok"}
    assert h1["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert h2["spec"]["unschedulable"] is True and spec.used_gpus == {"h2": 3}
    assert h3["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert h3["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert h4["spec"]["taints"] == [{"key": "k", "value": "v", "effect": "NoExecute"}]
    assert "network.topology.nvidia.com/accelerator" not in h4["metadata"]["labels"]
    assert h4["metadata"]["labels"]["pool"] == "a"
    (fill,) = spec.filler_pods()
    assert fill["spec"]["nodeName"] == "h2"
    assert fill["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "3"}


@pytest.mark.parametrize("scheme", [s for s in topotext.WORDS if s != "clique"])
def test_position_words_keep_each_scheme_order(scheme):
    # block, rack and nvl are a drawing's first, second and third level: in every scheme they must
    # become labels that the scheme's preset orders the same way, broadest first.
    words = [w for w in ("block", "rack", "nvl") if w in topotext.WORDS[scheme]]
    drawing = "".join(f"{'  ' * i}{w} {w[0]}1" + (": h1 h2\n" if w == words[-1] else "\n") for i, w in enumerate(words))
    nodes = [TRANSLATE.node(n) for n in topotext.load(f"scheme {scheme}\n{drawing}").nodes]
    assert [lvl.key for lvl in ko.detect_levels(nodes).levels] == [topotext.WORDS[scheme][w] for w in words]


def test_generator_expands_to_a_drawing():
    spec = topotext.load("blocks=2 racks=3 nvl=2 nodes=4 gpus=8 scheme=gke")
    assert len(spec.nodes) == 2 * 3 * 2 * 4
    labels = spec.nodes[0]["metadata"]["labels"]
    assert labels["cloud.google.com/gce-topology-block"] == "b1"
    assert len({n["metadata"]["name"] for n in spec.nodes}) == 48


def test_file_path(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("rack r1: a b\n")
    assert [n["metadata"]["name"] for n in topotext.load(str(f)).nodes] == ["a", "b"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("rack r1: h1 h1", "line 1: node h1 drawn twice"),
        ("scheme nope\nrack r1: h1", "unknown scheme 'nope'"),
        ("planet p1: h1", "level word 'planet' has no label in scheme topograph"),
        ("rack r1: h1[9/8]", "node h1: 9 free of 8 GPUs"),
        ("rack r1: h1[bogus]", "node h1: unknown flag 'bogus'"),
        ("rack r1: H1", "cannot read node 'H1'"),
        ("rack: h1", "expected 'LEVEL VALUE'"),
        ("", "the topology has no nodes"),
        ("blocks=x", "blocks must be a positive integer"),
        ("blocks=1 colour=red", "unknown key 'colour'"),
        ("/nonexistent/dir/file.txt", "/nonexistent/dir/file.txt: no such file"),
        ("rack r1: h1[8/8", "cannot read node 'h1[8/8'"),
    ],
)
def test_bad_drawings_are_refused_with_the_line(text, message):
    with pytest.raises(TopologyTextError) as err:
        topotext.load(text)
    assert message in str(err.value)


def test_a_scheme_line_at_the_margin_starts_a_pool_of_another_fabric():
    drawing = ("scheme topograph-v1\ntier-1 s1\n  tier-0 l1\n    nvl n1: a1 a2\n"
               "scheme gke\nblock b1\n  rack sb1: g1 g2 g3\n")
    nodes = [TRANSLATE.node(n) for n in topotext.load(drawing).nodes]
    assert {n.name: n.fabric for n in nodes} == {"a1": "topograph-v1-2-tiers", "a2": "topograph-v1-2-tiers",
                                                 "g1": "gke", "g2": "gke", "g3": "gke"}
    assert {k: v for k, v in nodes[2].labels.items() if k.startswith("cloud.google.com/")} == {
        "cloud.google.com/gce-topology-block": "b1", "cloud.google.com/gce-topology-subblock": "sb1"}
    assert [(lvl.name, lvl.fabric) for lvl in ko.detect_levels(nodes).levels] == [
        ("fabric", ""), ("block", "gke"), ("subblock", "gke"),
        ("tier-1", "topograph-v1-2-tiers"), ("tier-0", "topograph-v1-2-tiers"), ("nvlink", "topograph-v1-2-tiers")]
