"""`GET /metrics`: Prometheus text, for the same credentials as the admin API.

Protected like `/api/config` (config_authorized): a scraper sends
`Authorization: Bearer <worker_token>` (Prometheus `authorization: {credentials: ...}`).
Metrics name queues and counts, never content, but they are not for the open internet.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from redis.exceptions import RedisError

from messageweave.api.services import require_config_authorized, services
from messageweave.ops import metrics
from messageweave.store.opstats import stream_stats, unknown_after_send

router = APIRouter()


@router.get("/metrics")
async def get_metrics(request: Request) -> Response:
    await require_config_authorized(request)
    svc = services(request)
    try:
        streams = await stream_stats(svc.redis)
        unknown = await unknown_after_send(svc.redis)
        stored: int | None = await svc.store.business_revision()
        redis_up = True
    except RedisError:  # still answer: the process metrics matter most when Redis is down
        streams, unknown, stored, redis_up = [], None, None, False
    body = metrics.render(revision=svc.config.revision, stored_revision=stored, streams=streams,
                          unknown_after_send=unknown, redis_up=redis_up)
    return Response(body, media_type=metrics.CONTENT_TYPE)
