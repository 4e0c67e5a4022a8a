"""The KEDA port under abuse (issue 35 #9): held ``StreamIsActive`` streams cannot take every worker from KEDA's own
``GetMetrics``, and with the settings naming a certificate, key and client CA the port is TLS that only a client
certificate of that CA passes (KEDA's ``caCert``, ``tlsClientCert``, ``tlsClientKey``), renewed files taking effect
at the next connection; outside development a port off loopback without TLS does not start. Real certificates, a
real gRPC server and client."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine

from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from fleetpilot.server import keda_scaler
from fleetpilot.settings import ServerSettings
from tests.autoscaler.test_keda_scaler import metric_value, pool, ref, report, served_stub
from tests.support.certs import KeyPair, Pki, make_pki
from tests.support.clock import FakeClock
from web.services import AppServices


@pytest.fixture
def stub(engine: Engine, clock: FakeClock) -> Iterator[ExternalScalerStub]:
    with served_stub(engine, clock) as served:
        yield served


def test_held_streams_leave_get_metrics_a_worker(engine: Engine, clock: FakeClock, stub: ExternalScalerStub) -> None:
    pool(engine, clock)
    report(engine, clock, demand=40.0, ready=2)
    served = metric_value(stub)
    streams = [stub.StreamIsActive(ref(), timeout=60) for _ in range(16)]
    try:
        answered, refused = [], []
        for stream in streams:
            try:
                answered.append(next(stream).result)
            except grpc.RpcError as error:
                refused.append(error)
        assert len(answered) == 12  # keda_max_streams' default
        assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "12 StreamIsActive streams are open already (keda_max_streams)" in refused[0].details()
        assert metric_value(stub) == served, "GetMetrics answers beside the held streams"
    finally:
        for stream in streams:
            stream.cancel()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_settings(pki: Pki, **changes: Any) -> ServerSettings:
    tls = {
        "keda_tls_cert_file": pki.server.cert,
        "keda_tls_key_file": pki.server.key,
        "keda_tls_client_ca_file": pki.ca.cert,
    }
    return ServerSettings(**{"database_url": "sqlite://", "keda_port": 0, **tls, **changes})


@pytest.fixture
def tls_port(services: AppServices, engine: Engine, clock: FakeClock, pki: Pki) -> Iterator[int]:
    pool(engine, clock)
    with keda_scaler(services, tls_settings(pki)) as server:
        assert server is not None
        yield server.port


def spec_over(channel: grpc.Channel) -> float:
    (spec,) = ExternalScalerStub(channel).GetMetricSpec(ref(), timeout=10).metricSpecs  # type: ignore[no-untyped-call]
    return float(spec.targetSizeFloat)


def mutual(pki: Pki, client: KeyPair | None) -> grpc.ChannelCredentials:
    """What KEDA dials with: our CA (caCert) and, when given, a client certificate and key."""
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.cert.read_bytes(),
        private_key=client.key.read_bytes() if client else None,
        certificate_chain=client.cert.read_bytes() if client else None,
    )


def test_a_client_certificate_of_the_ca_is_served(tls_port: int, pki: Pki) -> None:
    with grpc.secure_channel(f"localhost:{tls_port}", mutual(pki, pki.client)) as channel:
        assert spec_over(channel) == 10.0  # the pool's per-replica target


@pytest.mark.parametrize("client", ["none", "stranger", "plaintext"])
def test_without_a_client_certificate_of_the_ca_the_handshake_fails(tls_port: int, pki: Pki, client: str) -> None:
    target = f"localhost:{tls_port}"
    if client == "plaintext":
        channel = grpc.insecure_channel(target)
    else:
        channel = grpc.secure_channel(target, mutual(pki, pki.stranger if client == "stranger" else None))
    with channel, pytest.raises(grpc.RpcError) as refused:
        spec_over(channel)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE  # no pool, no target was read


def test_renewed_certificate_files_are_served_from_the_next_connection(
    services: AppServices, engine: Engine, clock: FakeClock, pki: Pki, tmp_path: Path
) -> None:
    """As a Secret volume renews them (cert-manager): the same paths, new files; no restart."""
    pool(engine, clock)
    live = tmp_path / "live"
    live.mkdir()
    for name, source in (("tls.crt", pki.server.cert), ("tls.key", pki.server.key), ("ca.crt", pki.ca.cert)):
        shutil.copy(source, live / name)
    settings = tls_settings(
        pki,
        keda_tls_cert_file=live / "tls.crt",
        keda_tls_key_file=live / "tls.key",
        keda_tls_client_ca_file=live / "ca.crt",
    )
    renewed = make_pki(tmp_path / "renewed")
    with keda_scaler(services, settings) as server:
        assert server is not None
        with grpc.secure_channel(f"localhost:{server.port}", mutual(pki, pki.client)) as channel:
            assert spec_over(channel) == 10.0
        for name, source in (
            ("tls.crt", renewed.server.cert),
            ("tls.key", renewed.server.key),
            ("ca.crt", renewed.ca.cert),
        ):
            shutil.copy(source, live / name)
        with grpc.secure_channel(f"localhost:{server.port}", mutual(renewed, renewed.client)) as channel:
            assert spec_over(channel) == 10.0
        with grpc.secure_channel(f"localhost:{server.port}", mutual(pki, pki.client)) as channel:
            with pytest.raises(grpc.RpcError) as old:
                spec_over(channel)
            assert old.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_missing_certificate_file_stops_the_start_naming_it(services: AppServices, pki: Pki, tmp_path: Path) -> None:
    gone = tmp_path / "gone.crt"
    settings = tls_settings(pki, keda_tls_client_ca_file=gone)
    with (
        pytest.raises(ValueError, match=f"keda_tls_client_ca_file: cannot read {gone}"),
        keda_scaler(services, settings),
    ):
        pass


def test_outside_development_the_port_off_loopback_needs_tls(pki: Pki) -> None:
    production: dict[str, Any] = {"environment": "production", "database_url": "sqlite:///fleet.db", "keda_port": 6000}
    with pytest.raises(ValueError, match="keda_port: off loopback, production serves KEDA's scaler only over TLS"):
        ServerSettings(**production, host="0.0.0.0")
    ServerSettings(**production, host="127.0.0.1")  # only this host can reach it
    ServerSettings(**{**production, "environment": "development"}, host="0.0.0.0")
    tls_settings(pki, environment="production", database_url="sqlite:///fleet.db", host="0.0.0.0")
    with pytest.raises(ValueError, match="keda_tls_key_file, keda_tls_client_ca_file: name all three"):
        ServerSettings(keda_tls_cert_file=pki.server.cert)
