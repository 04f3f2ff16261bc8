"""A secret saved through the API is redacted from the very next log line (issue #14: the
secret set is cached, keyed on the configuration objects in force)."""

from __future__ import annotations

import io
import json
import logging

import httpx

from messageweave.logs import configure_logging
from tests.helpers import login, sample_wire


async def test_a_saved_secret_is_redacted_from_the_next_log_line(
    client: httpx.AsyncClient,
) -> None:
    """Catches a redaction list cached past a save: `Services.secrets` kept the list of the
    previous configuration object, so a just-saved worker token was logged in clear."""
    level = logging.getLogger().level
    stream = io.StringIO()
    handler = configure_logging(stream)
    log = logging.getLogger("messageweave.test")
    try:
        session = await login(client)
        first = await client.put("/api/business-config", headers=session,
                                 json=sample_wire(worker_token="worker-token-FIRST-0001"))
        assert first.status_code == 200, first.text
        log.warning("first %s", "worker-token-FIRST-0001")
        again = await client.put("/api/business-config", headers=session,
                                 json={"worker_token": "worker-token-AGAIN-0002"})
        assert again.status_code == 200, again.text
        log.warning("again %s", "worker-token-AGAIN-0002",
                    extra={"fields": {"token": "worker-token-AGAIN-0002"}})
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    ours = [line for line in lines if line["logger"] == "messageweave.test"]
    assert [line["message"] for line in ours] == ["first <secret>", "again <secret>"]
    assert ours[1]["token"] == "<secret>"
    assert "worker-token-" not in stream.getvalue()
