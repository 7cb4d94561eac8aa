"""The live topology view in a real headless browser (Debian's chromium) against a local
cluster: the page loads from the extender's view port, shows a gang just bound on the nodes
kube-scheduler bound it to, inside its NVLink domain, and a gang that waits with the domain
that came closest. The screenshot of that page is docs/img/view.png
(``RAILYARD_UPDATE_SCREENSHOT=1`` writes it there; every run writes one under the test's tmp dir).
"""

from __future__ import annotations

import json
import os
import struct
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .browser import Chromium, find
from .helpers import BindingWatch, create_pods, gang_pods, gpu_pod, names_of, namespace, node_labels, wait_for

pytestmark = pytest.mark.e2e

TOPOLOGY = "blocks=1 racks=2 nvl=2 nodes=4 gpus=8 scheme=topograph"
NVLINK = "network.topology.nvidia.com/accelerator"
LEVELS = ("network.topology.nvidia.com/spine", "network.topology.nvidia.com/leaf", NVLINK)
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "view.png"
BIND_TIMEOUT = 150


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def browser_path():
    path = find()
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("no chromium: scripts/setup installs it (apt-get install chromium)", pytrace=False)
        pytest.skip("no chromium on this machine (apt-get install chromium); CI installs it")
    return path


def test_the_page_shows_a_gang_just_bound_in_its_domain_a_held_one_and_a_waiting_one(local_cluster, browser_path,
                                                                                    tmp_path):
    cluster = local_cluster(topology=TOPOLOGY, extender=True)
    view = json.loads((cluster.workdir / "cluster.json").read_text())["view"]
    ns = namespace(cluster.core, "view")
    llama = gang_pods("llama", 4, 8, required="nvlink")
    # 3 of its 4 members exist: railyard reserves 4 slots and holds the 3 at bind until its timeout.
    mixtral = gang_pods("mixtral", 4, 8, required="nvlink", timeout_seconds=140)[:3]
    giant = gang_pods("giant", 5, 8, required="nvlink")  # no NVLink domain has 5 nodes: it waits whole
    with BindingWatch(cluster.core, ns) as watch:
        create_pods(cluster.core, ns, [*llama, gpu_pod("solo-0", 2), gpu_pod("solo-1", 4)])
        bound = watch.wait_bound(names_of(llama), BIND_TIMEOUT, "gang llama bound")
        watch.wait_bound(["solo-0", "solo-1"], BIND_TIMEOUT, "the single pods bound")
        create_pods(cluster.core, ns, [*mixtral, *giant])
        held = wait_for(lambda: (lambda g: g if g and g["phase"].startswith("waiting at bind 3/4") else None)(
            cluster.extender_gangs().get(f"{ns}/mixtral")), BIND_TIMEOUT, "mixtral's 3 members held at bind")
        watch.assert_whole({"llama": names_of(llama)})
    labels = node_labels(cluster.core)
    llama_nodes = sorted(set(bound.values()))
    (domain,) = {tuple(labels[n][key] for key in LEVELS) for n in llama_nodes}  # one NVLink domain, 4 nodes
    assert len(llama_nodes) == 4
    held_nodes = sorted(set(held["plan"].values()))
    assert len(held_nodes) == 4 and not set(held_nodes) & set(llama_nodes)
    cordoned = next(n for n in sorted(labels) if n not in llama_nodes + held_nodes)
    assert _status(view + "debug/gangs") == 404  # the view port serves the view and nothing else

    def on_nodes(gang: str) -> str:
        """[node, its NVLink domain] of every node the page names the gang on."""
        return ("[...document.querySelectorAll('.node')].filter(e => e.dataset.gangs.split(' ').includes(%s))"
                ".map(e => [e.dataset.node, e.closest('.dom').dataset.domain])" % json.dumps(gang))

    with Chromium(browser_path) as browser:
        browser.open(view)
        gang = f"{ns}/llama"
        shown = browser.wait_for(f"(n => n.length ? n : null)({on_nodes(gang)})", 60, f"the page names {gang} on nodes")
        assert sorted(node for node, _ in shown) == llama_nodes
        assert {where for _, where in shown} == {"/".join(domain)}
        assert browser.evaluate(f"document.querySelector('#bound [data-gang=\"{gang}\"]').textContent").startswith(gang)
        shown = browser.wait_for(f"(n => n.length === 4 ? n : null)({on_nodes(f'{ns}/mixtral')})", 30,
                                 "the page names mixtral on the 4 nodes reserved for it")
        assert sorted(node for node, _ in shown) == held_nodes and len({where for _, where in shown}) == 1
        assert browser.evaluate(f"document.querySelector('[data-node=\"{held_nodes[0]}\"] i.held') !== null")
        # Live: a node cordoned now shows so on the page already open, without a reload.
        assert browser.evaluate(f"document.querySelector('[data-node=\"{cordoned}\"].blocked') === null")
        cluster.core.patch_node(cordoned, {"spec": {"unschedulable": True}})
        assert browser.wait_for(f"document.querySelector('[data-node=\"{cordoned}\"].blocked') !== null", 30,
                                f"{cordoned} shown cordoned without a reload")
        waiting_text = browser.wait_for(
            f"(e => e && e.textContent)(document.querySelector('#waiting [data-gang=\"{ns}/giant\"]'))", 60,
            f"{ns}/giant listed as waiting")
        assert "closest: nvlink" in waiting_text and "needs 5 pods x 8 GPUs" in waiting_text
        browser.evaluate(f"document.querySelector('#bound [data-gang=\"{gang}\"]').click()")  # its span, outlined
        assert "span: nvlink " + "/".join(domain) in browser.evaluate("document.getElementById('detail').textContent")
        png = browser.screenshot(1280, 640)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1280, 640)
    (tmp_path / "view.png").write_bytes(png)
    if os.environ.get("RAILYARD_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        SCREENSHOT.write_bytes(png)
