"""The operator's actions on one mailbox act in the account `?account=` names (issue #35, SPEC
G.3; reference §5, §7.16): the reconcile, the trace, the DLQ, the queue's counts, the gap audit
and the rules dry run of account `b` (a second Cyrus user) see and act on `b`'s mail alone, and
without `?account=` they answer about `default` as before."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx

from messageweave.store import keys
from tests.helpers import assert_envelope, eventually
from tests.integration.accounts.conftest import ServedAccount, add_account, set_enabled
from tests.integration.test_cli_accounts import run_cli
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp


def _reconcile_headers(app: ServedApp) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.wire['reconcile_token']}"}


async def _reconcile(app: ServedApp, account: str) -> None:
    """`POST /reconcile?account=` until it ran a pass (409 = another pass of the account's own
    scheduler held its lock at that moment)."""
    answers: list[httpx.Response] = []

    async def ran() -> bool:
        answers.append(await app.client.post(f"/reconcile?account={account}",
                                             headers=_reconcile_headers(app)))
        return answers[-1].status_code == 204

    await eventually(ran, lambda: f"a reconcile of {account}: {answers[-1].text}")


async def _with_b(app: ServedApp, cyrus: CyrusServer) -> ServedAccount:
    """Account `b` with nothing scheduled (passes and audits only when asked), its mailbox's
    starting point recorded."""
    await app.configure(reconcile_interval_s=0, audit_interval_s=0)
    b = await add_account(app, cyrus, "b")
    await _reconcile(app, "b")

    async def recorded() -> bool:
        return bool(await app.redis.exists(b.cursor))

    await eventually(recorded, "b's first pass")
    return b


async def _new_mail(app: ServedApp, cyrus: CyrusServer, b: ServedAccount) -> tuple[str, str]:
    """A mail with a word of its own in b's mailbox, found by `/reconcile?account=b`: (word,
    email id)."""
    word = f"acting-{secrets.token_hex(4)}"
    email_id = cyrus.append(subject=f"note {word}", user=b.user).email_id
    await _reconcile(app, "b")
    return word, email_id


async def _get(app: ServedApp, path: str) -> dict[str, Any]:
    answer = await app.client.get(path, headers=app.admin)
    assert answer.status_code == 200, (path, answer.text)
    body: dict[str, Any] = answer.json()
    return body


async def test_reconcile_and_trace_act_in_the_named_account(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches `?account=b` refused ("not served yet") or answered with `default`'s mailbox:
    `/reconcile?account=b` must queue b's new mail in b's stream (to b's chat), and the trace of
    b must find it with its send attempt (the send log names b), delivered, and b's send-log view
    show it, while `default`'s trace and send-log view never see it."""
    b = await _with_b(served, cyrus)
    word, email_id = await _new_mail(served, cyrus, b)
    claim = await served.redis.get(b.keys.dedup_jmap(b.user, email_id))
    assert claim is not None and await served.redis.xlen(keys.STREAM_JMAP) == 0
    await served.emulator.wait_for_messages(served.token, b.chat, 1, timeout_s=15)

    async def delivered() -> bool:
        found = await _get(served, f"/api/trace?account=b&q={word}")
        return found["found"] and found["mails"][0]["status"] == "delivered"

    await eventually(delivered, "b's mail traced as delivered")
    mail = (await _get(served, f"/api/trace?account=b&q={email_id}"))["mails"][0]
    assert mail["subject"] == f"note {word}"
    [enqueued] = [s for s in mail["steps"] if s["step"] == "enqueued"]
    assert enqueued["entry_id"] == claim
    attempts = [s for s in mail["steps"] if s["step"] == "attempt"]
    assert [(a["entry_id"], a["outcome"]) for a in attempts] == [(claim, "delivered")]
    sends = (await _get(served, "/api/logs/send?account=b"))["records"]
    assert [(r["event_id"], r["outcome"]) for r in sends] == [(claim, "delivered")]
    others = (await _get(served, "/api/logs/send?account=default"))["records"]
    assert claim not in {r["event_id"] for r in others}
    for path in (f"/api/trace?q={word}", f"/api/trace?account=default&q={word}"):
        other = await _get(served, path)
        assert not other["found"] and [m["subject"] for m in other["mails"]] == [None], other
    unseen = (await _get(served, f"/api/trace?q={email_id}"))["mails"]
    assert [m["seen"] for m in unseen] == [False]


