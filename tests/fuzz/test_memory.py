"""Memory stays bounded however many pods that never existed a client names (issue 11 item 6:
RSS grew 92 -> 299 MB in one fuzz run, every pod filter had seen kept until the next relist).

1,200 filter calls over HTTP, each for a different pod that the watch never shows, each
carrying about 130 KB that railyard would keep (its name, its node selector): 150 MB if kept.
With the default bounds (5,000 pods, 32 MiB) the process grows by far less.
"""

from __future__ import annotations

import gc
import json

from extender.core.cluster.pods import MAX_UNSHOWN_BYTES
from tests.fuzz.live import Live, rss_bytes
from tests.topologies import pod

CALLS = 1200
KEPT = 130_000


def ghost(i: int) -> bytes:
    p = pod(f"ghost-{i:05d}-" + "x" * 30_000, 8, ns="mem", labels={"scheduling.x-k8s.io/pod-group": f"ghost-{i}"})
    p["spec"]["nodeSelector"] = {f"key-{k}": f"{i}-{k}-" + "v" * 800 for k in range(60)}
    return json.dumps({"Pod": p, "NodeNames": ["h1", "h2"]}).encode()


def test_pods_that_never_existed_cost_at_most_the_bound():
    live = Live()
    try:
        live.post("filter", ghost(0))
        gc.collect()
        before = rss_bytes()
        for i in range(1, CALLS):
            status, _ = live.request("POST", "/scheduler/filter", ghost(i))
            assert status == 200
        gc.collect()
        grown = rss_bytes() - before
        count, size = live.ext.ctx.pods.unshown()
        # The bound is applied as each call starts: the pod of the last call comes on top.
        assert size <= MAX_UNSHOWN_BYTES + 2 * KEPT and count < CALLS / 2, (count, size)
        assert live.ext.ctx.pods.forgotten >= CALLS - count
        assert CALLS * KEPT > 140 << 20  # what keeping them all would cost
        assert grown < 96 << 20, f"RSS grew {grown >> 20} MiB"
        live.forget_the_fuzz()
        assert live.held_state()["pods_unshown"] == 0
        live.assert_a_real_gang_binds_whole()
    finally:
        live.close()
