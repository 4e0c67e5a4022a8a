"""A thread that pushes sample batches for one node as an agent would, and notes every answer it gets.

It resends a batch, with its ``seq`` unchanged, until the collector commits it (200), waiting what ``Retry-After``
asks, so after any fault every ``seq`` it sent must be stored exactly once. The answers (status, ``Retry-After``)
are what a fault test asserts on: the server said 503 with a retry time while the database was away.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class Answer:
    status: int  # 0: no HTTP answer (connection refused, reset, timed out)
    retry_after: str | None


@dataclass
class IngestLoad:
    """``with IngestLoad(url, token, "node-load"):`` pushes ``batch_size`` samples every ``interval_s``."""

    url: str
    token: str
    node_id: str
    batch_size: int = 10
    interval_s: float = 0.05
    answers: list[Answer] = field(default_factory=list)
    committed_seq: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ingest-load-{self.node_id}", daemon=True)

    def statuses(self) -> Counter[int]:
        return Counter(answer.status for answer in list(self.answers))

    def _batch(self, first_seq: int) -> dict[str, Any]:
        now = time.time()
        samples = [
            {
                "seq": first_seq + i,
                "ts": now,
                "device": None,
                "pool": None,
                "metrics": {"network_throughput_bytes_per_second": float(first_seq + i)},
            }
            for i in range(self.batch_size)
        ]
        return {"node_id": self.node_id, "samples": samples}

    def _post(self, client: httpx.Client, body: dict[str, Any]) -> Answer:
        try:
            response = client.post("/api/v1/ingest", json=body)
        except httpx.HTTPError:
            return Answer(0, None)
        return Answer(response.status_code, response.headers.get("retry-after"))

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(5.0, connect=1.0)) as client:
            body: dict[str, Any] | None = None
            while not self._stop.is_set():
                body = body or self._batch(self.committed_seq + 1)
                answer = self._post(client, body)
                self.answers.append(answer)
                if answer.status == 200:
                    self.committed_seq = body["samples"][-1]["seq"]
                    body = None
                    self._stop.wait(self.interval_s)
                else:  # the test reads every status it got; a 4xx here would be resent until the test ends
                    self._stop.wait(min(float(answer.retry_after or self.interval_s), 2.0))

    def wait_for_commits(self, more_than: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.committed_seq <= more_than:
            time.sleep(0.1)
        assert self.committed_seq > more_than, f"no commit past seq {more_than} in {timeout_s} s: {self.statuses()}"

    def __enter__(self) -> IngestLoad:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