async def test_the_dlq_and_delivery_routes_act_in_the_named_account(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches the DLQ list, its replay or the queue's counts reading `default`'s stream for
    `?account=b` (or refusing it): b's dead letter (its chat blocked the bot) is listed,
    counted and replayed in b, never in `default`, and its trace says where it is."""
    b = await _with_b(served, cyrus)
    await served.emulator.fail(token=served.token, method="sendMessage", chat_id=b.chat,
                               error_code=403)
    word, _email_id = await _new_mail(served, cyrus, b)
    dlq = keys.dlq(b.keys.stream_jmap)

    async def dead() -> bool:
        return int(await served.redis.xlen(dlq)) == 1

    await eventually(dead, "b's mail dead-lettered")
    [(dlq_id, _fields)] = await served.redis.xrange(dlq)

    listed = (await _get(served, "/api/dlq?account=b"))["entries"]
    assert [(e["id"], e["stream"]) for e in listed] == [(dlq_id, "stalwart:jmap")]
    assert dlq_id not in {e["id"] for e in (await _get(served, "/api/dlq"))["entries"]}
    counts = (await _get(served, "/api/delivery?account=b"))["streams"]
    assert counts["stalwart:jmap"]["dlq"] == 1
    assert (await _get(served, "/api/delivery"))["streams"]["stalwart:jmap"]["dlq"] == 0
    [mail] = (await _get(served, f"/api/trace?account=b&q={word}"))["mails"]
    assert mail["status"] == "dead_letter"
    assert [s["in_dlq"] for s in mail["steps"] if s["step"] == "dead_letter"] == [True]

    nothing = await served.client.post("/api/dlq/replay", headers=served.admin,
                                       json={"stream": "stalwart:jmap"})
    assert nothing.status_code == 200 and nothing.json() == {"replayed": 0}, nothing.text
    await served.emulator.clear_failures(served.token)
    replayed = await served.client.post("/api/dlq/replay?account=b", headers=served.admin,
                                        json={"stream": "stalwart:jmap"})
    assert replayed.status_code == 200 and replayed.json() == {"replayed": 1}, replayed.text
    sent = await served.emulator.wait_for_messages(served.token, b.chat, 1, timeout_s=15)
    assert word in sent[-1].text
    assert await served.redis.xlen(dlq) == 0 and await served.redis.xlen(keys.STREAM_JMAP) == 0
    records = (await _get(served, "/api/logs/audit?limit=5"))["records"]
    [record] = [r for r in records if r["action"] == "dlq_replayed" and r["replayed"] == 1]
    assert record["account"] == "b"


async def test_the_gap_audit_and_the_dry_run_act_in_the_named_account(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches the gap audit or the rules dry run of `?account=b` run on `default`'s mailbox
    and keys: b's audit is kept as b's last (not `default`'s) and its audit-log record names b;
    b's dry run judges b's newest mail with b's configuration (its chat)."""
    b = await _with_b(served, cyrus)
    word, email_id = await _new_mail(served, cyrus, b)
    before = await _get(served, "/api/audit")

    audited = await served.client.post("/api/audit?account=b", headers=served.admin)
    assert audited.status_code == 200, audited.text
    last = (await _get(served, "/api/audit?account=b"))["last"]
    assert last is not None and last["trigger"] == "api" and last["ok"] is True
    assert await _get(served, "/api/audit") == before
    records = (await _get(served, "/api/logs/audit?limit=5"))["records"]
    [record] = [r for r in records if r["action"] == "gap_audit"]
    assert record["account"] == "b"

    dry = await served.client.post("/api/rules/dry-run?account=b", headers=served.admin)
    assert dry.status_code == 200, dry.text
    newest = dry.json()["mails"][0]
    assert (newest["email_id"], newest["subject"], newest["chat_id"]) == (
        email_id, f"note {word}", b.chat)
    mine = await served.client.post("/api/rules/dry-run", headers=served.admin)
    assert mine.status_code == 200, mine.text
    assert email_id not in {m["email_id"] for m in mine.json()["mails"]}


async def test_a_paused_account_answers_reads_and_refuses_its_mail_server(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a paused account whose mailbox routes all say "not served" (its dead letters and
    last audit are still there to read), or one whose reconcile, audit, trace or dry run
    connects to its mail server although a paused account opens no connection."""
    b = await _with_b(served, cyrus)
    await set_enabled(served, b.id, False)
    for path in ("/api/dlq?account=b", "/api/audit?account=b", "/api/delivery?account=b"):
        await _get(served, path)
    for method, path in [("POST", "/api/audit?account=b"), ("GET", "/api/trace?account=b&q=x"),
                         ("POST", "/api/rules/dry-run?account=b")]:
        assert_envelope(await served.client.request(method, path, headers=served.admin),
                        409, "conflict")
    assert_envelope(await served.client.post("/reconcile?account=b",
                                             headers=_reconcile_headers(served)),
                    409, "conflict")


async def test_a_paused_default_refuses_its_mail_server_like_any_account(
    served: ServedApp,
) -> None:
    """Catches a paused `default` whose reconcile, audit, trace or dry run still connected to
    its mail server: its pause stops its loops now (issue #35), as any account's, so the
    operator's actions must not open the connection the pause closed. Its reads still answer;
    resumed, the actions work again."""
    await set_enabled(served, "default", False)
    for path in ("/api/dlq", "/api/audit", "/api/delivery"):
        await _get(served, path)
    for method, path in [("POST", "/api/audit"), ("GET", "/api/trace?q=x"),
                         ("POST", "/api/rules/dry-run")]:
        assert_envelope(await served.client.request(method, path, headers=served.admin),
                        409, "conflict")
    assert_envelope(await served.client.post("/reconcile", headers=_reconcile_headers(served)),
                    409, "conflict")
    await set_enabled(served, "default", True)
    done = await served.client.post("/reconcile", headers=_reconcile_headers(served))
    assert done.status_code == 204, done.text


async def test_the_commands_act_in_the_named_account(
    served: ServedApp, cyrus: CyrusServer, embedded_redis_url: str
) -> None:
    """Catches `--account b` refused ("not served yet") or acting on `default`'s mailbox:
    `reconcile --account b` queues b's new mail in b's stream, `trace --account b` finds it,
    `audit --account b` keeps b's last audit, and `dlq list --account b` reads b's dead
    letters."""
    b = await _with_b(served, cyrus)
    await served.emulator.fail(token=served.token, method="sendMessage", chat_id=b.chat,
                               error_code=403)
    word = f"acting-{secrets.token_hex(4)}"
    email_id = cyrus.append(subject=f"note {word}", user=b.user).email_id
    done = await run_cli(embedded_redis_url, "reconcile", "--once", "--account", "b")
    assert done.returncode == 0, done.stdout + done.stderr
    assert await served.redis.exists(b.keys.dedup_jmap(b.user, email_id))
    assert await served.redis.xlen(keys.STREAM_JMAP) == 0
    dlq = keys.dlq(b.keys.stream_jmap)

    async def dead() -> bool:
        return int(await served.redis.xlen(dlq)) == 1

    await eventually(dead, "b's mail dead-lettered")
    [(dlq_id, _fields)] = await served.redis.xrange(dlq)
    listed = await run_cli(embedded_redis_url, "dlq", "list", "--account", "b")
    assert listed.returncode == 0 and dlq_id in listed.stdout, listed.stdout + listed.stderr
    mine = await run_cli(embedded_redis_url, "dlq", "list")
    assert mine.returncode == 0 and dlq_id not in mine.stdout, mine.stdout + mine.stderr

    traced = await run_cli(embedded_redis_url, "trace", "--json", "--account", "b", email_id)
    assert traced.returncode == 0, traced.stdout + traced.stderr
    [mail] = json.loads(traced.stdout)["mails"]
    assert mail["subject"] == f"note {word}" and mail["status"] == "dead_letter"
    audited = await run_cli(embedded_redis_url, "audit", "--account", "b")
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert (await _get(served, "/api/audit?account=b"))["last"]["trigger"] == "cli"
