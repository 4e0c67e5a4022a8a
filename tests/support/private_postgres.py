"""A private PostgreSQL server for one test, which the test may stop and start at will.

The shared server on 127.0.0.1:5432 serves every engineer and test at once, so a test that needs the database to
go away (an outage under load) runs its own: ``initdb`` into a temporary folder, then the ``postgres`` binary in the
foreground on a free loopback port, as the ``postgres`` OS user when the tests run as root (PostgreSQL refuses to
run as root). The binaries come from Debian's ``postgresql`` package (/usr/lib/postgresql/VERSION/bin); without them
the test skips with that reason (and fails under CI=true, where .ci/run installs them).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg

from fleetpilot.launch import dying_with_parent
from inference_agent.ports import free_port
from tests.support.availability import unavailable

POSTGRES_OS_USER = "postgres"


def postgres_bin_dir() -> Path:
    """The newest /usr/lib/postgresql/*/bin holding initdb and postgres, or a skip naming the package."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name or 0))
    for directory in reversed(found):
        if all(os.access(Path(directory) / name, os.X_OK) for name in ("initdb", "postgres")):
            return Path(directory)
    unavailable("initdb/postgres not found under /usr/lib/postgresql/*/bin (install the Debian package postgresql)")


def _run_as() -> str | None:
    """The OS user to run PostgreSQL as: ``postgres`` when we are root (it refuses root), else ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_OS_USER)
    except KeyError:
        unavailable(f"running as root and there is no {POSTGRES_OS_USER!r} OS user to run a private PostgreSQL")
    return POSTGRES_OS_USER


@dataclass
class PrivatePostgres:
    """``with PrivatePostgres() as pg:`` initialises and starts a cluster; ``pg.stop()`` / ``pg.start()`` make an
    outage; the exit stops it and removes its folder. ``pg.url`` is the ``postgres`` database, trust auth."""

    port: int = field(default_factory=free_port)
    ready_timeout_s: float = 30.0
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.bin_dir = postgres_bin_dir()
        self.user = _run_as()
        # not pytest's tmp_path: that folder is private to root and the postgres user could not enter it
        self.root = Path(tempfile.mkdtemp(prefix="fleetpilot-pg-"))
        self.data_dir = self.root / "data"
        self.log_path = self.root / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _popen(self, command: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
            dying_with_parent(command), user=self.user, group=self.user, **kwargs
        )

    def initialise(self) -> None:
        if self.user is not None:
            shutil.chown(self.root, self.user, self.user)
        with self.log_path.open("ab") as log:
            initdb = self._popen(
                [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "-A", "trust", "-N"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            if initdb.wait(120) != 0:
                raise RuntimeError(f"initdb failed:\n{self.log_tail()}")

    def start(self) -> None:
        """Start the server in the foreground (a child of this process) and wait until it accepts connections."""
        with self.log_path.open("ab") as log:
            self.process = self._popen(
                [
                    str(self.bin_dir / "postgres"),
                    *("-D", str(self.data_dir), "-p", str(self.port), "-h", "127.0.0.1", "-k", str(self.root)),
                    *("-c", "fsync=off", "-c", "max_connections=200"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                psycopg.connect(
                    f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", connect_timeout=1
                ).close()
                return
            except psycopg.OperationalError:
                time.sleep(0.1)
        raise TimeoutError(f"postgres not ready within {self.ready_timeout_s} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT): open sessions are cut, as when the database host goes away."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        try:
            self.initialise()
            self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
