"""The built-in engines: what a node runs without an engine profile, each named for the API its replicas answer.

Declared once here, and without pydantic, so the replica process (``python -m inference_agent.serving.replica``)
reads the names without the wire models' imports; ``wire.control.Kind``, the agent's config and its ``--pools`` derive
from it. No engine profile may take one of these names.
"""

from __future__ import annotations

from enum import StrEnum


class BuiltinEngine(StrEnum):
    TEXT = "text"  # completions and chat completions
    CLASSIFY = "classify"


BUILTIN_ENGINES = tuple(e.value for e in BuiltinEngine)
