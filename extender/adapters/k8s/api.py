"""The one door to the API server: raw JSON over the kubernetes client's connection.

The kubernetes client supplies configuration, credentials, TLS and connection pooling; its
generated model classes are skipped, because building them for 100,000 pods costs seconds and
their validation rejects objects newer than the client. Callers get urllib3 responses or dicts.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import orjson
import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from extender.adapters.k8s.errors import KubernetesError, error_for_status


class Api:
    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] = (),
                body: Any = None, timeout: float | tuple[float, float] | None = 30,
                content_type: str = "application/json") -> urllib3.BaseHTTPResponse:
        """Send one request; a non-2xx answer raises the matching KubernetesError."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        what = f"{method} {path}"
        try:
            m, url, hdrs, data, post = self.client.param_serialize(
                method=method, resource_path=path, query_params=list(query), header_params=headers,
                body=body, auth_settings=["BearerToken"])
            resp = self.client.call_api(m, url, hdrs, data, post, _request_timeout=timeout).response
        except ApiException as exc:  # the REST layer's own failures (e.g. connection refused)
            raise error_for_status(exc.status or 0, f"{what}: {exc.reason or exc}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise error_for_status(0, f"{what}: {type(exc).__name__}: {exc}") from None
        if not 200 <= resp.status <= 299:
            raw = resp.read()
            resp.release_conn()
            raise error_for_status(resp.status, f"{what}: {resp.status} {_status_message(raw, resp.reason)}")
        return resp

    def json(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        resp = self.request(method, path, **kw)
        try:
            raw = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise error_for_status(0, f"{method} {path}: {type(exc).__name__}: {exc}") from None
        finally:
            resp.release_conn()
        try:
            return orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as exc:
            raise KubernetesError(f"{method} {path}: the API server sent invalid JSON: {exc}") from None


def json_lines(resp: urllib3.BaseHTTPResponse, chunk: int = 1 << 16) -> Iterator[dict[str, Any]]:
    """Each newline-delimited JSON document of a streaming (watch) response."""
    buf = b""
    for data in resp.stream(chunk, decode_content=True):
        buf += data
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl], buf[nl + 1:]
            if line.strip():
                yield orjson.loads(line)
    if buf.strip():
        yield orjson.loads(buf)


def _status_message(raw: bytes, reason: str | None) -> str:
    """The API server's Status message, else the HTTP reason."""
    try:
        status = orjson.loads(raw)
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    except orjson.JSONDecodeError:
        pass
    return reason or "no reason given"
