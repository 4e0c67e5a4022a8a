"""Tokens reach fleetpilot's commands from a file or the environment, never a flag: every user of the machine sees
every process's arguments (``ps``, ``/proc/PID/cmdline``).

``--token`` stays defined, hidden, so that giving it is refused by name; without it argparse would take ``--token X``
as an abbreviation of ``--token-file X`` and read a file named after the secret.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOKEN_VARIABLE = "FLEETPILOT_TOKEN"
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
