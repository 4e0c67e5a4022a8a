"""Optimistic concurrency over HTTP: a versioned resource's GET answers ``ETag: "<version>"``, and a PATCH, PUT,
POST or DELETE carrying ``If-Match`` goes ahead only while the resource is still at that version (else 412 with
the version it is at now). Two operators editing one quota thus never overwrite each other silently.

The ETag names the stored version, which every edit bumps; live figures beside it in an answer (a pool's
``current_replicas``) may change without it. A body ``version`` (the older way) still works and answers 409.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Header, Response

from web.errors import ApiError

_TAG = re.compile(r'^\s*(?:W/)?"?(\d{1,18})"?\s*$')


def etag(version: int) -> str:
    return f'"{version}"'


def tag(response: Response, version: int) -> None:
    """Set the ETag of the answer's resource."""
    response.headers["ETag"] = etag(version)


def parse_if_match(value: str | None) -> frozenset[int] | None:
    """The versions an ``If-Match`` accepts; None when any version will do (no header, or ``*``).

    A tag this API never gave (``"abc"``) matches no version, so the request answers 412, as RFC 9110 says.
    """
    if value is None or value.strip() in ("", "*"):
        return None
    versions = set()
    for part in value.split(","):
        found = _TAG.match(part)
        if found:
            versions.add(int(found.group(1)))
    return frozenset(versions)


def _if_match(
    if_match: Annotated[
        str | None, Header(description='the ETag this edit is based on (`"3"`); 412 if the resource moved on')
    ] = None,
) -> frozenset[int] | None:
    return parse_if_match(if_match)


IfMatch = Annotated[frozenset[int] | None, Depends(_if_match)]


def require_match(accepted: frozenset[int] | None, current_version: int, what: str) -> None:
    """412 naming the current version when ``If-Match`` does not name it."""
    if accepted is not None and current_version not in accepted:
        named = ", ".join(etag(v) for v in sorted(accepted)) or "no version this API gave"
        raise ApiError(
            412,
            f"{what} is at version {current_version} (ETag {etag(current_version)}), not {named}: "
            "re-read it and apply the edit again",
            current_version=current_version,
        )
