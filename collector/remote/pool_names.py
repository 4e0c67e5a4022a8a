"""A pool name for an engine's series that carry no pool label: the model it serves, spelt as a pool name may be.

vLLM and SGLang label their series with the served model (``model_name``), nearly always a Hugging Face id with a
``/`` that ``NAME_PATTERN`` refuses: the pool could not be configured (``POST /pools`` answered 422) and the Fleet
page linked to ``/pools/meta-llama/Llama-3.1-8B-Instruct``, a 404. The name is the model id with ``/`` written
``--``, as the Hugging Face cache spells it (``models--meta-llama--Llama-3.1-8B-Instruct``): readable, stable across
restarts and releases, and one id per name, since the Hub forbids ``--`` inside an id. An id that needs more than
that (an ``_``, a path's leading ``/``, over 128 characters) could meet another once rewritten (``a_b`` and ``a.b``
would both be ``a-b``), so its name ends in 8 hex digits of the id's own hash. The id itself stays the pool's model.
"""

from __future__ import annotations

import hashlib
import re

from wire.control import NAME_PATTERN

_NAME = re.compile(NAME_PATTERN)
_MAX_LENGTH = 128  # NAME_PATTERN's
_REFUSED = re.compile(r"[^A-Za-z0-9._:-]+")  # runs of what a name may not hold
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")  # org/name, the Hub's characters
HASH_DIGITS = 8


def pool_for_model(model: str) -> str:
    """The pool name of the replicas serving ``model``; it matches ``NAME_PATTERN`` whatever ``model`` holds.

    Worked: ``llama-8b`` → ``llama-8b`` (already a name); ``meta-llama/Llama-3.1-8B-Instruct`` →
    ``meta-llama--Llama-3.1-8B-Instruct``; ``/models/llama_3`` → ``models-llama-3-`` + 8 hex digits.
    """
    if _NAME.fullmatch(model):
        return model
    if _HUB_ID.fullmatch(model) and "--" not in model and "_" not in model and len(model) + 1 <= _MAX_LENGTH:
        return model.replace("/", "--")
    digest = hashlib.blake2b(model.encode(), digest_size=HASH_DIGITS // 2).hexdigest()
    readable = _REFUSED.sub("-", model).strip("-._:")[: _MAX_LENGTH - HASH_DIGITS - 1].rstrip("-._:")
    return f"{readable}-{digest}" if readable else f"model-{digest}"
