"""Counting the TLS handshakes this process completes: what a mail server sees as a new
connection (issue #37: the first mail after a quiet spell paid one)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


class Handshakes:
    def __init__(self) -> None:
        self.done = 0


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Handshakes]:
    """Every asyncio and httpx TLS connection opened meanwhile (both go through
    `SSLContext.wrap_bio`, which builds the context's `sslobject_class`), counted once its
    handshake completes."""
    count = Handshakes()

    class CountingObject(ssl.SSLObject):
        def do_handshake(self) -> None:
            super().do_handshake()  # raises SSLWantReadError until the handshake is done
            count.done += 1

    with monkeypatch.context() as patch:
        patch.setattr(ssl.SSLContext, "sslobject_class", CountingObject)
        yield count

