"""A pool the nodes report and nobody configured is adopted in one action from the Pools page (issue 39): a dry-run
pool, its capacity learned or the reason it cannot be said on its page, the change audited."""

from __future__ import annotations

import re
from collections.abc import Callable

from fastapi.testclient import TestClient

from fleet.pools import Mode
from tests.support.clock import FakeClock
from tests.support.remote_write import REMOTE_WRITE_HEADERS, named, write_request
from tests.web.dashboard.conftest import csrf_of
from tests.web.dashboard.test_audit import everything_logged
from web.services import AppServices

Browser = Callable[[str], TestClient]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "meta-llama--Llama-3.1-8B-Instruct"


def _served(client: TestClient, clock: FakeClock, token: Callable[..., str]) -> None:
    running = named("vllm:num_requests_waiting", model_name=MODEL, engine="0", node="gpu-7")
    body = write_request([(running, [(clock() - 15, 2.0), (clock(), 3.0)])])
    headers = {"Authorization": f"Bearer {token('remote_write')}", **REMOTE_WRITE_HEADERS}
    assert client.post("/api/v1/write", content=body, headers=headers).status_code == 204


def test_an_admin_adopts_a_served_pool_as_a_dry_run_pool(
    browser: Browser, services: AppServices, clock: FakeClock, token: Callable[..., str]
) -> None:
    admin = browser("admin")
    _served(admin, clock, token)
    listing = admin.get("/pools").text
    assert f'action="/pools/{POOL}/adopt"' in listing and "Adopt as a dry-run pool" in listing
    assert "Adopt as a dry-run pool" not in browser("viewer").get("/pools").text  # an admin's action

    form = {"csrf_token": csrf_of(listing), "slo_p99_seconds": "4.5"}
    done = admin.post(f"/pools/{POOL}/adopt", data=form, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, f"/pools/{POOL}?done=adopted")
    pool = services.pools.get(POOL)
    assert pool is not None and pool.spec.mode is Mode.DRY_RUN and pool.spec.replica_capacity is None
    assert pool.spec.slo_p99_seconds == 4.5 and pool.spec.max_replicas >= 8
    logged = everything_logged(services.engine)
    assert f"'pool', '{POOL}', 'create'" in logged
    page = admin.get(f"/pools/{POOL}?done=adopted").text
    assert "Adopted in dry run" in page
    assert f'action="/pools/{POOL}/adopt"' not in admin.get("/pools").text  # configured now

    again = admin.post(f"/pools/{POOL}/adopt", data=form)
    assert again.status_code == 409 and "configured already" in again.text
    bad = admin.post("/pools/nobody-serves-this/adopt", data=form)
    assert bad.status_code == 409 and "no node reports pool" in bad.text


def test_a_refused_slo_is_said_next_to_the_pool(
    browser: Browser, services: AppServices, clock: FakeClock, token: Callable[..., str]
) -> None:
    admin = browser("admin")
    _served(admin, clock, token)
    form = {"csrf_token": csrf_of(admin.get("/pools").text), "slo_p99_seconds": "-1"}
    refused = admin.post(f"/pools/{POOL}/adopt", data=form)
    assert refused.status_code == 422 and re.search(r'class="field-error"[^>]*>[^<]*greater than 0', refused.text)
    assert services.pools.get(POOL) is None
