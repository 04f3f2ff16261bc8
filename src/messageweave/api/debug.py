"""The opt-in debug surface `/debug/*` (inventory §2.5).

Mounted only when requested (`--debug` or a truthy `DEBUG_ENABLED`) *and* `DEBUG_TOKEN` is set;
otherwise every debug path is an ordinary 404. Every route needs `Bearer DEBUG_TOKEN`.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from messageweave.api.services import bearer, constant_time_eq, services
from messageweave.errors import unauthorized


async def require_debug_token(request: Request) -> None:
    if not constant_time_eq(bearer(request), services(request).settings.debug_token):
        raise unauthorized()


router = APIRouter(prefix="/debug", dependencies=[Depends(require_debug_token)])


@router.get("/ping")
async def debug_ping() -> JSONResponse:
    return JSONResponse({"ok": True})
