"""The few calls the agent makes to the Kubernetes API server, over httpx: list this node's pods and watch them.

In a pod the server is ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, verified with the service
account's ``ca.crt``, and each request carries the service account token, read again whenever its file changes
(the kubelet rotates projected tokens; a token read once expires after an hour or so).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
WATCH_TIMEOUT_S = 300  # the server ends each watch after this; the next one resumes from the last resourceVersion


class KubeApiError(Exception):
    """The API server refused a request or could not be reached; ``code`` is the HTTP status (0: no answer)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"Kubernetes API: {message}" if code == 0 else f"Kubernetes API {code}: {message}")
        self.code = code


class Gone(KubeApiError):
    """410: the resourceVersion asked for is older than the server keeps; list again."""


class TokenFile(httpx.Auth):
    """``Authorization: Bearer`` with the token in ``path``, read again when the file's mtime or size changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token()}"
        yield request

    def token(self) -> str:
        try:
            stat = self._path.stat()
            if (stat.st_mtime_ns, stat.st_size) != self._stamp:
                self._token = self._path.read_text().strip()
                self._stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError as exc:
            raise KubeApiError(0, f"cannot read the service account token {self._path} ({exc.strerror})") from None
        return self._token


@dataclass(frozen=True)
class WatchEvent:
    """One line of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK (``object`` holds only the resourceVersion)."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str | None:
        version: str | None = (self.object.get("metadata") or {}).get("resourceVersion")
        return version


class KubeApi:
    """Pods of one node: ``list_pods`` and ``watch_pods`` (``transport`` for tests; ``verify`` the CA bundle)."""

    def __init__(
        self,
        base_url: str,
        auth: httpx.Auth,
        *,
        verify: ssl.SSLContext | bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        timeout = httpx.Timeout(10.0, read=WATCH_TIMEOUT_S + 30.0)
        self._http = httpx.Client(base_url=base_url, auth=auth, verify=verify, timeout=timeout, transport=transport)
        self._watching: httpx.Response | None = None  # the open watch stream, which close() ends
        self.base_url = base_url

    @classmethod
    def in_cluster(cls, environ: Mapping[str, str] = os.environ, account_dir: Path = SERVICE_ACCOUNT_DIR) -> KubeApi:
        """The API server of the cluster this pod runs in; KubeApiError says what is missing outside one."""
        host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise KubeApiError(0, "KUBERNETES_SERVICE_HOST/PORT are unset: pod discovery runs only in a pod")
        ca = account_dir / "ca.crt"
        if not ca.is_file():
            raise KubeApiError(0, f"no CA bundle at {ca}: is a service account token mounted?")
        host = f"[{host}]" if ":" in host else host
        return cls(
            f"https://{host}:{port}", TokenFile(account_dir / "token"), verify=ssl.create_default_context(cafile=ca)
        )

    def list_pods(self, node: str) -> tuple[list[dict[str, Any]], str]:
        """Every pod on ``node`` and the list's resourceVersion, to watch from."""
        try:
            response = self._http.get("/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"})
        except httpx.HTTPError as exc:
            raise KubeApiError(0, f"listing pods: {exc}") from None
        body = _answer(response)
        return list(body.get("items") or []), str((body.get("metadata") or {}).get("resourceVersion", ""))

    def watch_pods(self, node: str, resource_version: str) -> Iterator[WatchEvent]:
        """The changes to ``node``'s pods after ``resource_version``, until the server ends the stream.

        Raises Gone when the version is too old (an HTTP 410 or an ERROR event carrying one), KubeApiError for any
        other refusal or a dropped connection."""
        params = {
            "fieldSelector": f"spec.nodeName={node}",
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_S),
        }
        try:
            with self._http.stream("GET", "/api/v1/pods", params=params) as response:
                self._watching = response
                if response.status_code != 200:
                    response.read()
                    _answer(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield _event(line)
        except httpx.HTTPError as exc:
            raise KubeApiError(0, f"pod watch dropped: {exc}") from None
        finally:
            self._watching = None

    def close(self) -> None:
        """Close the client; a watch blocked reading its stream on another thread ends at once (its socket is shut:
        closing it would leave that thread's read waiting for the server)."""
        watching = self._watching
        stream = watching.extensions.get("network_stream") if watching is not None else None
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._http.close()


def _answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON body of a 200; else the Status' message as a KubeApiError (Gone for 410)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code == 200 and isinstance(body, dict):
        return body
    message = body.get("message") if isinstance(body, dict) else None
    error = Gone if response.status_code == 410 else KubeApiError
    raise error(response.status_code, str(message or response.text[:200] or response.reason_phrase))


def _event(line: str) -> WatchEvent:
    try:
        event = json.loads(line)
        kind, obj = event["type"], event["object"]
    except (ValueError, KeyError, TypeError):
        raise KubeApiError(0, f"not a watch event: {line[:200]!r}") from None
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        raise (Gone if code == 410 else KubeApiError)(code, str(obj.get("message", "watch error")))
    return WatchEvent(str(kind), obj)
