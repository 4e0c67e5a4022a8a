"""TLS of the KEDA port, mutual: the scaler's certificate and key, and the CA whose client certificates it accepts
(KEDA dials with the trigger's ``caCert``, ``tlsClientCert`` and ``tlsClientKey``). A client without a certificate
of that CA fails the handshake, before any pool is named or read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True)
class KedaTls:
    cert_file: Path
    key_file: Path
    client_ca_file: Path

    def credentials(self) -> grpc.ServerCredentials:
        """The server's credentials, client certificates required; a file that cannot be read is a ValueError naming
        its setting and path, so the server stops at start with the reason."""
        key, cert, client_ca = (
            _read("keda_tls_key_file", self.key_file),
            _read("keda_tls_cert_file", self.cert_file),
            _read("keda_tls_client_ca_file", self.client_ca_file),
        )
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca, require_client_auth=True)


def _read(setting: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{setting}: cannot read {path} ({exc.strerror or type(exc).__name__})") from None
