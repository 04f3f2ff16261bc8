"""Mail entries read together share one Email/get (issue #14), each still ending as before."""

from __future__ import annotations

import json

from messageweave.mail.jmap import JmapClient
from messageweave.pipeline.worker import Worker
from messageweave.store import keys
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    RecordingTransport,
    subject_of,
    worker_services,
)
from tests.served import ServedApp


def _email_gets(transport: RecordingTransport) -> list[list[str]]:
    """The ids of every Email/get call the client sent, one list per call."""
    return [call[1]["ids"] for body in transport.posts()
            for call in body["methodCalls"] if call[0] == "Email/get"]


async def test_mails_read_together_take_one_email_get_and_a_gone_one_still_dead_letters(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Five mails, one expunged after it was queued and one id Cyrus never had, queued and
    read as one batch: one Email/get fetches all seven ids (before, one call per entry), the
    five are notified, and the two missing ones are dead-lettered `not_found` one by one,
    exactly as a lone entry would be."""
    app = cron_only
    subjects = [f"batched {n}" for n in range(5)]
    emails = [app.append(subject) for subject in subjects]
    expunged = app.cyrus.append(subject="batched gone")
    emails += [expunged.email_id, "Mdoesnotexist0000000000000"]
    entries = [await app.enqueue_mail(email_id) for email_id in emails]
    app.cyrus.expunge(expunged)

    async with worker_services(embedded_redis_url) as svc:
        assert svc.runtime is not None
        transport = RecordingTransport(app.cyrus.ssl_context())
        recording = JmapClient(app.cyrus.session_url, CYRUS_USER, CYRUS_PASSWORD, timeout=10,
                               transport=transport)
        await recording.get_session()
        if svc.runtime.jmap is not None:
            await svc.runtime.jmap.aclose()
        svc.runtime.jmap = recording
        result = await Worker(svc).drain_once(batch=10)

    assert result.outcomes == {"delivered": 5, "dead_letter": 2}
    assert _email_gets(transport) == [emails]
    sent = await app.emulator.sent_messages(app.token, app.chat)
    assert [subject_of(m.text) for m in sent] == subjects
    for entry in entries[5:]:
        raw = await app.redis.get(keys.delivery_committed(keys.STREAM_JMAP, entry))
        record = json.loads(raw)
        assert record["state"] == "dead_letter" and record["failure_class"] == "not_found"
