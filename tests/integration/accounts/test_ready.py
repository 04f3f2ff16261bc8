"""`/ready` with several accounts (issue #35, SPEC G.3): about the deployment, naming the
accounts whose mail server fails."""

from __future__ import annotations

from tests.helpers import closed_port
from tests.integration.accounts.conftest import add_account
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp


async def test_ready_names_a_failing_account_and_stays_ready_while_another_works(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a `/ready` that goes 503 for one account's dead mail server while `default`'s
    works, or that does not say which account fails."""
    await add_account(served, cyrus, "broken",
                      jmap_session_url=f"https://127.0.0.1:{closed_port()}/")
    await add_account(served, cyrus, "family")
    ready = await served.client.get("/ready")
    assert ready.status_code == 200, ready.text
    assert ready.json()["accounts_failing"] == ["broken"]
