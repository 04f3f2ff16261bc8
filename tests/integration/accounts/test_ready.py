"""`/ready` with several accounts (issue #35, SPEC G.3): about the deployment, naming the
accounts whose mail server fails."""

from __future__ import annotations

from typing import Any

from messageweave.store.mailbox import enqueue_new_mails
from tests.helpers import closed_port, eventually
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


async def test_ready_counts_the_entries_of_any_account_waiting_for_its_mail_server(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches `/ready`'s `waiting` reading `default`'s stream alone: an entry of another
    account whose mail server is out of reach waits for it (issue #22) and must be counted, or
    the operator is told nothing waits while that account's mail is held."""
    broken = await add_account(served, cyrus, "broken",
                               jmap_session_url=f"https://127.0.0.1:{closed_port()}/")
    assert await enqueue_new_mails(served.redis, broken.user, ["M-waiting"],
                                   names=broken.keys) == 1
    answers: list[dict[str, Any]] = []

    async def counted() -> bool:
        ready = await served.client.get("/ready")
        answers.append(ready.json())
        return ready.status_code == 200 and "jmap" in answers[-1].get("waiting", {})

    await eventually(counted, lambda: f"the waiting entry in /ready: {answers[-1]}")
    assert answers[-1]["waiting"]["jmap"]["entries"] == 1
