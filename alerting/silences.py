"""Silences: label matchers with a time window, as Alertmanager has them. A silenced alert still changes state,
but its notifications are not sent while the silence is in force.

Regex matchers run on RE2 (google-re2), not Python's ``re``: RE2 matches in time linear in the label value, where
``re``'s backtracking takes about 2**n steps for ``(a+)+$`` on n a's and a "!" (n = 40: hours, in the thread that
evaluates every rule). Refusing "dangerous" patterns instead would be a guess (``(a|aa)*$`` blows up too, with no
nested quantifier), and RE2's syntax is the one Alertmanager's matchers use, so a silence copied from Alertmanager
means the same here. What RE2 lacks (backreferences, lookarounds) is refused when the silence is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

import re2  # type: ignore[import-untyped]

from alerting.rules import LABEL_NAME
from wire.errors import FieldError

# RE2 would print its parse errors to stderr; the refusal below carries them instead.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


class MatchOp(StrEnum):
    EQUAL = "="
    NOT_EQUAL = "!="
    REGEX = "=~"
    NOT_REGEX = "!~"


@dataclass(frozen=True)
class Matcher:
    name: str
    value: str
    op: MatchOp = MatchOp.EQUAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", MatchOp(self.op))
        if not LABEL_NAME.match(self.name):
            raise FieldError("matchers", f"{self.name!r} is not a label name")
        if self.op in (MatchOp.REGEX, MatchOp.NOT_REGEX):
            try:
                _compiled(self.value)
            except re2.error as exc:
                detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
                raise FieldError("matchers", f"{self.value!r} is not a regular expression (RE2): {detail}") from None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """A missing label reads as empty, as in Alertmanager: ``pool!="chat"`` matches an alert without a pool."""
        value = labels.get(self.name, "")
        if self.op is MatchOp.EQUAL:
            return value == self.value
        if self.op is MatchOp.NOT_EQUAL:
            return value != self.value
        found = _compiled(self.value).fullmatch(value) is not None
        return found if self.op is MatchOp.REGEX else not found


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re2._Regexp:
    return re2.compile(pattern, _RE2_OPTIONS)


@dataclass(frozen=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: float
    ends_at: float
    created_by: str
    comment: str
    created_at: float

    def active_at(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def silences(self, labels: Mapping[str, str], now: float) -> bool:
        return self.active_at(now) and all(m.matches(labels) for m in self.matchers)


def silenced(labels: Mapping[str, str], silences: Sequence[Silence], now: float) -> bool:
    return any(s.silences(labels, now) for s in silences)
