"""The edge gateway forwards every route of the service a user or the page needs, with the
service's methods, and nothing the service does not have."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.routing import Route

from messageweave.api import (
    accounts,
    admin,
    delivery,
    gap_audit,
    logs,
    mailbox,
    metrics,
    openapi,
    ops,
    rules,
    telegram_admin,
    trace,
)
from messageweave.web import static

ROOT = Path(__file__).resolve().parents[2]
# Not forwarded on purpose (gateway/README.md): the one-time bootstrap takes the master key and
# is for direct access to one backend; metrics and the schema are scraped/read per backend.
NOT_FORWARDED = {"/api/bootstrap", "/metrics", "/openapi.json"}
ASSET_MODULE = re.compile(r"/assets/[a-z][a-z0-9-]{0,63}\.js")


def _gateway() -> dict[str, set[str]]:
    """The gateway's table, and its one account's routes as the service names them
    (`/api/accounts/{id}` + the tail of `ACCOUNT_TABLE`)."""
    text = (ROOT / "gateway/src/routes.js").read_text()
    table = text[text.index("const ROUTE_TABLE"):text.index("];")]
    found = {path: set(methods.split()) for path, methods in
             re.findall(r'\["(/[^"]*)",\s*"([A-Z ]+)"', table)}
    accounts_table = text[text.index("const ACCOUNT_TABLE"):]
    accounts_table = accounts_table[:accounts_table.index("];")]
    for tail, methods in re.findall(r'\["(/?[a-z-]*)",\s*"([A-Z ]+)"', accounts_table):
        found["/api/accounts/{id}" + tail] = set(methods.split())
    return found


def _service() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for module in (delivery, ops, admin, mailbox, telegram_admin, logs, metrics, gap_audit,
                   openapi, trace, rules, static, accounts):
        for route in module.router.routes:
            if isinstance(route, Route):
                found.setdefault(route.path, set()).update(route.methods - {"HEAD"})
    return found


def test_every_service_route_is_forwarded_with_its_methods() -> None:
    """Catches a route the page calls that the gateway answers 404 (the rules card's dry run,
    then every route of the accounts, issue #35, were added to the service only), or a method
    the gateway refuses with 405."""
    gateway, service = _gateway(), _service()
    for path, methods in service.items():
        if path in NOT_FORWARDED or ASSET_MODULE.fullmatch(path):
            continue
        assert gateway.get(path) == methods, path
    assert set(gateway) - set(service) == set(), "the gateway forwards a route nobody serves"
