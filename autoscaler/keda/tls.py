"""TLS of the KEDA port, mutual: the scaler's certificate and key, and the CA whose client certificates it accepts
(KEDA dials with the trigger's ``caCert``, ``tlsClientCert`` and ``tlsClientKey``). A client without a certificate
of that CA fails the handshake, before any pool is named or read. Renewed files (a Secret volume that cert-manager
updates) are read again at the next connection, without a restart."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KedaTls:
    cert_file: Path
    key_file: Path
    client_ca_file: Path

    def credentials(self) -> grpc.ServerCredentials:
        """The server's credentials, client certificates required; a file that cannot be read is a ValueError naming
        its setting and path, so the server stops at start with the reason."""
        files = _WatchedFiles(self)
        return grpc.dynamic_ssl_server_credentials(files.load(), files.renewed, require_client_authentication=True)


class _WatchedFiles:
    """The three files as grpc's certificate configuration, loaded again when one changed on disk."""

    def __init__(self, tls: KedaTls) -> None:
        self.tls = tls
        self._loaded: tuple[tuple[int, int], ...] | None = None
        self._lock = threading.Lock()

    def load(self) -> grpc.ServerCertificateConfiguration:
        with self._lock:
            self._loaded = self._stamps()
            key, cert, client_ca = (
                _read("keda_tls_key_file", self.tls.key_file),
                _read("keda_tls_cert_file", self.tls.cert_file),
                _read("keda_tls_client_ca_file", self.tls.client_ca_file),
            )
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)

    def renewed(self) -> grpc.ServerCertificateConfiguration | None:
        """grpc's fetcher, called before each handshake: the files again when one changed, else None (no change);
        one that cannot be read now keeps the current ones, logged."""
        try:
            with self._lock:
                unchanged = self._stamps() == self._loaded
            return None if unchanged else self.load()
        except (OSError, ValueError) as exc:
            log.warning("keda scaler: keeping the current TLS certificate: %s", exc)
            return None

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        """Each file's modification time and size; missing files are a stamp of their own (-1, -1)."""
        found = []
        for path in (self.tls.cert_file, self.tls.key_file, self.tls.client_ca_file):
            try:
                stat = path.stat()
                found.append((stat.st_mtime_ns, stat.st_size))
            except OSError:
                found.append((-1, -1))
        return tuple(found)


def _read(setting: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{setting}: cannot read {path} ({exc.strerror or type(exc).__name__})") from None
