"""A kubelet pod-resources server on a unix socket, built from the generated ``podresources.proto`` (v1): it answers
``List`` with the pods and devices a test sets in ``pods``; ``Get`` and ``GetAllocatableResources`` answer
UNIMPLEMENTED (the agent calls only ``List``)."""

from __future__ import annotations

from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import grpc

from inference_agent.kube import podresources_pb2, podresources_pb2_grpc


@dataclass(frozen=True)
class FakePodDevices:
    """One pod's container and the device ids it holds of ``resource``."""

    namespace: str
    name: str
    device_ids: tuple[str, ...]
    resource: str = "nvidia.com/gpu"
    container: str = "engine"


class _Lister(podresources_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, fake: FakePodResources) -> None:
        self._fake = fake

    def List(  # noqa: N802 (the gRPC method's name)
        self, request: podresources_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> podresources_pb2.ListPodResourcesResponse:
        return self._fake.answer()


@dataclass
class FakePodResources:
    """``with FakePodResources(socket) as kubelet:`` serves ``kubelet.pods`` at ``socket``."""

    socket: Path
    pods: list[FakePodDevices] = field(default_factory=list)
    calls: int = 0
    _server: grpc.Server | None = None

    def answer(self) -> podresources_pb2.ListPodResourcesResponse:
        self.calls += 1
        return podresources_pb2.ListPodResourcesResponse(
            pod_resources=[
                podresources_pb2.PodResources(
                    name=pod.name,
                    namespace=pod.namespace,
                    containers=[
                        podresources_pb2.ContainerResources(
                            name=pod.container,
                            devices=[
                                podresources_pb2.ContainerDevices(
                                    resource_name=pod.resource, device_ids=list(pod.device_ids)
                                )
                            ],
                        )
                    ],
                )
                for pod in self.pods
            ]
        )

    def __enter__(self) -> FakePodResources:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(  # type: ignore[no-untyped-call]
            _Lister(self), self._server
        )
        self._server.add_insecure_port(f"unix://{self.socket.absolute()}")
        self._server.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.stop(grace=None)
