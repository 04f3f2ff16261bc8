"""Probes and status: `/healthz`, `/ready`, `/api/status`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from redis.exceptions import RedisError

from messageweave.api.account_status import default_push, failing_accounts
from messageweave.api.credentials import services, shows_admin
from messageweave.errors import REQUEST_ID_HEADER, RETRY_AFTER, ApiError, request_id_of
from messageweave.pipeline.polling import read_label
from messageweave.probes import (
    ProbeFailure,
    Shared,
    guarded,
    mail_probe,
    probe_ttl,
    telegram_get_me_failure,
)
from messageweave.services import Services
from messageweave.settings import Settings
from messageweave.store.waiting import waiting_for_peers
from messageweave.version import release_version

router = APIRouter()

READY_FAILED_HEADER = "x-ready-failed"


def status_body(settings: Settings, version: str, *, settings_saved: bool = False,
                full_version: bool = False) -> dict[str, object]:
    """`mode` says whether the environment is complete (the contract's meaning);
    `settings_saved` whether a business configuration has been stored, so the page can tell
    "running, not configured yet" from "configured" (issue #15). Setup mode has none.
    `version` is the release number, or with `full_version` (an admin session asked) the
    build fingerprint `version` (issue #23: the commit is not for the public)."""
    missing = settings.missing
    return {
        "ready": not missing,
        "mode": "configured" if not missing else "configuration-setup",
        "missing": missing,
        "version": version if full_version else release_version(),
        "settings_saved": settings_saved and not missing,
    }


@router.get("/healthz")
async def healthz() -> PlainTextResponse:
    return PlainTextResponse("ok")


@router.get("/api/status")
async def api_status(request: Request) -> JSONResponse:
    """Always 200. `settings_saved` comes from the configuration revision after the same
    shared refresh `/ready` runs (a burst costs one Redis round trip, not one per request); a
    Redis failure leaves the last revision this instance saw. The build fingerprint only for
    an admin session (`shows_admin`)."""
    svc = services(request)
    full = await shows_admin(request)
    await _ready_checks(request).local.get(None, lambda: _local_check(svc))
    return JSONResponse(status_body(svc.settings, svc.version, full_version=full,
                                    settings_saved=svc.config.revision > 0))


class _ReadyChecks:
    """What `/ready` shares on one instance: the local check (configuration refresh, Redis,
    push), shared only while in flight, and one probe per peer, cached (`probe_ttl`) for the
    configuration revision it was made with."""

    def __init__(self) -> None:
        self.local: Shared[_Local] = Shared(lambda _answer: 0.0)
        self.jmap: Shared[ProbeFailure | None] = Shared(probe_ttl)
        self.telegram: Shared[ProbeFailure | None] = Shared(probe_ttl)
        # Entries waiting for a peer out of reach (§7.11): shared while in flight, as `local`.
        self.waiting: Shared[dict[str, object] | None] = Shared(lambda _answer: 0.0)


def _ready_checks(request: Request) -> _ReadyChecks:
    """This instance's shared checks, made on first use (one event loop: no race)."""
    checks = getattr(request.app.state, "ready_checks", None)
    if not isinstance(checks, _ReadyChecks):
        checks = request.app.state.ready_checks = _ReadyChecks()
    return checks


@dataclass(frozen=True)
class _Local:
    """The local check's answer: Redis answered; the push in force and the way Telegram's
    updates arrive, as labels (None when Redis did not answer)."""

    redis: bool
    push: str | None = None
    updates: str | None = None


async def _local_check(svc: Services) -> _Local:
    """Reload a newer configuration, then read what Redis says of the receivers."""
    await svc.config.refresh()
    try:
        force = await default_push(svc, time.time())
        return _Local(True, force.label, await read_label(svc))
    except RedisError:
        return _Local(False)


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    """200 when the configuration is complete, Redis answers and both peers' probes pass (the
    mail server's is `jmap`, or `mail` for an IMAP wire: `probes.mail_probe`); the
    push in force (`ok (eventsource)`, `ok (subscription)`, for an IMAP wire `ok (idle)`;
    `degraded: <reason>`, `off`) and the
    way Telegram's updates arrive (`updates`: `ok (polling)`, `ok (webhook)`,
    `degraded: <reason>`, `off`) are reported but never fail readiness: mail still arrives
    through the reconcile schedule, and the page says what is wrong. Else 503 (the error
    envelope) with the checks that ran and failed in `x-ready-failed`; for an admin session
    the body also says why each failed (`_not_ready`), for anyone else it is the bare envelope.

    Anyone can call `/ready`, so a burst must cost neither the peers nor our Redis pool one
    call per request: requests share the local check in flight, and each peer's probe in
    flight and for a few seconds after (`messageweave.probes.Shared`); a new configuration
    revision probes anew."""
    svc = services(request)
    shared = _ready_checks(request)
    local = await shared.local.get(None, lambda: _local_check(svc))
    cfg, revision = svc.config.config, svc.config.revision
    checks = {"configured": cfg is not None, "redis": local.redis}
    reasons: dict[str, ProbeFailure] = {}
    if cfg is not None:  # the peers can only be probed with a configuration
        mail_check, mail_probe_of = mail_probe(cfg)
        mail_failure, telegram_failure = await asyncio.gather(
            shared.jmap.get(revision, lambda: guarded(mail_probe_of, cfg)),
            shared.telegram.get(revision, lambda: guarded(telegram_get_me_failure, cfg)),
        )
        checks.update({mail_check: mail_failure is None, "telegram": telegram_failure is None})
        reasons = {name: failure for name, failure in
                   ((mail_check, mail_failure), ("telegram", telegram_failure)) if failure}
    failed = [name for name, ok in checks.items() if not ok]
    failing: list[str] | None = None
    if cfg is not None and len(accounts := svc.accounts.every()) > 1:
        # Several accounts (SPEC G.3): one account's mail server does not fail the
        # deployment; the body names the failing accounts while another one works.
        failing = await failing_accounts(request, accounts)
        if len(failing) < len([a for a in accounts if a.enabled]):
            failed = [name for name in failed if name != mail_check]
    if failed:
        if await shows_admin(request, admin_key=True):
            return _not_ready(request, failed, reasons)
        raise ApiError(503, "service_unavailable", retry=True,
                       headers={READY_FAILED_HEADER: ", ".join(failed)})
    waiting = await _waiting_field(svc, shared)
    body = {"status": "ready", **checks, "push": local.push, "updates": local.updates,
            **waiting}
    if failing is not None:
        body["accounts_failing"] = failing
    return JSONResponse(body)


def _not_ready(request: Request, failed: list[str], reasons: dict[str, ProbeFailure]
               ) -> JSONResponse:
    """`/ready`'s 503 for an admin session: the envelope plus `failed`, each failed check with
    why (`reason`: a `probes.KINDS` code, or `unreachable` for Redis, `missing` for the
    configuration; `cause` and `remedy` in English). A probe's words name a host and port at
    most, never a token, a password or a URL's path."""
    words = {"configured": {"reason": "missing", "cause": "no business configuration is saved",
                            "remedy": "save the business configuration"},
             "redis": {"reason": "unreachable", "cause": "Redis did not answer",
                       "remedy": "check REDIS_URL and that Redis is running"}}
    for name, failure in reasons.items():
        words[name] = {"reason": failure.kind, "cause": failure.cause, "remedy": failure.remedy}
    rid = request_id_of(request.scope)
    return JSONResponse(
        {"error": "service_unavailable", "request_id": rid,
         "failed": {name: words[name] for name in failed}},
        status_code=503,
        headers={REQUEST_ID_HEADER: rid, "Retry-After": RETRY_AFTER,
                 READY_FAILED_HEADER: ", ".join(failed)})


async def _read_waiting(svc: Services) -> dict[str, object] | None:
    """`{"waiting": {peer: {since, entries}}}` while entries wait for a peer, `{}` when none;
    None when Redis did not answer."""
    try:
        found = await waiting_for_peers(svc.redis)
    except RedisError:
        return None
    return {"waiting": {peer: w.as_json() for peer, w in found.items()}} if found else {}


async def _waiting_field(svc: Services, shared: _ReadyChecks) -> dict[str, object]:
    """`/ready`'s `waiting` field (issue #22), one Redis round trip shared by the requests in
    flight; Redis failing here fails readiness as the local check would."""
    waiting = await shared.waiting.get(None, lambda: _read_waiting(svc))
    if waiting is None:
        raise ApiError(503, "service_unavailable", retry=True,
                       headers={READY_FAILED_HEADER: "redis"})
    return waiting
