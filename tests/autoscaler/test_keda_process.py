"""``fleetpilot server --keda-port P`` as a real process: KEDA's external scaler answers on P from the database the
API serves, with one worker and with ``--workers 2`` (served by the supervisor alone), and at SIGTERM ends its
streams cleanly before the port closes; with ``FLEETPILOT_KEDA_TLS_*`` only to a client certificate of its CA."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from collector.database import make_engine
from fleet.pools import PoolSpec, PoolStore
from fleetpilot.launch import ServerProcess
from inference_agent.ports import free_port
from tests.support.certs import make_pki

pytestmark = pytest.mark.slow


@dataclass
class KedaServerProcess(ServerProcess):
    keda_port: int = field(default_factory=free_port)

    def command(self) -> list[str]:
        return [*super().command(), "--keda-port", str(self.keda_port)]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_the_server_process_serves_the_scaler_on_its_keda_port(tmp_path: Path, workers: int) -> None:
    url = f"sqlite:///{tmp_path}/fleetpilot.db"
    server = KedaServerProcess(url, workers=workers)
    with server:
        engine = make_engine(url)
        PoolStore(engine).create("chat", PoolSpec(replica_capacity=20.0), now=time.time())
        engine.dispose()
        with grpc.insecure_channel(f"127.0.0.1:{server.keda_port}") as channel:
            stub = ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
            ref = pb.ScaledObjectRef(name="chat", namespace="inference", scalerMetadata={"pool": "chat"})
            (spec,) = stub.GetMetricSpec(ref, timeout=10).metricSpecs
            assert (spec.metricName, spec.targetSizeFloat, spec.targetSize) == ("fleetpilot-chat", 20.0, 20)
            assert stub.IsActive(ref, timeout=10).result is True  # min_replicas 1
            with pytest.raises(grpc.RpcError) as missing:
                stub.GetMetricSpec(pb.ScaledObjectRef(scalerMetadata={"pool": "ghost"}), timeout=10)
            assert missing.value.code() is grpc.StatusCode.NOT_FOUND
            stream = stub.StreamIsActive(ref, timeout=30)
            assert next(stream).result is True
            server.stop()  # SIGTERM: the scaler ends its streams (status OK) before the port closes
            assert list(stream) == []
    assert not listening(server.keda_port)


def test_with_its_tls_settings_the_process_serves_only_a_client_certificate_of_its_ca(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    files = {"CERT_FILE": pki.server.cert, "KEY_FILE": pki.server.key, "CLIENT_CA_FILE": pki.ca.cert}
    url = f"sqlite:///{tmp_path}/fleetpilot.db"
    with KedaServerProcess(url, env={f"FLEETPILOT_KEDA_TLS_{k}": str(v) for k, v in files.items()}) as server:
        engine = make_engine(url)
        PoolStore(engine).create("chat", PoolSpec(replica_capacity=20.0), now=time.time())
        engine.dispose()
        ref = pb.ScaledObjectRef(name="chat", namespace="inference", scalerMetadata={"pool": "chat"})
        keda = grpc.ssl_channel_credentials(
            pki.ca.cert.read_bytes(), pki.client.key.read_bytes(), pki.client.cert.read_bytes()
        )
        with grpc.secure_channel(f"localhost:{server.keda_port}", keda) as channel:
            stub = ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
            assert stub.GetMetricSpec(ref, timeout=10).metricSpecs[0].targetSizeFloat == 20.0
        with grpc.insecure_channel(f"127.0.0.1:{server.keda_port}") as channel:
            stub = ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetMetricSpec(ref, timeout=10)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
