"""Tokens reach fleetpilot's commands from a file or the environment, never a flag: every user of the machine sees
every process's arguments (``ps``, ``/proc/PID/cmdline``).

``--token`` stays defined, hidden, so that giving it is refused by name; without it argparse would take ``--token X``
as an abbreviation of ``--token-file X`` and read a file named after the secret.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TOKEN_VARIABLE = "FLEETPILOT_TOKEN"
TENANT_KEYS_VARIABLE = "FLEETPILOT_TENANT_KEYS"  # NAME=KEY[,NAME=KEY...]: the keys ``fleetpilot replay`` sends
ON_COMMAND_LINE = f"pass the token in {TOKEN_VARIABLE} or --token-file, never on the command line: ps shows it"


class _RefuseToken(argparse.Action):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        parser.error(ON_COMMAND_LINE)


def add_token_flags(parser: argparse.ArgumentParser, *, token_file_help: str) -> None:
    """``--token-file PATH`` (dest ``token_file``), and ``--token`` refused with :data:`ON_COMMAND_LINE`."""
    parser.add_argument("--token", action=_RefuseToken, help=argparse.SUPPRESS)
    parser.add_argument("--token-file", default=None, metavar="PATH", help=token_file_help)


def token_from(token_file: str | None) -> str | None:
    """The token of ``--token-file`` (one trailing newline dropped), else ``FLEETPILOT_TOKEN``, else None; an
    unreadable file is a ValueError naming it."""
    if token_file is None:
        return os.environ.get(TOKEN_VARIABLE) or None
    try:
        return Path(token_file).read_text().strip() or None
    except OSError as exc:
        raise ValueError(f"--token-file {token_file!r}: cannot read it ({exc.strerror})") from None


def tenant_keys_from(flags: Sequence[str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Tenant → key: ``FLEETPILOT_TENANT_KEYS`` (``NAME=KEY,NAME=KEY``), then each ``--tenant-key NAME=@PATH`` (the
    key read from a file). ``--tenant-key NAME=KEY`` is refused, naming what to use and never the key: ``ps`` shows
    every argument. A ValueError says which entry is wrong."""
    keys: dict[str, str] = {}
    for entry in (e.strip() for e in environ.get(TENANT_KEYS_VARIABLE, "").split(",") if e.strip()):
        name, sep, key = entry.partition("=")
        if not (name and sep and key):
            raise ValueError(f"{TENANT_KEYS_VARIABLE}: {name if sep else entry!r} is not NAME=KEY")
        keys[name] = key
    for flag in flags:
        name, sep, path = flag.partition("=")
        if not (name and sep and path.startswith("@") and len(path) > 1):
            shown = name if sep and name else "NAME"  # without "=" the whole argument may be the key itself
            raise ValueError(
                f"--tenant-key {shown}: a key on the command line is shown by ps; give --tenant-key {shown}=@PATH "
                f"(a file holding the key) or {TENANT_KEYS_VARIABLE}={shown}=KEY"
            )
        try:
            keys[name] = Path(path[1:]).read_text().strip()
        except OSError as exc:
            raise ValueError(f"--tenant-key {name}: cannot read {path[1:]}: {exc.strerror}") from None
    return keys
