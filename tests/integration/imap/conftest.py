"""The IMAP client against real servers: Dovecot over implicit TLS and over STARTTLS, Cyrus's
own imapd over STARTTLS. `imap_peer` gives each test a fresh user on one of them."""

from __future__ import annotations

import itertools
import random
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import pytest

from messageweave.mail.imap import ImapClient, Security
from tests.peers.cyrus import CyrusServer
from tests.peers.dovecot import DovecotServer
from tests.peers.dovecot import running as running_dovecot

_users = itertools.count()


@dataclass
class ImapPeer:
    """One real server and a fresh user on it."""

    name: str
    port: int
    security: Security
    ssl_context: ssl.SSLContext
    user: str
    password: str
    deliver: Callable[[bytes], None]
    ca_pem: str = ""  # the server's CA, as an operator pastes it into `imap_ca_pem`

    def client(self, *, password: str | None = None, timeout: float = 10) -> ImapClient:
        return ImapClient(
            "127.0.0.1", self.port, username=self.user,
            password=self.password if password is None else password,
            security=self.security, ssl_context=self.ssl_context, timeout=timeout,
        )  # fmt: skip


def _fresh() -> tuple[str, str]:
    user = f"imap{next(_users)}x{random.randrange(10**6)}"
    return user, f"pw-{user}"


# Every server and way in: the client's own tests (test_client.py) run on each. The features
# above the client run on Dovecot over TLS and Cyrus over STARTTLS: both servers and both ways
# in, without repeating Dovecot's STARTTLS path, which only the client tells apart (suite time).
ALL_PEERS = ("dovecot-tls", "dovecot-starttls", "cyrus-starttls")
FEATURE_PEERS = ("dovecot-tls", "cyrus-starttls")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "imap_peer" not in metafunc.fixturenames:
        return
    if any("imap_peer" in str(m.args[0]) for m in metafunc.definition.iter_markers("parametrize")):
        return  # the test chose its peers itself
    peers = ALL_PEERS if metafunc.module.__name__.endswith(".test_client") else FEATURE_PEERS
    metafunc.parametrize("imap_peer", peers, indirect=True)


@pytest.fixture
def imap_peer(request: pytest.FixtureRequest) -> ImapPeer:
    user, password = _fresh()
    if request.param.startswith("dovecot"):
        dovecot: DovecotServer = request.getfixturevalue("dovecot")
        dovecot.add_user(user, password)
        tls = request.param == "dovecot-tls"
        return ImapPeer(
            request.param, dovecot.ports.imaps if tls else dovecot.ports.imap,
            "tls" if tls else "starttls", dovecot.ssl_context(), user, password,
            lambda raw: dovecot.deliver(raw, user), dovecot.ca_file.read_text(),
        )  # fmt: skip
    cyrus: CyrusServer = request.getfixturevalue("cyrus")
    cyrus.add_user(user, password)
    return ImapPeer(
        request.param, cyrus.ports.imap, "starttls", cyrus.ssl_context(), user, password,
        lambda raw: cyrus.deliver(raw, user), cyrus.ca_file.read_text(),
    )  # fmt: skip


@pytest.fixture
async def imap(imap_peer: ImapPeer) -> AsyncIterator[ImapClient]:
    """A logged-in client of `imap_peer`'s fresh user."""
    async with imap_peer.client() as client:
        yield client


# The post-login CAPABILITY of Dovecot 2.3 without MOVE and LITERAL+: a real server that lacks
# them, so the client's COPY + STORE + UID EXPUNGE path and its synchronizing literals (wait for
# `+`, then send) run against real IMAP.
NO_MOVE_CAPABILITY = (
    "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE SORT SORT=DISPLAY THREAD=REFERENCES "
    "THREAD=REFS THREAD=ORDEREDSUBJECT MULTIAPPEND URL-PARTIAL CATENATE UNSELECT CHILDREN "
    "NAMESPACE UIDPLUS LIST-EXTENDED I18NLEVEL=1 CONDSTORE QRESYNC ESEARCH ESORT SEARCHRES "
    "WITHIN CONTEXT=SEARCH LIST-STATUS BINARY SNIPPET=FUZZY NOTIFY SPECIAL-USE"
)


@pytest.fixture(scope="module")
def dovecot_without_move() -> Iterator[DovecotServer]:
    with running_dovecot(users={"nomove": "pw-nomove"}, capability=NO_MOVE_CAPABILITY) as srv:
        yield srv
