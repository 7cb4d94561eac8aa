"""`cluster up` refuses bad input and bad state before starting anything."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from extender.localcluster import cli, cluster, processes
from extender.localcluster.errors import ClusterError

NODES = "kind: NodeList\nitems: [{metadata: {name: g1}, status: {capacity: {nvidia.com/gpu: '8'}}}]\n"


def _up(tmp_path, **kw):
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(NODES)
    kw.setdefault("nodes_file", nodes)
    kw.setdefault("extender", False)
    return cluster.UpOptions(workdir=tmp_path / "w", **kw)


def test_a_running_cluster_in_the_workdir_is_refused(tmp_path):
    workdir = tmp_path / "w"
    proc = processes.start(workdir, "etcd", ["sleep", "60"])
    try:
        with pytest.raises(ClusterError, match="already running .* \\(etcd\\); run `railyard cluster down"):
            cluster.up(_up(tmp_path))
        assert processes.is_alive(proc)  # not ours to stop from `up`
    finally:
        assert cluster.down(workdir) == ["etcd"]
    assert not processes.is_alive(proc)


def test_pid_files_of_a_crashed_run_are_named(tmp_path):
    workdir = tmp_path / "w"
    proc = processes.start(workdir, "kube-apiserver", ["true"])
    while processes.is_alive(proc):
        pass
    with pytest.raises(ClusterError, match="left over from a crashed run .*kube-apiserver.*cluster down"):
        cluster.up(_up(tmp_path))
    assert cluster.down(workdir) == []
    assert processes.recorded(workdir) == []


def test_unreadable_nodes_file(tmp_path):
    with pytest.raises(ClusterError, match="cannot read nodes file"):
        cluster.up(_up(tmp_path, nodes_file=tmp_path / "nope.yaml"))


def test_unreadable_scheduler_config(tmp_path):
    with pytest.raises(ClusterError, match="cannot read scheduler config"):
        cluster.up(_up(tmp_path, scheduler_config=tmp_path / "nope.yaml"))
    bad = tmp_path / "sched.yaml"
    bad.write_text("kind: Pod\n")
    with pytest.raises(ClusterError, match="is not a KubeSchedulerConfiguration"):
        cluster.up(_up(tmp_path, scheduler_config=bad))


def test_port_in_use(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ClusterError, match=f"port {port} on 127.0.0.1 is in use"):
            cluster.up(_up(tmp_path, apiserver_port=port))


def test_extender_missing_suggests_no_extender(tmp_path, monkeypatch):
    # A checkout without extender/commands/serve.py (as before it landed).
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "extender.commands.serve" else real_find_spec(name, *a))
    with pytest.raises(ClusterError, match="extender is not available yet.*--no-extender"):
        cluster.up(_up(tmp_path, extender=True))


def test_cli_prints_one_line_and_exits_nonzero(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["cluster", "up", "--workdir", str(tmp_path), "--nodes", str(tmp_path / "x.json"),
                              "--no-extender"])
    assert args.func(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("railyard: cannot read nodes file")


@pytest.mark.parametrize("argv", [
    ["cluster", "up", "--nodes", "a", "--topology", "b"],
    ["cluster", "up", "--apiserver-port", "70000"],
    ["cluster", "up", "--apiserver-port", "x"],
    ["cluster"],
])
def test_bad_arguments_are_usage_errors(argv):
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv)
    assert exc.value.code == 2


def test_status_of_an_empty_workdir(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["cluster", "status", "--workdir", str(tmp_path)])
    assert args.func(args) == 1
    assert "no cluster in" in capsys.readouterr().out


def _fake_binaries(tmp_path, etcd_script: str):
    """Binaries where etcd is a shell script: enough to drive `up` into its failure paths."""
    from extender.localcluster.binaries import Binaries

    etcd = tmp_path / "fake-etcd"
    etcd.write_text("#!/bin/sh\n" + etcd_script)
    etcd.chmod(0o755)
    missing = tmp_path / "never-started"
    return Binaries(etcd=etcd, kube_apiserver=missing, kube_scheduler=missing, kwok=missing,
                    kube_controller_manager=missing)


def test_a_component_dying_at_startup_is_reported_with_its_log(tmp_path):
    bins = _fake_binaries(tmp_path, "echo 'listen tcp 127.0.0.1:2379: bind: address already in use'\nexit 1\n")
    with pytest.raises(ClusterError, match="(?s)etcd exited during startup.*address already in use"):
        cluster.up(_up(tmp_path, binaries=bins))
    assert processes.recorded(tmp_path / "w") == []


def test_a_component_never_healthy_is_stopped(tmp_path):
    bins = _fake_binaries(tmp_path, "exec sleep 60\n")
    with pytest.raises(ClusterError, match="etcd not healthy after 1s"):
        cluster.up(_up(tmp_path, binaries=bins, timeout=1))
    assert processes.recorded(tmp_path / "w") == []
    assert not (tmp_path / "w" / "cluster.json").exists()


def test_a_workdir_that_is_a_file(tmp_path):
    from extender.localcluster.binaries import Binaries

    (tmp_path / "w").write_text("not a directory")
    missing = tmp_path / "never-started"
    bins = Binaries(etcd=missing, kube_apiserver=missing, kube_scheduler=missing, kwok=missing,
                    kube_controller_manager=missing)
    with pytest.raises(ClusterError, match="cannot use workdir .*/w: "):
        cluster.up(_up(tmp_path, binaries=bins))


def test_replicas_and_railyard_settings_are_checked_before_anything_starts(tmp_path):
    with pytest.raises(ClusterError, match="--replicas must be 1 or more, got 0"):
        cluster.up(_up(tmp_path, replicas=0))
    with pytest.raises(ClusterError, match="railyard settings were given with --no-extender"):
        cluster.up(_up(tmp_path, extender_settings={"gangs.binding_pause_seconds": 1}))
    assert processes.recorded(tmp_path / "w") == []


def test_extender_set_reads_each_value_as_yaml():
    parser = cli.argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["cluster", "up", "--replicas", "2", "--extender-set", "gangs.binding_pause_seconds=2",
                              "--extender-set", "gangs.recovery_grace_seconds=0.5"])
    assert args.replicas == 2
    assert dict(args.extender_settings) == {"gangs.binding_pause_seconds": 2, "gangs.recovery_grace_seconds": 0.5}
    with pytest.raises(SystemExit):
        parser.parse_args(["cluster", "up", "--extender-set", "no-equals-sign"])


def test_given_binaries_without_the_controller_manager_need_no_controllers(tmp_path):
    from extender.localcluster.binaries import Binaries

    missing = tmp_path / "never-started"
    bins = Binaries(etcd=missing, kube_apiserver=missing, kube_scheduler=missing, kwok=missing)
    with pytest.raises(ClusterError, match="no kube-controller-manager; build it .* or run with --no-controllers"):
        cluster.up(_up(tmp_path, binaries=bins))
    assert processes.recorded(tmp_path / "w") == []
    # With --no-controllers the same binaries get as far as starting etcd (which is missing here).
    with pytest.raises(ClusterError, match="never-started"):
        cluster.up(_up(tmp_path, binaries=bins, controllers=False))


def test_controller_and_version_flags_reach_the_options():
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["cluster", "up"])
    assert args.controllers is True and args.kubernetes_version is None
    args = parser.parse_args(["cluster", "up", "--no-controllers", "--kubernetes-version", "1.38.0-beta.0"])
    assert args.controllers is False and args.kubernetes_version == "1.38.0-beta.0"
    assert parser.parse_args(["cluster", "build"]).kubernetes_versions == []
    args = parser.parse_args(["cluster", "build", "--kubernetes-version", "1.37.2",
                              "--kubernetes-version", "1.38.0-beta.0"])
    assert args.kubernetes_versions == ["1.37.2", "1.38.0-beta.0"]


def test_an_unpinned_kubernetes_version_is_refused_before_anything_starts(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(NODES)
    args = parser.parse_args(["cluster", "up", "--workdir", str(tmp_path / "w"), "--nodes", str(nodes),
                              "--no-extender", "--kubernetes-version", "1.30.0"])
    assert args.func(args) == 1
    assert "Kubernetes 1.30.0 is not pinned here; pinned versions: 1.37.2 (tools/kube)" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_status_says_which_controllers_run_and_the_kubernetes_version(tmp_path, capsys):
    import argparse
    import json

    workdir = tmp_path / "w"
    processes.start(workdir, "kube-controller-manager", ["sleep", "60"])
    try:
        state = {"phase": "running", "apiServer": "https://127.0.0.1:3", "kubernetes": "v1.37.2", "nodes": 1,
                 "extender": None, "kubeconfig": "k",
                 "controllerManager": {"controllers": ["job-controller", "garbage-collector-controller"]}}
        (workdir / "cluster.json").write_text(json.dumps(state))
        assert cli.run_status(argparse.Namespace(workdir=workdir)) == 0
        out = capsys.readouterr().out
        assert "kube-controller-manager running" in out
        assert "(Kubernetes v1.37.2, 1 nodes, running)" in out
        assert "controllers     job-controller, garbage-collector-controller" in out
        (workdir / "cluster.json").write_text(json.dumps({**state, "controllerManager": None}))
        cli.run_status(argparse.Namespace(workdir=workdir))
        assert "controllers     off (--no-controllers)" in capsys.readouterr().out
    finally:
        cluster.down(workdir, quiet=True)
