"""Delivery of the notification outbox: at least once, retried with exponential backoff and jitter, across restarts.

Each run (every ``poll_seconds``, and at once after an evaluation wrote notifications):
1. claims the due rows, in order, taking only the oldest pending notification of each (target, group), so a group's
   "resolved" never overtakes its "firing"; a claim pushes the row's ``next_attempt_at`` ahead by ``claim_seconds``
   with a conditional UPDATE, so two servers never send one row at once, and a server killed mid-send leaves the row
   due again after the claim;
2. POSTs each body as stored, signed (``X-Fleetpilot-Signature``) with the delivery id (``X-Fleetpilot-Delivery``,
   the same on every retry), a few at a time;
3. records each attempt in the delivery log and moves the row on: delivered on a 2xx; else due again after
   ``backoff_seconds(attempt)``, until ``max_age_seconds`` after it was written, then abandoned.
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, RowMapping, func, insert, select, update

from alerting.payload import DELIVERY_HEADER, SIGNATURE_HEADER, signature
from alerting.sender import Sender, SendResult, failure_reason
from alerting.tables import deliveries, notifications
from alerting.telemetry import AlertingTelemetry
from alerting.webhooks import TargetKind, Webhook, WebhookStore

log = logging.getLogger(__name__)
ALERTMANAGER_PATH = "/api/v2/alerts"


@dataclass(frozen=True)
class DeliverySettings:
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 300.0
    max_age_seconds: float = 86_400.0
    claim_seconds: float = 30.0
    batch: int = 200
    concurrency: int = 4


def backoff_seconds(attempt: int, settings: DeliverySettings, jitter: float) -> float:
    """Delay after failed attempt ``attempt`` (1-based): the exponential step, half of it fixed and half jittered
    by ``jitter`` in [0, 1) so that retries of many notifications spread out. Initial 1 s: attempt 1 → 0.5..1 s,
    attempt 4 → 4..8 s; never more than the maximum."""
    step = min(settings.backoff_max_seconds, math.ldexp(settings.backoff_initial_seconds, attempt - 1))
    return step / 2 + step / 2 * jitter


@dataclass(frozen=True)
class Attempt:
    row: RowMapping
    hook: Webhook | None
    result: SendResult | None  # None: the target is gone
    duration_seconds: float


class Outbox:
    def __init__(
        self,
        engine: Engine,
        sender: Sender,
        settings: DeliverySettings,
        *,
        telemetry: AlertingTelemetry | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.engine = engine
        self.sender = sender
        self.settings = settings
        self.telemetry = telemetry
        self._jitter = jitter
        self._hooks = WebhookStore(engine)
        self._pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="webhook")
        self._kicker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webhook-kick")
        self._kicked = threading.Event()

    def kick(self) -> None:
        """Deliver soon, on a thread of its own (after an evaluation wrote notifications); at most one queued."""
        if not self._kicked.is_set():
            self._kicked.set()
            self._kicker.submit(self._kicked_run)

    def _kicked_run(self) -> None:
        self._kicked.clear()
        try:
            self.run(time.time())
        except Exception:  # the periodic run tries again
            log.exception("webhook delivery failed")

    def run(self, now: float) -> int:
        """One delivery round; the number of notifications delivered."""
        rows = self._claim(now)
        attempts: list[Attempt] = []
        if rows:
            hooks = {h.id: h for h in self._hooks.list()}
            attempts = list(self._pool.map(lambda row: self._send(row, hooks.get(row["webhook_id"])), rows))
            with self.engine.begin() as conn:
                for attempt in attempts:
                    self._record(conn, attempt, now)
        if self.telemetry is not None:
            self.telemetry.outbox_pending.set(self.pending())
        return sum(1 for a in attempts if a.result is not None and a.result.ok)

    def pending(self) -> int:
        with self.engine.connect() as conn:
            count = conn.scalar(select(func.count()).where(notifications.c.status == "pending"))
        return int(count or 0)

    def close(self) -> None:
        self._kicker.shutdown(wait=True)
        self._pool.shutdown(wait=True)
        self.sender.close()

    def _claim(self, now: float) -> list[RowMapping]:
        """The due head of each (target, group) queue, claimed for ``claim_seconds``."""
        query = (
            select(notifications)
            .where(notifications.c.status == "pending")
            .order_by(notifications.c.id)
            .limit(self.settings.batch * 5)
        )
        claimed: list[RowMapping] = []
        heads: set[tuple[str, str]] = set()
        with self.engine.begin() as conn:
            for row in conn.execute(query).mappings().all():
                queue = (row["webhook_id"], row["group_key"])
                if queue in heads:
                    continue
                heads.add(queue)
                if row["next_attempt_at"] > now or len(claimed) >= self.settings.batch:
                    continue
                taken = conn.execute(
                    update(notifications)
                    .where(
                        notifications.c.id == row["id"],
                        notifications.c.status == "pending",
                        notifications.c.next_attempt_at == row["next_attempt_at"],
                    )
                    .values(next_attempt_at=now + self.settings.claim_seconds)
                ).rowcount
                if taken == 1:
                    claimed.append(row)
        return claimed

    def _send(self, row: RowMapping, hook: Webhook | None) -> Attempt:
        if hook is None:
            return Attempt(row, None, None, 0.0)
        body = row["body"].encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "fleetpilot-alerting",
            DELIVERY_HEADER: row["delivery_id"],
        }
        if hook.secret:
            headers[SIGNATURE_HEADER] = signature(body, hook.secret)
        url = hook.url.rstrip("/") + ALERTMANAGER_PATH if hook.kind is TargetKind.ALERTMANAGER else hook.url
        started = time.perf_counter()
        try:
            result = self.sender.post(url, body, headers)
        except Exception as exc:  # a sender that broke its word fails this delivery, not the whole round's record
            # no traceback: its message may quote the stored URL, credentials included
            log.warning("webhook %s (%s): the sender raised %s", hook.id, hook.shown_url, type(exc).__name__)
            result = SendResult(None, failure_reason(exc))
        return Attempt(row, hook, result, time.perf_counter() - started)

    def _record(self, conn: Connection, attempt: Attempt, now: float) -> None:
        row, result = attempt.row, attempt.result
        number = row["attempts"] + 1
        where = notifications.c.id == row["id"]
        if result is None:
            conn.execute(update(notifications).where(where).values(status="dropped"))
            self._count("dropped")
            return
        conn.execute(
            insert(deliveries).values(
                webhook_id=row["webhook_id"],
                notification_id=row["id"],
                delivery_id=row["delivery_id"],
                attempt=number,
                ts=now,
                outcome="delivered" if result.ok else "failed",
                status_code=result.status_code,
                error=None if result.error is None else result.error[:500],
                duration_seconds=attempt.duration_seconds,
            )
        )
        if result.ok:
            conn.execute(
                update(notifications).where(where).values(status="delivered", attempts=number, delivered_at=now)
            )
            self._count("delivered", latency=now + attempt.duration_seconds - row["created_at"])
            return
        assert attempt.hook is not None
        log.warning(
            "webhook %s (%s): delivery %s attempt %d failed: %s",
            attempt.hook.id,
            attempt.hook.shown_url,
            row["delivery_id"],
            number,
            result.error or result.status_code,
        )
        if now - row["created_at"] >= self.settings.max_age_seconds:
            conn.execute(update(notifications).where(where).values(status="abandoned", attempts=number))
            self._count("abandoned")
            return
        retry_at = now + backoff_seconds(number, self.settings, self._jitter())
        values = {"attempts": number, "next_attempt_at": retry_at, "last_error": (result.error or "")[:500]}
        conn.execute(update(notifications).where(where).values(**values))
        self._count("failed")

    def _count(self, outcome: str, *, latency: float | None = None) -> None:
        if self.telemetry is None:
            return
        self.telemetry.deliveries.labels(outcome).inc()
        if latency is not None:
            self.telemetry.delivery_latency.observe(max(0.0, latency))


@dataclass(frozen=True)
class DeliveryRecord:
    id: int
    notification_id: int
    delivery_id: str
    attempt: int
    ts: float
    outcome: str
    status_code: int | None
    error: str | None
    duration_seconds: float


def delivery_log(
    engine: Engine, webhook_id: str, *, before: int | None = None, limit: int = 100
) -> list[DeliveryRecord]:
    """A target's delivery attempts, newest first; ``before`` is the id cursor of the previous page."""
    query = (
        select(deliveries).where(deliveries.c.webhook_id == webhook_id).order_by(deliveries.c.id.desc()).limit(limit)
    )
    if before is not None:
        query = query.where(deliveries.c.id < before)
    with engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    return [
        DeliveryRecord(
            **{**{k: v for k, v in r.items() if k != "webhook_id"}, "error": shown_error(r["error"], r["status_code"])}
        )
        for r in rows
    ]


# What a sender keeps of a failure without an answer: "ReadTimeout", "AddressRefused: loopback" (failure_reason).
_FIXED_REASON = re.compile(r"[A-Z]\w*(: [a-z-]+)?")


def shown_error(error: str | None, status_code: int | None) -> str | None:
    """A stored error as viewers may read it, the same for rows written before senders kept only fixed reasons: an
    answered attempt shows ``HTTP 500`` (old rows hold the target's answer there, "<html>... token=..."), an
    unanswered one its exception class ("ConnectError: [Errno 111] ... 10.0.0.7" → "ConnectError")."""
    if error is None:
        return None
    if status_code is not None:
        return f"HTTP {status_code}"
    return error if _FIXED_REASON.fullmatch(error) else error.split(":", 1)[0]
