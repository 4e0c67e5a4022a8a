"""A pool's scale target: the Kubernetes object whose ``/scale`` subresource holds its replicas.

Written ``apiVersion/kind/namespace/name`` — ``apps/v1/Deployment/serving/llama-8b``,
``leaderworkerset.x-k8s.io/v1/LeaderWorkerSet/serving/llama-70b``, or a core kind as ``v1/ReplicationController/ns/x``
— so any workload with a scale subresource (a custom resource too) can be named, in any namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wire.errors import FieldError

MAX_SCALE_TARGET_LENGTH = 512  # the column's width; a group (253) + version + kind + namespace (63) + name fit
GROUP_PATTERN = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"  # a DNS subdomain
VERSION_PATTERN = r"v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?"  # v1, v2beta1: Kubernetes' version convention
KIND_PATTERN = r"[A-Z][A-Za-z0-9]{0,62}"
NAMESPACE_PATTERN = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"  # a DNS label
OBJECT_NAME_PATTERN = r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?"  # a DNS subdomain, as workloads' names are

_PARTS = (
    ("version", VERSION_PATTERN, "v1 or v2beta1"),
    ("kind", KIND_PATTERN, "CamelCase, like Deployment"),
    ("namespace", NAMESPACE_PATTERN, "a DNS label"),
    ("name", OBJECT_NAME_PATTERN, "a DNS subdomain"),
)


@dataclass(frozen=True)
class ScaleTarget:
    """``group`` is ``""`` for the core API (``v1``); ``api_version`` is ``group/version`` as objects write it."""

    group: str
    version: str
    kind: str
    namespace: str
    name: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.api_version}/{self.kind}/{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ScaleTarget:
        """``apiVersion/kind/namespace/name``; a FieldError on ``scale_target`` names the part that is malformed."""
        if len(text) > MAX_SCALE_TARGET_LENGTH:
            raise FieldError("scale_target", f"at most {MAX_SCALE_TARGET_LENGTH} characters, got {len(text)}")
        parts = text.split("/")
        # four parts are the core API's v1/Kind/namespace/name; apps/v1/Deployment/x lacks a namespace or a name
        if len(parts) not in (4, 5) or (len(parts) == 4 and not re.fullmatch(VERSION_PATTERN, parts[0])):
            raise FieldError(
                "scale_target",
                f"expected apiVersion/kind/namespace/name (e.g. apps/v1/Deployment/serving/llama-8b), got {text!r}",
            )
        group = parts[0] if len(parts) == 5 else ""
        if group and not re.fullmatch(GROUP_PATTERN, group):
            raise FieldError("scale_target", f"API group {group!r} is not a DNS subdomain (in {text!r})")
        for (part, pattern, shape), value in zip(_PARTS, parts[-4:], strict=True):
            if not re.fullmatch(pattern, value):
                raise FieldError("scale_target", f"{part} {value!r} is not {shape} (in {text!r})")
        return cls(group, *parts[-4:])

    @classmethod
    def default(cls, namespace: str, pool: str) -> ScaleTarget:
        """Where a pool without a scale target lives: the Deployment named after it in the actuator's namespace."""
        return cls("apps", "v1", "Deployment", namespace, pool)
