"""The mailbox commands of `ImapClient`: SELECT / EXAMINE, LIST, STATUS, UID SEARCH, UID FETCH,
UID STORE, UID EXPUNGE, UID MOVE (COPY + STORE \\Deleted + UID EXPUNGE where MOVE is missing) and
APPEND.

Mailbox names go through `wire.mailbox` (CR / LF refused), user text through `wire.Text`
(quoted or a literal), and every token we spell through `wire.atom`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from messageweave.mail.imap import responses
from messageweave.mail.imap.errors import ImapCapabilityError, ImapProtocolError
from messageweave.mail.imap.responses import Fetched, MailboxInfo, as_int
from messageweave.mail.imap.wire import Literal, Text, WireArg, atom, mailbox, string, uid_set

if TYPE_CHECKING:
    from messageweave.mail.imap.client import Answer

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class MailboxState:
    """What SELECT / EXAMINE said. `highestmodseq` is None without CONDSTORE."""

    name: str
    exists: int
    uidvalidity: int
    uidnext: int | None
    highestmodseq: int | None
    readonly: bool


@dataclass(frozen=True)
class Copied:
    """COPYUID / APPENDUID (RFC 4315): the target's UIDVALIDITY and the new UIDs, in the order
    of `sources` (for APPEND, `sources` is empty)."""

    uidvalidity: int
    sources: tuple[int, ...]
    uids: tuple[int, ...]


class MailboxCommands:
    """Mixed into `ImapClient`, which provides `_run` and `capabilities`."""

    capabilities: frozenset[str]

    async def _run(self, name: str, *args: WireArg, respond: bytes | None = None) -> Answer:
        raise NotImplementedError

    async def select(self, name: str, *, readonly: bool = False) -> MailboxState:
        """SELECT (EXAMINE with `readonly`), with CONDSTORE where the server offers it."""
        args: list[WireArg] = [mailbox(name)]
        if "CONDSTORE" in self.capabilities:
            args.append(b"(CONDSTORE)")
        answer = await self._run("EXAMINE" if readonly else "SELECT", *args)
        exists = [d.number for d in answer.data("EXISTS") if d.number is not None]
        validity = answer.code("UIDVALIDITY")
        if not validity:
            raise ImapProtocolError(f"SELECT {name!r} without UIDVALIDITY")
        uidnext, modseq = answer.code("UIDNEXT"), answer.code("HIGHESTMODSEQ")
        return MailboxState(
            name=name,
            exists=exists[-1] if exists else 0,
            uidvalidity=as_int(validity[0], "UIDVALIDITY"),
            uidnext=as_int(uidnext[0], "UIDNEXT") if uidnext else None,
            highestmodseq=as_int(modseq[0], "HIGHESTMODSEQ") if modseq else None,
            readonly=answer.status.code == "READ-ONLY",
        )

    async def list_mailboxes(self, pattern: str = "*") -> list[MailboxInfo]:
        """LIST "" pattern, with the special-use attributes (RFC 6154) where offered."""
        args: list[WireArg] = [b'""', string(Text(pattern))]
        if {"SPECIAL-USE", "LIST-EXTENDED"} <= self.capabilities:
            args.append(b"RETURN (SPECIAL-USE)")
        answer = await self._run("LIST", *args)
        return [responses.list_entry(d) for d in answer.data("LIST")]

    async def special_use(self, attribute: str) -> str | None:
        """The name of the mailbox marked `attribute` (`\\Archive`, `\\Sent`, ...), or None."""
        for info in await self.list_mailboxes():
            if info.has(attribute) and info.selectable:
                return info.name
        return None

    async def status(
        self, name: str, items: Sequence[str] = ("MESSAGES", "UIDNEXT", "UIDVALIDITY", "UNSEEN")
    ) -> dict[str, int]:
        answer = await self._run("STATUS", mailbox(name), b"(" + b" ".join(map(atom, items)) + b")")
        found = answer.data("STATUS")
        if not found:
            raise ImapProtocolError(f"STATUS {name!r} without a STATUS response")
        return responses.status_items(found[0])

    async def uid_search(self, *criteria: str | Text) -> list[int]:
        """UID SEARCH: `str` criteria are our own tokens (`UID`, `5:*`, `UNSEEN`, `SUBJECT`),
        `Text` ones the user's words (sent quoted, or as a UTF-8 literal with CHARSET UTF-8).
        Ascending UIDs; ESEARCH is used where offered."""
        args: list[WireArg] = [string(c) if isinstance(c, Text) else atom(c) for c in criteria]
        if any(isinstance(a, Literal) for a in args):
            args[:0] = [b"CHARSET", b"UTF-8"]
        if "ESEARCH" in self.capabilities:
            answer = await self._run("UID SEARCH", b"RETURN (ALL)", *args)
            found = [n for d in answer.data("ESEARCH") for n in responses.esearch_numbers(d)]
        else:
            answer = await self._run("UID SEARCH", *args)
            found = [n for d in answer.data("SEARCH") for n in responses.search_numbers(d)]
        return sorted(set(found))

    async def uid_fetch(
        self, uids: Iterable[int] | str, items: Sequence[str], *, changed_since: int | None = None
    ) -> dict[int, Fetched]:
        """UID FETCH `items` (`UID FLAGS ENVELOPE BODYSTRUCTURE BODY.PEEK[1]`, ...) of `uids`
        (UIDs, or a set we spell such as `"5:*"`), by UID."""
        args: list[WireArg] = [_uids(uids), b"(" + b" ".join(map(atom, items)) + b")"]
        if changed_since is not None:
            args.append(b"(CHANGEDSINCE %d)" % changed_since)
        answer = await self._run("UID FETCH", *args)
        found: dict[int, Fetched] = {}
        for data in answer.data("FETCH"):
            item = responses.fetched(data)
            if item.uid is not None:  # FETCH without UID: unsolicited flag news
                found[item.uid] = item
        return found

    async def uid_store(
        self, uids: Iterable[int], flags: Sequence[str], *, mode: str = "+", silent: bool = True
    ) -> None:
        """UID STORE: mode "+" adds the flags, "-" removes them, "" replaces them."""
        if mode not in ("+", "-", ""):
            raise ValueError("mode must be '+', '-' or ''")
        what = f"{mode}FLAGS{'.SILENT' if silent else ''}"
        flag_list = b"(" + b" ".join(map(atom, flags)) + b")"
        await self._run("UID STORE", _uids(uids), atom(what), flag_list)

    async def uid_move(self, uids: Iterable[int], target: str) -> Copied | None:
        """UID MOVE (RFC 6851); where MOVE is missing, UID COPY + STORE \\Deleted + UID
        EXPUNGE of exactly these UIDs (needs UIDPLUS: a plain EXPUNGE would also remove
        other mail marked \\Deleted). The COPYUID, when the server sends one."""
        wanted = list(uids)
        if "MOVE" in self.capabilities:
            return _copied(await self._run("UID MOVE", _uids(wanted), mailbox(target)))
        if "UIDPLUS" not in self.capabilities:
            raise ImapCapabilityError("neither MOVE nor UIDPLUS: cannot move only these mails")
        copied = _copied(await self._run("UID COPY", _uids(wanted), mailbox(target)))
        await self.uid_store(wanted, ["\\Deleted"])
        await self.uid_expunge(wanted)
        return copied

    async def uid_expunge(self, uids: Iterable[int]) -> None:
        """UID EXPUNGE (RFC 4315): of the selected mailbox's mail marked \\Deleted, removes
        only these UIDs. `ImapCapabilityError` without UIDPLUS: a plain EXPUNGE would also
        remove other mail marked \\Deleted (another client's, the owner's)."""
        if "UIDPLUS" not in self.capabilities:
            raise ImapCapabilityError("no UIDPLUS: cannot expunge only these mails")
        await self._run("UID EXPUNGE", _uids(uids))

    async def append(
        self,
        target: str,
        raw: bytes,
        *,
        flags: Sequence[str] = (),
        internaldate: dt.datetime | None = None,
    ) -> Copied | None:
        """APPEND `raw` (a whole RFC 5322 message) to `target`; its APPENDUID when offered."""
        args: list[WireArg] = [mailbox(target)]
        if flags:
            args.append(b"(" + b" ".join(map(atom, flags)) + b")")
        if internaldate is not None:
            args.append(b'"' + _internaldate(internaldate) + b'"')
        args.append(Literal(raw))
        return _copied(await self._run("APPEND", *args))


def _uids(uids: Iterable[int] | str) -> bytes:
    return atom(uids) if isinstance(uids, str) else uid_set(uids)


def _copied(answer: Answer) -> Copied | None:
    if (args := answer.code("APPENDUID")) is not None:
        if len(args) != 2:
            raise ImapProtocolError("APPENDUID without UIDVALIDITY and UID")
        uids = responses.sequence_set(str(args[1]))
        return Copied(as_int(args[0], "APPENDUID"), (), tuple(uids))
    if (args := answer.code("COPYUID")) is not None:
        validity, sources, dests = responses.copy_uids(args)
        return Copied(validity, tuple(sources), tuple(dests))
    return None


def _internaldate(when: dt.datetime) -> bytes:
    """`05-Dec-2026 07:00:00 +0000` (English month names whatever the locale)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    offset = when.utcoffset() or dt.timedelta()
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    zone = f"{sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"
    text = f"{when.day:02d}-{_MONTHS[when.month - 1]}-{when.year:04d} {when:%H:%M:%S} {zone}"
    return text.encode("ascii")
