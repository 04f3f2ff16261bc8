"""`/ready` with several accounts (issue #35, SPEC G.3): about the deployment, naming the
accounts whose mail server fails."""

from __future__ import annotations

from typing import Any

from messageweave.store.mail_entries import enqueue_new_mails
from tests.helpers import closed_port, eventually, metric, until_label
from tests.integration.accounts.conftest import add_account, set_enabled
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


async def test_ready_and_metrics_say_push_off_as_soon_as_default_is_paused(
    served: ServedApp,
) -> None:
    """Catches: a paused `default` whose push `/ready` (and `/metrics`, `/api/push/status`)
    still reported as its holder last wrote it (`ok (eventsource)`, for up to the status's
    120 s, then `degraded`) while its holder had stopped and the account's status said `off`."""
    await served.configure(push_mode="eventsource")
    await until_label(served.client, "push", "ok (eventsource)")

    await set_enabled(served, "default", False)  # once the app's registry has read it
    ready = await served.client.get("/ready")
    assert ready.status_code == 200, ready.text
    status = await served.client.get("/api/accounts/default/status", headers=served.admin)
    assert (ready.json()["push"], status.json()["push"]) == ("off", "off")
    card = await served.client.get("/api/push/status", headers=served.admin)
    assert card.json()["in_force"] == "off", card.text
    text = (await served.client.get("/metrics", headers=served.admin)).text
    assert metric(text, "messageweave_push_in_force", 'way="off"') == 1, text
    assert metric(text, "messageweave_push_degraded") == 0, text
