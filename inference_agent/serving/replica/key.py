"""Each replica's key: a secret the supervisor makes for every replica process it starts, given to the process in
its environment (never its command line, which ``ps`` shows to every user of the host), and presented by the front
end and the agent as ``Authorization: Bearer <key>``.

Why a key and not a Unix socket or a network namespace: a replica listens on host loopback, where any process of
the node can connect; a Unix socket would keep them out too, but vLLM, SGLang and llama-server listen on TCP only,
and a namespace per replica needs privileges the agent does not hold. A bearer key is the one door every engine
already has (vLLM reads ``VLLM_API_KEY``, llama-server ``LLAMA_API_KEY``: a profile sets it from ``{replica_key}``),
so a replica believes the ``X-Tenant`` and priority headers only of a caller that holds its key: the front end.
"""

from __future__ import annotations

import hmac
import secrets

REPLICA_KEY_ENV = "FLEETPILOT_REPLICA_KEY"  # where a built-in replica reads its key


def new_replica_key() -> str:
    return secrets.token_urlsafe(32)  # 256 random bits


def bearer_headers(key: str) -> dict[str, str]:
    """What a caller of the replica sends; nothing for a replica started without a key."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def holds_key(authorization: str | None, key: str) -> bool:
    """Whether ``Authorization`` presents ``key`` (compared in constant time)."""
    return hmac.compare_digest((authorization or "").encode(), f"Bearer {key}".encode())
