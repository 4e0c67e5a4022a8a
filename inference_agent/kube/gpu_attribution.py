"""Per-GPU rows carry the pod and pool that use the GPU, as dcgm-exporter labels its rows: the kubelet says which
device ids a pod holds, NVML's inventory says which index has which UUID.

A GPU no pod holds, a MIG device (its UUID is not an NVML index's) and everything while the kubelet cannot be
asked stay unattributed: ``pool`` null and no ``extra.pod``, never a guess.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from inference_agent.kube.pod_resources import PodResourcesClient, PodResourcesUnavailable
from inference_agent.probes.base import GpuInfo, GpuProbe, Reading

log = logging.getLogger(__name__)
REFRESH_S = 10.0


@dataclass(frozen=True)
class GpuUser:
    """Who uses one GPU: ``pod`` ("ns/name", or several joined by "," for a time-sliced GPU) and their pool, when
    the pods are fleetpilot's and agree on it."""

    pod: str
    pool: str | None


def attribute(
    device_pods: Mapping[str, Sequence[str]], inventory: Sequence[GpuInfo], pools: Mapping[str, str]
) -> dict[int, GpuUser]:
    """GPU index → its user. ``GPU-a::0`` and ``GPU-a::1`` (time-sliced replicas) both count as ``GPU-a``; a
    time-sliced GPU shared by ns/a (pool chat) and ns/b (pool code) names both pods and no pool."""
    by_uuid: dict[str, list[str]] = {}
    for device, users in device_pods.items():
        held = by_uuid.setdefault(device.partition("::")[0], [])
        held.extend(user for user in users if user not in held)
    found: dict[int, GpuUser] = {}
    for gpu in inventory:
        users = sorted(by_uuid.get(gpu.uuid or "", []))
        if users:
            served = {pools.get(user) for user in users}
            pool = served.pop() if len(served) == 1 else None
            found[gpu.index] = GpuUser(",".join(users), pool)
    return found


def attributed(readings: list[Reading], users: Mapping[int, GpuUser]) -> list[Reading]:
    """``readings`` with each used GPU's pool and ``extra.pod``."""
    out = []
    for reading in readings:
        user = users.get(reading.device) if reading.device is not None else None
        if user is None:
            out.append(reading)
        else:
            out.append(replace(reading, pool=user.pool, extra={**reading.extra, "pod": user.pod}))
    return out


class AttributedGpuProbe:
    """A ``GpuProbe`` whose readings say which pod uses each GPU, asked of the kubelet every ``refresh_s`` and
    whenever ``refresh()`` is called (a pod came or went)."""

    def __init__(
        self,
        gpu: GpuProbe,
        kubelet: PodResourcesClient,
        pools: Callable[[], Mapping[str, str]],
        *,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.name = gpu.name
        self._gpu = gpu
        self._kubelet = kubelet
        self._pools = pools
        self._refresh_s = refresh_s
        self._users: dict[int, GpuUser] = {}
        self._failing: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-attribution", daemon=True)
        self._thread.start()

    def inventory(self) -> list[GpuInfo]:
        return self._gpu.inventory()

    def read(self) -> list[Reading]:
        return attributed(self._gpu.read(), self._users)

    def refresh(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self._users = self._ask()
            self._wake.wait(self._refresh_s)

    def _ask(self) -> dict[int, GpuUser]:
        try:
            device_pods = self._kubelet.device_pods()
        except PodResourcesUnavailable as exc:
            if self._failing != str(exc):
                log.warning("%s: GPU rows carry no pod or pool until it answers", exc)
            self._failing = str(exc)
            return {}
        if self._failing is not None:
            log.info("kubelet pod-resources answers again: GPU rows carry their pods")
        self._failing = None
        return attribute(device_pods, self._gpu.inventory(), self._pools())

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
        self._kubelet.close()
        self._gpu.close()
