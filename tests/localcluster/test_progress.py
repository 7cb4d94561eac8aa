"""Progress of long steps (issue 24 item 3): one line rewritten in place at a terminal, nothing
elsewhere; `cluster build` counts the packages it compiles, `cluster up` the nodes it creates."""

from __future__ import annotations

import io

from extender.localcluster import binaries, cluster, nodes
from extender.localcluster.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def shown(text: str) -> list[str]:
    """The states of the line as a terminal shows them, one after the other."""
    return [part.replace("\033[K", "") for line in text.split("\n") for part in line.split("\r") if part]


def test_at_a_terminal_the_count_rewrites_one_line_at_most_ten_times_a_second():
    out, now = Terminal(), [0.0]
    with Progress(out, "nodes created", 5, clock=lambda: now[0]) as progress:
        for t in (0.0, 0.05, 0.08, 0.2, 0.25):
            now[0] = t
            progress.step()
    assert shown(out.getvalue()) == ["railyard:   nodes created: 1/5, 0m00s", "railyard:   nodes created: 4/5, 0m00s",
                                     "railyard:   nodes created: 5/5, 0m00s"]
    assert out.getvalue().endswith("5/5, 0m00s\n")  # the last count is always shown, then the line ends


def test_elsewhere_nothing_is_written():
    out = io.StringIO()
    with Progress(out, "nodes created", 3) as progress:
        for _ in range(3):
            progress.step()
    assert out.getvalue() == ""


class FakeApi:
    def __init__(self):
        self.created: list[str] = []

    def create(self, path, obj):
        self.created.append(path)


def test_cluster_up_counts_the_nodes_and_filler_pods_it_creates():
    node_set = nodes.NodeSet([{"metadata": {"name": f"n{i}"}} for i in range(3)], used_gpus={"n0": 4})
    out, api = Terminal(), FakeApi()
    cluster.create_nodes(api, node_set, out)
    assert len(api.created) == 3 + 1 + 1  # nodes, the filler namespace, one filler pod
    assert shown(out.getvalue())[-1].startswith("railyard:   nodes and filler pods created: 4/4, ")
    quiet = io.StringIO()
    cluster.create_nodes(FakeApi(), node_set, quiet)
    assert quiet.getvalue() == ""


def test_cluster_build_counts_the_packages_go_compiles(tmp_path):
    go = tmp_path / "go"
    go.write_text("#!/bin/sh\nif [ \"$1\" = list ]; then printf 'a\\nb\\nc\\n'; else printf 'a\\n# b\\nb\\nc\\n'; fi\n")
    go.chmod(0o755)
    out = Terminal()
    binaries._build(str(go), binaries.ETCD, "v3.6.16", tmp_path, tmp_path / "out", tmp_path / "build.log", out)
    lines = shown(out.getvalue())
    assert lines[0].startswith("railyard: building etcd v3.6.16")
    assert lines[-2].startswith("railyard:   etcd: packages compiled: 3/3, ")
    assert lines[-1].startswith("railyard: built etcd v3.6.16")
