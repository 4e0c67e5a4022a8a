"""The kubelet's pod-resources API (``podresources.proto``, v1): which pod's containers hold which devices.

``List`` over the kubelet's unix socket answers every pod of the node with the device ids the device plugins gave
its containers; for ``nvidia.com/gpu`` those are GPU UUIDs (``GPU-…``), MIG device UUIDs (``MIG-…``) under a MIG
strategy, and ``UUID::N`` for the N-th time-sliced replica of a shared GPU (NVIDIA's device plugin).
"""

from __future__ import annotations

from pathlib import Path

import grpc

from inference_agent.kube import podresources_pb2, podresources_pb2_grpc

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
GPU_RESOURCE = "nvidia.com/gpu"


class PodResourcesUnavailable(Exception):
    """The kubelet's pod-resources socket is missing or did not answer; the message says which."""


class PodResourcesClient:
    """``device_pods()``: device id → the pods (``namespace/name``) whose containers hold it, for ``resource``."""

    def __init__(self, socket_path: Path = DEFAULT_SOCKET, *, resource: str = GPU_RESOURCE, timeout_s: float = 2.0):
        self.socket_path = socket_path
        self._resource = resource
        self._timeout_s = timeout_s
        self._channel = grpc.insecure_channel(f"unix://{socket_path.absolute()}")
        self._stub = podresources_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]

    def device_pods(self) -> dict[str, list[str]]:
        if not self.socket_path.exists():
            raise PodResourcesUnavailable(f"no kubelet pod-resources socket at {self.socket_path}")
        try:
            answer = self._stub.List(podresources_pb2.ListPodResourcesRequest(), timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise PodResourcesUnavailable(
                f"kubelet pod-resources List at {self.socket_path}: {exc.code().name} {exc.details()}"
            ) from None
        found: dict[str, list[str]] = {}
        for pod in answer.pod_resources:
            key = f"{pod.namespace}/{pod.name}"
            for container in pod.containers:
                for devices in container.devices:
                    if devices.resource_name != self._resource:
                        continue
                    for device in devices.device_ids:
                        users = found.setdefault(device, [])
                        if key not in users:
                            users.append(key)
        return found

    def close(self) -> None:
        self._channel.close()
