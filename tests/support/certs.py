"""Real X.509 certificates made at test time with the ``openssl`` CLI (no ``cryptography`` package here): a CA, a
server certificate for localhost / 127.0.0.1, a client certificate the CA signed, and one signed by another CA."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: KeyPair
    server: KeyPair
    client: KeyPair  # signed by ``ca``
    stranger: KeyPair  # a client certificate signed by another CA


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _authority(folder: Path, name: str) -> KeyPair:
    pair = KeyPair(folder / f"{name}.crt", folder / f"{name}.key")
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", f"/CN={name}", "-keyout", str(pair.key), "-out", str(pair.cert),
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
    )  # fmt: skip
    return pair


def _signed(folder: Path, name: str, by: KeyPair, extensions: str) -> KeyPair:
    pair, request, ext = KeyPair(folder / f"{name}.crt", folder / f"{name}.key"), folder / f"{name}.csr", folder / name
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={name}",
        "-keyout", str(pair.key), "-out", str(request),
    )  # fmt: skip
    ext.with_suffix(".ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(by.cert), "-CAkey", str(by.key), "-CAcreateserial",
        "-days", "2", "-out", str(pair.cert), "-extfile", str(ext.with_suffix(".ext")),
    )  # fmt: skip
    return pair


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca, other = _authority(folder, "ca"), _authority(folder, "other-ca")
    server_ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    client_ext = "extendedKeyUsage=clientAuth\n"
    return Pki(
        ca=ca,
        server=_signed(folder, "server", ca, server_ext),
        client=_signed(folder, "keda", ca, client_ext),
        stranger=_signed(folder, "stranger", other, client_ext),
    )
