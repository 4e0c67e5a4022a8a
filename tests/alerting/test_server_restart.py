"""Real ``fleetpilot server`` processes: a notification pending while its receiver is down survives a SIGKILL of
the server and is delivered once after the restart, with the delivery id of its failed attempts and a valid
signature."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from alerting.receiver import LOOPBACK_NETWORKS, WebhookReceiver
from fleetpilot.launch import ServerProcess
from inference_agent.ports import free_port

pytestmark = pytest.mark.slow
SECRET = "a-secret-of-at-least-16"
FAST = {
    "FLEETPILOT_ALERT_EVALUATION_INTERVAL_SECONDS": "0.5",
    "FLEETPILOT_WEBHOOK_POLL_SECONDS": "0.2",
    "FLEETPILOT_WEBHOOK_BACKOFF_INITIAL_SECONDS": "0.2",
    "FLEETPILOT_WEBHOOK_BACKOFF_MAX_SECONDS": "1",
    "FLEETPILOT_WEBHOOK_ALLOWED_NETWORKS": json.dumps(LOOPBACK_NETWORKS),
    "FLEETPILOT_NODE_DOWN_AFTER_SECONDS": "30",
}


def wait_for(condition: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def api(server: ServerProcess, method: str, path: str, **kwargs: Any) -> Any:
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    response = httpx.request(method, f"{server.url}/api/v1{path}", headers=headers, timeout=10.0, **kwargs)
    response.raise_for_status()
    return response.json()


def test_a_pending_notification_survives_sigkill_and_is_delivered_once_after_restart(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path}/fleetpilot.db"
    receiver_port = free_port()
    first = ServerProcess(database_url, env=FAST).start()
    try:
        hook = api(first, "POST", "/webhooks", json={"url": f"http://127.0.0.1:{receiver_port}/hook", "secret": SECRET})
        rule = {"name": "GpuHot", "kind": "threshold", "metric": "gpu_temperature_celsius", "op": ">", "threshold": 85}
        api(first, "POST", "/alert-rules", json=rule)
        agent = first.create_agent_token("node-a")
        sample = {"seq": 1, "ts": time.time(), "device": 0, "metrics": {"gpu_temperature_celsius": 95.0}}
        pushed = httpx.post(
            f"{first.url}/api/v1/ingest",
            json={"node_id": "node-a", "samples": [sample]},
            headers={"Authorization": f"Bearer {agent}"},
            timeout=10.0,
        )
        assert pushed.status_code == 200, pushed.text
        failed = wait_for(lambda: api(first, "GET", f"/webhooks/{hook['id']}/deliveries")["items"])
        assert failed[0]["outcome"] == "failed" and failed[0]["status_code"] is None
    finally:
        first.kill()
    with WebhookReceiver(SECRET, port=receiver_port) as receiver:
        second = ServerProcess(database_url, env=FAST, admin_token=first.admin_token).start()
        try:
            wait_for(receiver.accepted)
            time.sleep(2.0)  # time for a second delivery, were there one
            log = api(second, "GET", f"/webhooks/{hook['id']}/deliveries")["items"]
        finally:
            second.stop()
    ours = [r for r in receiver.accepted() if r.payload["groupLabels"]["alertname"] == "GpuHot"]
    assert len(ours) == 1
    delivered = ours[0]
    assert delivered.signature_ok and delivered.delivery_id == failed[0]["delivery_id"]
    assert delivered.payload["status"] == "firing" and delivered.payload["alerts"][0]["labels"]["node"] == "node-a"
    assert next(d["outcome"] for d in log if d["delivery_id"] == delivered.delivery_id) == "delivered"
