"""Which failures wait for a peer (issue #22, docs/reference.md §7.11), and the capped backoff."""

from __future__ import annotations

import pytest

from messageweave.chat.telegram import FailureClass
from messageweave.mail.jmap import (
    InvalidArguments,
    JmapError,
    JmapProtocolError,
    JmapTransportError,
    ServerUnavailable,
)
from messageweave.pipeline.attempt import BACKOFF_CAP_S, backoff_s
from messageweave.pipeline.events import DeliveryFailure, mail_failure


@pytest.mark.parametrize(("exc", "peer"), [
    (JmapTransportError("JMAP request timed out"), "jmap"),
    (JmapTransportError("JMAP server error: HTTP 503", status=503), "jmap"),
    (ServerUnavailable("serverUnavailable"), "jmap"),
    (JmapProtocolError("not JSON"), None),
    (InvalidArguments("invalidArguments"), None),
])
def test_only_an_unreachable_mail_server_is_waited_for(exc: JmapError, peer: str | None) -> None:
    """Catches a window that waits on answers a retry will not change: a mail server out of
    reach (network, timeout, 5xx, serverUnavailable) is waited for; a protocol or method
    error stays a fast retry counted by `max_retries`. Both are `transient`, as before."""
    failure = mail_failure(exc)
    assert failure.failure_class == FailureClass.TRANSIENT
    assert failure.peer == peer


@pytest.mark.parametrize("failure_class", [c for c in FailureClass if c != FailureClass.TRANSIENT])
def test_no_class_but_transient_waits_for_a_peer(failure_class: FailureClass) -> None:
    """Catches a 429 or a permanent refusal (400, 403, chat not found…) taken for an outage:
    only `transient` waits for the peer; a 429 keeps its retry_after, the rest their DLQ."""
    assert DeliveryFailure(failure_class, "telegram 4xx", peer="telegram").peer is None


def test_the_backoff_grows_and_never_passes_its_cap() -> None:
    """Catches jitter on top of the cap (a 5-minute cap waited up to 6 minutes) and an
    exponent that overflows after days of retries."""
    for _ in range(200):  # the jitter is random: many draws
        assert 0.8 <= backoff_s(1) <= 1.2 and 3.2 <= backoff_s(3) <= 4.8
        assert 204.8 <= backoff_s(9) <= BACKOFF_CAP_S  # 256 s ± 20 %, capped
        for attempt in (10, 50, 10_000):  # 512 s × 0.8 is past the cap already
            assert backoff_s(attempt) == BACKOFF_CAP_S
        assert all(backoff_s(n, 0.1, 1.0) <= 1.0 for n in range(1, 40))
