"""The fake API server's request, error and route types, shared by its resource modules."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.fake_kube.server import FakeKube


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    query: dict[str, str]


class ApiError(Exception):
    """An error answer: the HTTP code, the Status reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class Streamed(Exception):
    """A watch answer: 200, then each of ``events`` as one JSON line, sent as it comes (outside the fake's lock)."""

    def __init__(self, events: Iterator[dict[str, Any]]) -> None:
        super().__init__("a streamed answer")
        self.events = events


Handle = Callable[["FakeKube", RecordedRequest, re.Match[str]], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    """``handle`` answers the requests of ``methods`` whose path matches ``pattern`` (called under the fake's lock)."""

    methods: frozenset[str]
    pattern: re.Pattern[str]
    handle: Handle


def route(methods: str, pattern: str) -> Callable[[Handle], Route]:
    """``@route("GET PATCH", r"^/apis/...$")`` over a handler makes it a Route."""

    def wrap(handle: Handle) -> Route:
        return Route(frozenset(methods.split()), re.compile(pattern), handle)

    return wrap


def forbidden(kube: FakeKube, verb: str, resource: str, group: str, namespace: str, named: str = "") -> None:
    """403 for a verb in ``kube.forbidden`` or a namespace in ``kube.forbidden_namespaces``, worded as the API server
    words an RBAC refusal."""
    if verb not in kube.forbidden and namespace not in kube.forbidden_namespaces:
        return
    user = f"system:serviceaccount:{namespace}:fleetpilot"
    kind = resource.split("/", maxsplit=1)[0]
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    raise ApiError(
        403,
        "Forbidden",
        f'{kind}.{group}{named} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}"{where}',
    )
