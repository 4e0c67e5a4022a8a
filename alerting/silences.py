"""Silences: label matchers with a time window, as Alertmanager has them. A silenced alert still changes state,
but its notifications are not sent while the silence is in force."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from alerting.rules import LABEL_NAME


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
            raise ValueError(f"matchers: {self.name!r} is not a label name")
        if self.op in (MatchOp.REGEX, MatchOp.NOT_REGEX):
            try:
                _compiled(self.value)
            except re.error as exc:
                raise ValueError(f"matchers: {self.value!r} is not a regular expression: {exc}") from None

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
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


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
