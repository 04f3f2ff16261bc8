"""Push subscriptions (RFC 8620 §7.2) on top of `call()`. They belong to the session, not to an
account: the calls carry no accountId and declare only the core capability."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from messageweave.mail.jmap.calls import CORE, MethodCaller, created_item
from messageweave.mail.jmap.errors import JmapError, JmapProtocolError, JmapSetError
from messageweave.mail.jmap.models import PushSubscription, PushSubscriptionLookup
from messageweave.mail.jmap.parse import dicts, opt_str, strs


class PushMethods(MethodCaller):
    """The PushSubscription methods of `JmapClient`."""

    async def push_subscription_create(
        self,
        device_client_id: str,
        url: str,
        types: Sequence[str] | None = None,
        *,
        expires: str | None = None,
        keys: Mapping[str, str] | None = None,
    ) -> PushSubscription:
        """PushSubscription/set create. Session-level: no accountId, only the core capability."""
        sub: dict[str, Any] = {"deviceClientId": device_client_id, "url": url}
        if types is not None:
            sub["types"] = list(types)
        if expires is not None:
            sub["expires"] = expires
        if keys is not None:
            sub["keys"] = dict(keys)
        res = await self._push_set({"create": {"sub": sub}})
        item = created_item(res, "sub")
        if item is not None and isinstance(item.get("id"), str):
            expiry = item.get("expires", expires)
            return PushSubscription(
                id=item["id"], expires=expiry if isinstance(expiry, str) else None
            )
        raise self._set_failure(res, "notCreated", "sub", "create")

    async def push_subscription_verify(self, subscription_id: str, verification_code: str) -> None:
        """PushSubscription/set update with the code the server POSTed (PushVerification)."""
        res = await self._push_set(
            {"update": {subscription_id: {"verificationCode": verification_code}}}
        )
        updated = res.get("updated")
        if not (isinstance(updated, dict) and subscription_id in updated):
            raise self._set_failure(res, "notUpdated", subscription_id, "update")

    async def push_subscription_get(self, ids: Sequence[str]) -> PushSubscriptionLookup:
        """PushSubscription/get of `ids` (RFC 8620 §7.2.1: no accountId, no state; the server
        never returns `url` or `keys`). Ids the server does not know come back in `not_found`."""
        res = await self._call_one(
            "PushSubscription/get", {"ids": list(ids), "properties": ["id", "expires"]},
            using=(CORE,),
        )
        found: dict[str, PushSubscription] = {}
        for item in dicts(res.get("list")):
            sub_id = item.get("id")
            if isinstance(sub_id, str):
                found[sub_id] = PushSubscription(
                    id=sub_id, expires=opt_str(item.get("expires")),
                    expires_known="expires" in item,
                )
        return PushSubscriptionLookup(found=found, not_found=strs(res.get("notFound")))

    async def push_subscription_set_expires(self, subscription_id: str, expires: str) -> str:
        """PushSubscription/set update of `expires` (RFC 8620 §7.2.2). The server may choose
        another time and then returns it in `updated`; the answer is the time now in force."""
        res = await self._push_set({"update": {subscription_id: {"expires": expires}}})
        updated = res.get("updated")
        if not (isinstance(updated, dict) and subscription_id in updated):
            raise self._set_failure(res, "notUpdated", subscription_id, "update")
        changed = updated[subscription_id]
        if isinstance(changed, dict) and isinstance(changed.get("expires"), str):
            return str(changed["expires"])
        return expires

    async def push_subscription_destroy(self, subscription_id: str) -> None:
        res = await self._push_set({"destroy": [subscription_id]})
        destroyed = res.get("destroyed")
        if not (isinstance(destroyed, list) and subscription_id in destroyed):
            raise self._set_failure(res, "notDestroyed", subscription_id, "destroy")

    async def _push_set(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call_one("PushSubscription/set", arguments, using=(CORE,))

    @staticmethod
    def _set_failure(res: Mapping[str, Any], key: str, object_id: str, action: str) -> JmapError:
        failures = res.get(key)
        if isinstance(failures, dict) and isinstance(failures.get(object_id), dict):
            return JmapSetError("PushSubscription/set", object_id, failures[object_id], action)
        return JmapProtocolError(f"PushSubscription/set did not {action} {object_id!r}")
