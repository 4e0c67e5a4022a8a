"""Which of the node's annotated pods the agent believes: those in the namespaces it reads (by default its own),
matching its label selector, and not on the host's network unless allowed.

Any pod can carry ``fleetpilot.io/`` annotations: read from every namespace, a tenant's pod named to sort first took
over a pool's metrics and hid the real engine; a hostNetwork pod's IP is the node's, so its ``metrics-port`` could
point the agent at the kubelet or the agent's own ports. A pod outside the scope is never read, so it never takes a
pool from one inside, nor has a GPU attributed to a pool.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_agent.kube.api_client import SERVICE_ACCOUNT_DIR, KubeApiError

LabelPairs = tuple[tuple[str, str], ...]
# a label key (an optional DNS-subdomain prefix and a name) and value, as Kubernetes validates them
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def parse_label_selector(text: str) -> LabelPairs:
    """``app=vllm,tier==gpu`` → the pairs a pod's labels must all hold; only equality (a selector of ``!=``, ``in``
    or a bare key would widen what is read, the opposite of why it is set) is taken."""
    pairs = []
    for term in (t.strip() for t in text.split(",") if t.strip()):
        key, sep, value = term.replace("==", "=").partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key.endswith("!") or not _KEY.match(key) or not _VALUE.match(value):
            raise ValueError(f"kubernetes_pod_selector: {term!r} is not KEY=VALUE (only equality is supported)")
        pairs.append((key, value))
    return tuple(pairs)


def own_namespace(account_dir: Path = SERVICE_ACCOUNT_DIR) -> str:
    """The namespace of the agent's pod, from its service account's mount."""
    try:
        return (account_dir / "namespace").read_text().strip()
    except OSError:
        raise KubeApiError(
            0, f"no {account_dir / 'namespace'}: name the namespaces to read in kubernetes_pod_namespaces"
        ) from None


@dataclass(frozen=True)
class PodScope:
    namespaces: frozenset[str]
    labels: LabelPairs = ()
    host_network: bool = False

    @classmethod
    def of(cls, *, namespaces: Sequence[str], selector: str | None, host_network: bool, account_dir: Path) -> PodScope:
        """The agent's scope from its settings: ``namespaces``, else the agent's own (read from ``account_dir``)."""
        chosen = frozenset(namespaces) if namespaces else frozenset({own_namespace(account_dir)})
        return cls(chosen, parse_label_selector(selector or ""), host_network)

    def refusal(self, pod: dict[str, Any]) -> str | None:
        """Why ``pod`` is not believed, or None when it is."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        namespace = meta.get("namespace", "")
        if namespace not in self.namespaces:
            return f"namespace {namespace} is not one of the namespaces read ({', '.join(sorted(self.namespaces))})"
        labels = meta.get("labels") or {}
        missing = [f"{k}={v}" for k, v in self.labels if labels.get(k) != v]
        if missing:
            return f"its labels do not match kubernetes_pod_selector ({', '.join(missing)})"
        status = pod.get("status") or {}
        on_host = spec.get("hostNetwork") is True or (
            status.get("podIP") and status.get("podIP") == status.get("hostIP")
        )
        if on_host and not self.host_network:
            return (
                "it runs on the host's network: its port would be one of the node's own "
                "(kubernetes_pods_host_network allows it)"
            )
        return None
