"""Versions come from the helper modules' go.mod; a missing Go is one clear message."""

from __future__ import annotations

import pytest

from extender.localcluster import binaries
from extender.localcluster.errors import ClusterError


def test_versions_are_read_from_the_helper_modules():
    assert binaries.KUBERNETES.version().startswith("v1.")
    assert binaries.ETCD.version().startswith("v3.6.")
    assert binaries.KWOK.version().startswith("v0.")


@pytest.mark.parametrize(
    "text",
    [
        "module x\n\nrequire k8s.io/kubernetes v1.37.2\n",
        "module x\n\nrequire (\n\tk8s.io/kubernetes v1.37.2\n\tfoo v1 // indirect\n)\n",
        "module x\nrequire (\n  k8s.io/kubernetes v1.37.2 // indirect\n)\n",
    ],
)
def test_required_version_single_and_block_form(tmp_path, text):
    (tmp_path / "go.mod").write_text(text)
    assert binaries.required_version(tmp_path / "go.mod", "k8s.io/kubernetes") == "v1.37.2"


def test_required_version_does_not_match_a_longer_module_path(tmp_path):
    (tmp_path / "go.mod").write_text("require k8s.io/kubernetes-extra v9.9.9\n")
    with pytest.raises(binaries.BuildError, match="does not require k8s.io/kubernetes"):
        binaries.required_version(tmp_path / "go.mod", "k8s.io/kubernetes")


def test_kubernetes_ldflags_make_version_honest():
    flags = binaries.KUBERNETES.ldflags("v1.37.2")
    assert flags == [
        "-X k8s.io/component-base/version.gitVersion=v1.37.2",
        "-X k8s.io/component-base/version.gitMajor=1",
        "-X k8s.io/component-base/version.gitMinor=37",
    ]
    assert binaries.ETCD.ldflags("v3.6.16") == []


def test_build_command_is_static_and_trimmed(tmp_path):
    argv = binaries.build_command("go", binaries.KUBERNETES, "v1.37.2", tmp_path)
    assert argv[:5] == ["go", "build", "-v", "-trimpath", "-buildvcs=false"]
    assert argv[-2:] == ["k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-scheduler"]
    assert argv[argv.index("-o") + 1] == str(tmp_path) + "/"
    assert binaries.go_env({})["CGO_ENABLED"] == "0"


def test_a_single_binary_gets_its_own_name_not_the_package_s(tmp_path):
    argv = binaries.build_command("go", binaries.ETCD, "v3.6.16", tmp_path)
    assert argv[argv.index("-o") + 1] == str(tmp_path / "etcd")


def test_cache_dir_is_keyed_by_version_and_overridable(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILYARD_CACHE", str(tmp_path))
    assert binaries.cache_root() == tmp_path
    assert binaries.cached_dir(binaries.ETCD) == tmp_path / f"etcd-{binaries.ETCD.version()}"


def test_cached_binaries_are_reused_without_go(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    for component in binaries.COMPONENTS:
        directory = binaries.cached_dir(component, tmp_path)
        directory.mkdir(parents=True)
        for name in component.packages:
            (directory / name).write_text("#!/bin/sh\n")
            (directory / name).chmod(0o755)
    found = binaries.ensure(root=tmp_path)
    assert found.kube_scheduler == binaries.cached_dir(binaries.KUBERNETES, tmp_path) / "kube-scheduler"


def test_no_go_toolchain_is_one_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ClusterError, match="no Go toolchain: `go` is not on PATH"):
        binaries.ensure(root=tmp_path)


def test_proxy_failures_are_told_apart_from_build_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("GOPROXY", "https://proxy.example")
    log = tmp_path / "build.log"
    proxy = binaries._explain("etcd v3.6.16 (etcd)", 'go: x@v1: Get "https://proxy.example/x": dial tcp: i/o timeout\n', log)
    assert proxy.startswith("cannot build etcd v3.6.16 (etcd): fetching modules from the Go module proxy failed "
                            "(GOPROXY=https://proxy.example): go: x@v1")
    assert str(log) in proxy
    broken = binaries._explain("etcd v3.6.16 (etcd)", "# pkg\nfile.go:3:1: syntax error\n", log)
    assert broken == f"cannot build etcd v3.6.16 (etcd): file.go:3:1: syntax error; full log: {log}"


def test_helm_is_pinned_in_its_helper_module_and_built_only_when_asked():
    assert binaries.HELM.version() == "v4.3.2"
    assert binaries.HELM not in binaries.COMPONENTS and binaries.HELM in binaries.OPTIONAL_COMPONENTS
    # Without it, helm reports only the minor its source carries ("v4.3").
    assert binaries.HELM.ldflags("v4.3.2") == ["-X helm.sh/helm/v4/internal/version.version=v4.3.2"]
    argv = binaries.build_command("go", binaries.HELM, "v4.3.2", binaries.cache_root())
    assert argv[-1] == "helm.sh/helm/v4/cmd/helm" and argv[argv.index("-o") + 1].endswith("/helm")


def test_helm_is_asked_for_its_version_as_helm_answers(tmp_path):
    """helm has no --version flag: `helm version --short` prints v4.3.2."""
    fake = tmp_path / "helm"
    fake.write_text('#!/bin/sh\n[ "$1 $2" = "version --short" ] && echo v4.3.2 && exit 0\nexit 1\n')
    fake.chmod(0o755)
    binaries._check_versions(binaries.HELM, "v4.3.2", tmp_path)
    with pytest.raises(binaries.BuildError, match="reports 'v4.3.2'"):
        binaries._check_versions(binaries.HELM, "v4.3.3", tmp_path)


def test_cached_helm_is_reused_without_go_and_described(tmp_path, monkeypatch):
    (line,) = [line for line in binaries.describe(tmp_path) if line.startswith("helm")]
    assert "helm v4.3.2: not built yet (optional: --with-helm)" in line
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    directory = binaries.cached_dir(binaries.HELM, tmp_path)
    directory.mkdir(parents=True)
    (directory / "helm").write_text("#!/bin/sh\n")
    (directory / "helm").chmod(0o755)
    assert binaries.ensure_helm(root=tmp_path) == directory / "helm"
    assert any(line.startswith("helm v4.3.2: cached") for line in binaries.describe(tmp_path))
