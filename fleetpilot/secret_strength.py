"""Is a configured secret (admin token, session secret, scrape token) fit to guard a server? Pure, for settings.

The documentation's examples must not work if copied: ``fp_admin_CHANGE-ME-to-at-least-32-random-characters`` is
44 characters, long enough for a length check alone. So a secret is also refused when it carries a placeholder
word, or when it has few distinct characters (``"a" * 40`` has 1; ``secrets.token_urlsafe(32)`` has about 31 of
its 43, and fewer than 12 happens with probability under 1e-9).
"""

from __future__ import annotations

MIN_SECRET_LENGTH = 32
MIN_DISTINCT_CHARACTERS = 12
PLACEHOLDER_WORDS = ("change-me", "changeme", "change_me", "example", "placeholder", "replace-me", "your-token")
GENERATE_HINT = "generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def weak_secret_problem(secret: str | None) -> str | None:
    """What is wrong with ``secret`` in words, or None when it is unset or fit."""
    if secret is None:
        return None
    if len(secret) < MIN_SECRET_LENGTH:
        return f"must be at least {MIN_SECRET_LENGTH} characters; {GENERATE_HINT}"
    lowered = secret.lower()
    placeholder = next((word for word in PLACEHOLDER_WORDS if word in lowered), None)
    if placeholder is not None:
        return f"looks like a documentation example (it contains {placeholder!r}); {GENERATE_HINT}"
    distinct = len(set(secret))
    if distinct < MIN_DISTINCT_CHARACTERS:
        return f"has only {distinct} distinct characters (at least {MIN_DISTINCT_CHARACTERS}); {GENERATE_HINT}"
    return None
