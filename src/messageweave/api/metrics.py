"""`GET /metrics`: Prometheus text, for the worker token or an admin session.

A scraper sends `Authorization: Bearer <worker_token>` (Prometheus
`authorization: {credentials: ...}`). Metrics name queues and counts, never content, but they
are not for the open internet.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import Response
from redis.exceptions import RedisError

from messageweave.api.account_status import default_push
from messageweave.api.credentials import require_worker_or_admin, services
from messageweave.mail import push
from messageweave.mail.eventsource import PushInForce
from messageweave.ops import metrics
from messageweave.pipeline.polling import read_label
from messageweave.store.opstats import stream_gauges, unknown_after_send

router = APIRouter()


def _way(label: str) -> str:
    """`ok (polling)` → `polling`; `degraded: …` → `degraded`; `off` → `off`."""
    if label.startswith("ok ("):
        return label[4:-1]
    return label.split(":", 1)[0]


@router.get("/metrics")
async def get_metrics(request: Request) -> Response:
    await require_worker_or_admin(request)
    svc = services(request)
    now = time.time()
    health: push.PushHealth | None = None
    force: PushInForce | None = None
    updates: str | None = None
    try:
        streams = await stream_gauges(svc.redis)
        unknown = await unknown_after_send(svc.redis)
        stored: int | None = await svc.store.business_revision()
        force = await default_push(svc, now)
        health = force.subscription
        updates = await read_label(svc)
        redis_up = True
    except RedisError:  # still answer: the process metrics matter most when Redis is down
        streams, unknown, stored, redis_up = [], None, None, False
    last = health.last_state_change if health is not None else None
    last_event = force.last_event if force is not None else None
    body = metrics.render(
        revision=svc.config.revision, stored_revision=stored, streams=streams,
        unknown_after_send=unknown, redis_up=redis_up,
        push_degraded=None if force is None else force.state == "degraded",
        push_way=None if force is None else (force.way if force.state == "ok" else force.state),
        push_last_event_age_s=None if last_event is None else now - last_event,
        updates_way=None if updates is None else _way(updates),
        push_last_state_change_age_s=None if last is None else now - last,
        push_subscription_expires=(
            health.expires if health is not None and health.state != "off" else None),
    )
    return Response(body, media_type=metrics.CONTENT_TYPE)
