"""A JMAP request and its answer (RFC 8620 §3): method calls, back-references, the method
responses, and `MethodCaller`, the part of the client a family of methods builds on."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from messageweave.mail.jmap.errors import (
    JmapError,
    JmapMethodError,
    JmapProtocolError,
    JmapSetError,
)
from messageweave.mail.jmap.models import JmapSession

CORE = "urn:ietf:params:jmap:core"
MAIL = "urn:ietf:params:jmap:mail"

MethodCall = tuple[str, Mapping[str, Any], str]
"""One invocation to send: (method name, arguments, call id)."""


@dataclass(frozen=True)
class Invocation:
    """One method response: `[name, arguments, callId]`; name "error" for a method error."""

    name: str
    arguments: dict[str, Any]
    call_id: str

    @property
    def is_error(self) -> bool:
        return self.name == "error"


class MethodResponses(Sequence[Invocation]):
    """The `methodResponses` of one request, in order, plus the response `sessionState`."""

    def __init__(
        self,
        invocations: Sequence[Invocation],
        session_state: str | None,
        calls: Sequence[MethodCall] = (),
    ) -> None:
        self._items = list(invocations)
        self.session_state = session_state
        self._methods = {call_id: name for name, _args, call_id in calls}

    @overload
    def __getitem__(self, index: int) -> Invocation: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Invocation]: ...
    def __getitem__(self, index: int | slice) -> Invocation | Sequence[Invocation]:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Invocation]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"MethodResponses({self._items!r}, session_state={self.session_state!r})"

    def error(self, call_id: str) -> JmapMethodError | None:
        """The method error answered for `call_id`, if any."""
        for inv in self._items:
            if inv.call_id == call_id and inv.is_error:
                return JmapMethodError.create(
                    inv.arguments, method=self._methods.get(call_id), call_id=call_id
                )
        return None

    def result(self, call_id: str, name: str | None = None) -> dict[str, Any]:
        """The arguments answered for `call_id` (and `name`, when one call id has several).

        Raises the typed `JmapMethodError` if the server answered an error for it, and
        `JmapProtocolError` if there is no response for it at all.
        """
        err = self.error(call_id)
        if err is not None:
            raise err
        for inv in self._items:
            if inv.call_id == call_id and (name is None or inv.name == name):
                return inv.arguments
        raise JmapProtocolError(f"no {name or 'method'} response for call id {call_id!r}")


def created_item(res: Mapping[str, Any], object_id: str) -> dict[str, Any] | None:
    """The object a /set answer says it created under the creation id `object_id` (RFC 8620
    §5.3 `created`: the server-set properties, `id` among them), None when it did not."""
    created = res.get("created")
    item = created.get(object_id) if isinstance(created, dict) else None
    return item if isinstance(item, dict) else None


def set_failure(method: str, res: Mapping[str, Any], key: str, object_id: str,
                action: str) -> JmapError:
    """What a /set answer says about one object it did not `action` (RFC 8620 §5.3): the
    `JmapSetError` from `key` (`notCreated`, `notUpdated`, `notDestroyed`), else a protocol
    error (the object is in neither list)."""
    failures = res.get(key)
    if isinstance(failures, dict) and isinstance(failures.get(object_id), dict):
        return JmapSetError(method, object_id, failures[object_id], action)
    return JmapProtocolError(f"{method} did not {action} {object_id!r}")


def result_ref(call_id: str, name: str, path: str) -> dict[str, str]:
    """A result reference (RFC 8620 §3.7), used as the value of a `#argument`."""
    return {"resultOf": call_id, "name": name, "path": path}


class MethodCaller(abc.ABC):
    """What a family of methods (`MailMethods`, `PushMethods`) needs of the client: the session,
    the selected account and `call()`. `JmapClient` provides them."""

    @abc.abstractmethod
    async def get_session(self, *, refresh: bool = False) -> JmapSession:
        """The session resource, fetched on first use."""

    @property
    @abc.abstractmethod
    def account_id(self) -> str:
        """The selected account id (after `get_session()`)."""

    @abc.abstractmethod
    async def call(
        self, method_calls: Sequence[MethodCall], *, using: Sequence[str] = (CORE, MAIL)
    ) -> MethodResponses:
        """Send one JMAP request; method errors are returned in place (see `result()`)."""

    async def _call_one(
        self, name: str, arguments: Mapping[str, Any], *, using: Sequence[str] = (CORE, MAIL)
    ) -> dict[str, Any]:
        responses = await self.call([(name, arguments, "0")], using=using)
        return responses.result("0", name)

    async def _account(self) -> str:
        await self.get_session()
        return self.account_id
