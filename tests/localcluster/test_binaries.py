"""Versions come from the helper modules' go.mod; a missing Go is one clear message."""

from __future__ import annotations

import pytest

from extender.localcluster import binaries
from extender.localcluster.errors import ClusterError

from .fakes import fake_cache


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
    fake_cache(tmp_path, binaries.COMPONENTS)
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


# -- kube-controller-manager and Kubernetes versions -----------------------------------------------

def _tools(tmp_path, **modules: str):
    """A tools/ tree: directory name -> go.mod text."""
    tools = tmp_path / "tools"
    for name, text in modules.items():
        (tools / name).mkdir(parents=True)
        (tools / name / "go.mod").write_text(text)
    return tools


def _kube_mod(version: str, go: str = "1.26.0", toolchain: str = "") -> str:
    return (f"module x\n\ngo {go}\n" + (f"\ntoolchain {toolchain}\n" if toolchain else "")
            + f"\nrequire k8s.io/kubernetes {version}\n")


def test_the_controller_manager_is_built_from_the_kubernetes_helper_module_with_honest_version_flags():
    kcm = binaries.KUBE_CONTROLLER_MANAGER
    assert kcm in binaries.COMPONENTS
    assert kcm.tool_dir == binaries.KUBERNETES.tool_dir and kcm.version() == binaries.KUBERNETES.version()
    assert kcm.packages == {"kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager"}
    assert kcm.ldflags("v1.37.2") == binaries.KUBERNETES.ldflags("v1.37.2")
    assert kcm.version_marker("v1.37.2") == "v1.37.2"
    # Its own cache entry: the API server and scheduler of that version keep theirs.
    assert binaries.cached_dir(kcm).name == f"kube-controller-manager-{kcm.version()}"


def test_every_pinned_kubernetes_version_is_found_the_default_first(tmp_path):
    tools = _tools(tmp_path, kube=_kube_mod("v1.37.2"),
                   **{"kube-1.38": _kube_mod("v1.38.0-beta.0", "1.27.0", "go1.27.3")},
                   kueue="module y\nrequire sigs.k8s.io/kueue v0.17.0\n")
    assert binaries.kubernetes_versions(tools) == {"v1.37.2": "kube", "v1.38.0-beta.0": "kube-1.38"}
    kube, kcm = binaries.kubernetes_components("1.38.0-beta.0", tools)
    assert (kube.tool_dir, kcm.tool_dir) == ("kube-1.38", "kube-1.38")
    assert kube.version(tools) == "v1.38.0-beta.0" and kube.name == "kubernetes"
    assert binaries.kubernetes_components("v1.38.0-beta.0", tools) == (kube, kcm)
    assert binaries.kubernetes_components(None, tools)[0] == binaries.KUBERNETES
    with pytest.raises(binaries.BuildError, match=r"Kubernetes 1\.36\.0 is not pinned here; pinned versions: "
                                                  r"1\.37\.2 \(tools/kube\), 1\.38\.0-beta\.0 \(tools/kube-1\.38\)"):
        binaries.kubernetes_components("1.36.0", tools)


def test_the_toolchain_line_sets_gotoolchain_for_that_module_only(tmp_path):
    tools = _tools(tmp_path, kube=_kube_mod("v1.37.2"),
                   **{"kube-1.38": _kube_mod("v1.38.0-beta.0", "1.27.0", "go1.27.3")})
    assert binaries.toolchain(tools / "kube-1.38" / "go.mod") == "go1.27.3"
    assert binaries.toolchain(tools / "kube" / "go.mod") is None
    assert binaries.go_env({"GOTOOLCHAIN": "local"}, tools / "kube-1.38")["GOTOOLCHAIN"] == "go1.27.3"
    assert binaries.go_env({"GOTOOLCHAIN": "local"}, tools / "kube")["GOTOOLCHAIN"] == "local"  # unchanged
    assert "GOTOOLCHAIN" not in binaries.go_env({})


def test_the_pinned_1_38_module_names_its_toolchain():
    versions = binaries.kubernetes_versions()
    assert list(versions)[0] == binaries.KUBERNETES.version()  # tools/kube stays the default
    newer = {v: d for v, d in versions.items() if v.startswith("v1.38.")}
    assert newer, "tools/kube-1.38 pins Kubernetes 1.38"
    for directory in newer.values():
        assert binaries.toolchain(binaries.TOOLS_DIR / directory / "go.mod").startswith("go1.27.")


def _fake_cache(root, components):
    for component in components:
        directory = binaries.cached_dir(component, root)
        directory.mkdir(parents=True, exist_ok=True)
        for name in component.packages:
            (directory / name).write_text("#!/bin/sh\n")
            (directory / name).chmod(0o755)


def test_ensure_picks_the_asked_version_and_the_controller_manager_only_when_wanted(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no Go: everything must come from the cache
    newer = next(v for v in binaries.kubernetes_versions() if v.startswith("v1.38."))
    _fake_cache(tmp_path, binaries.COMPONENTS + binaries.kubernetes_components(newer))
    found = binaries.ensure(root=tmp_path)
    assert found.kube_controller_manager == (binaries.cached_dir(binaries.KUBE_CONTROLLER_MANAGER, tmp_path)
                                             / "kube-controller-manager")
    assert found.kubernetes_version == binaries.KUBERNETES.version()
    assert binaries.ensure(root=tmp_path, controllers=False).kube_controller_manager is None
    other = binaries.ensure(root=tmp_path, kubernetes_version=newer.removeprefix("v"))
    assert other.kubernetes_version == newer
    assert other.kube_apiserver == tmp_path / f"kubernetes-{newer}" / "kube-apiserver"
    assert other.kube_controller_manager == tmp_path / f"kube-controller-manager-{newer}" / "kube-controller-manager"


def test_a_refusing_proxy_is_a_proxy_failure_naming_the_module(tmp_path):
    output = ("go: railyard.dev/tools/kube-1.38 imports\n\tk8s.io/kubernetes/cmd/kube-apiserver/app imports\n"
              "\tk8s.io/apiextensions-api/pkg/apis/apiextensions/v1: k8s.io/apiextensions-api@v0.38.0-beta.0: "
              "reading https://proxy.golang.org/k8s.io/apiextensions-api/@v/v0.38.0-beta.0.zip: 403 Forbidden\n"
              "\tserver response: This module version is not available.\n")
    message = binaries._explain("kubernetes v1.38.0-beta.0 (kube-apiserver)", output, tmp_path / "log")
    assert "fetching modules from the Go module proxy failed" in message
    assert "k8s.io/apiextensions-api@v0.38.0-beta.0" in message and "403 Forbidden" in message


def test_a_missing_go_sum_entry_names_the_package_not_go_s_hint(tmp_path):
    output = ("/m/apiserver.go:26:2: missing go.sum entry for module providing package k8s.io/apiextensions-api/x "
              "(imported by k8s.io/apiextensions-apiserver/pkg/apiserver); to add:\n"
              "\tgo get k8s.io/apiextensions-apiserver/pkg/apiserver@v0.0.0\n")
    message = binaries._explain("kubernetes v1.38.0-beta.0 (kube-apiserver)", output, tmp_path / "log")
    assert "providing package k8s.io/apiextensions-api/x" in message and "go get" not in message
    assert "the helper module's go.sum lacks that module" in message


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
