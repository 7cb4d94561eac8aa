"""The extender's identity objects are created where the API expects them (no cluster)."""

from __future__ import annotations

import json

import pytest
import yaml

from extender.localcluster import config, identity, pki
from extender.localcluster.errors import ClusterError


class RecordingApi:
    """Answers like the API server would for these calls; records what was asked."""

    def __init__(self, token_status: int = 201):
        self.created: list[tuple[str, str]] = []
        self.token_status = token_status

    def create(self, path, obj):
        self.created.append((path, obj["metadata"]["name"]))

    def request(self, method, path, body=None):
        assert (method, path) == ("POST", "/api/v1/namespaces/railyard-system/serviceaccounts/railyard/token")
        assert body["spec"]["expirationSeconds"] == identity.TOKEN_SECONDS
        return self.token_status, json.dumps({"status": {"token": "tok-123"}}).encode()


def test_objects_go_to_their_collections_and_the_token_to_a_kubeconfig(tmp_path):
    api = RecordingApi()
    files = pki.generate(tmp_path / "pki")
    user = identity.create_extender_identity(api, files.ca_cert, "https://127.0.0.1:6443", tmp_path / "ext.kubeconfig")
    assert user == "system:serviceaccount:railyard-system:railyard"
    assert api.created[0] == ("/api/v1/namespaces", "railyard-system")
    assert ("/api/v1/namespaces/railyard-system/serviceaccounts", "railyard") in api.created
    assert ("/apis/rbac.authorization.k8s.io/v1/clusterroles", "railyard-extender") in api.created
    assert len(api.created) == len(config.extender_objects())
    kc = yaml.safe_load((tmp_path / "ext.kubeconfig").read_text())
    assert kc["users"][0]["user"] == {"token": "tok-123"}
    assert (tmp_path / "ext.kubeconfig").stat().st_mode & 0o777 == 0o600


def test_a_refused_token_request_says_so(tmp_path):
    files = pki.generate(tmp_path / "pki")
    with pytest.raises(ClusterError, match="requesting a token for ServiceAccount railyard-system/railyard failed: HTTP 403"):
        identity.create_extender_identity(RecordingApi(403), files.ca_cert, "https://x", tmp_path / "k")


def test_an_unknown_kind_is_named():
    with pytest.raises(ClusterError, match="has a Deployment"):
        identity.collection_path({"kind": "Deployment", "metadata": {"name": "x", "namespace": "y"}})
