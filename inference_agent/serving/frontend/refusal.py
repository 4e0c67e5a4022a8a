"""What a request is answered instead of being served: its HTTP status, what was wrong, and when to retry."""

from __future__ import annotations


class Refusal(Exception):
    def __init__(self, code: int, detail: str, retry_after: str | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.retry_after = retry_after
