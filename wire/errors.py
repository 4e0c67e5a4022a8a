"""The wire's errors: a field a validator refuses, and a sample batch that breaks the wire format. Here, in the
lowest room, so that every room's validators and the node's own checks raise the same ones."""

from __future__ import annotations

from dataclasses import dataclass


class FieldError(ValueError):
    """A value a validator refuses, naming the field at fault: ``FieldError("max_replicas", "must be >= 1")`` reads
    "max_replicas: must be >= 1", and the web answers 422 with ``field`` taken from here, never from the text.
    Every room's validators (pools, tenants, alert rules) raise this one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong in an ingest body: which sample (None for the envelope), which field, and why."""

    sample: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"samples[{self.sample}].{self.field}" if self.sample is not None else self.field
        return f"{where}: {self.message}"


class InvalidBatch(Exception):
    """The batch breaks a rule of the wire format; nothing of it is stored."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        self.problems = problems
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{problems[0]}{more}")
