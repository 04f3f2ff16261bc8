"""Every Lua script runs in one Redis Cluster slot (issue #35, reference §1.0): the check
`Script` makes on each call, and every module-level `Script` given the keys its callers build."""

from collections.abc import Callable, Mapping

import pytest
from redis.crc import key_slot

from messageweave.pipeline import governor
from messageweave.store import keys, waiting
from messageweave.store.account_keys import AccountKeys
from messageweave.store.scripts import CrossSlot, Script, Value
from tests.unit.test_reference_doc import DOC
from tests.unit.test_scripts import SCRIPTS

J, T = keys.STREAM_JMAP, keys.STREAM_TELEGRAM
E = "1700000000000-0"


def _entry(stream: str, *names: str) -> dict[str, Value]:
    """An entry's ledger keys as `pipeline.ledger` names them."""
    built: dict[str, Value] = {
        "committed": keys.delivery_committed(stream, E),
        "inflight": keys.delivery_inflight(stream, E),
        "intent": keys.delivery_intent(stream, E), "retry_due": keys.retry_due(stream),
        "stream": stream, "retry_counter": keys.retry_counter(stream, E),
        "retry_window": keys.retry_window(stream, E), "dlq": keys.dlq(stream),
        "waiting": waiting.waiting_keys(stream)}
    return {name: built[name] for name in names}


def _push(*names: str) -> dict[str, Value]:
    built = {"latest": keys.PUSH_SUBSCRIPTION_ID, "status": keys.push_subscription_status("s"),
             "new_status": keys.push_subscription_status("s"),
             "old_status": keys.push_subscription_status("o"),
             "old_digest": keys.push_registration("o"), "registration": keys.push_registration("d"),
             "current": keys.PUSH_REGISTRATION_CURRENT, "lifecycle": keys.PUSH_LIFECYCLE,
             "digest": keys.push_subscription("s"), "due": keys.PUSH_CATCHUP_DUE,
             "deferred": keys.PUSH_CATCHUP_DEFERRED, "catchup": keys.reconcile_catchup("u1"),
             "orphan": keys.push_orphan("s")}
    return {name: built[name] for name in names}


_ACCOUNTS = (keys.AccountKeys("family"), keys.AccountKeys("work-2"))
_LEDGER = ("committed", "inflight", "intent", "retry_counter", "retry_window")
# For each script (module.NAME), its KEYS as its callers build them, both streams where a
# script serves both. The names of a script not listed are asserted below.
BUILT: dict[str, Callable[[], list[Mapping[str, Value]]]] = {
    "messageweave.pipeline.ledger.BEGIN": lambda: [
        _entry(s, "committed", "inflight", "intent", "retry_due", "stream") for s in (J, T)],
    "messageweave.pipeline.ledger.MARK": lambda: [_entry(s, "inflight", "intent") for s in (J, T)],
    "messageweave.pipeline.ledger.RESOLVE": lambda: [
        _entry(s, "inflight", "intent") for s in (J, T)],
    "messageweave.pipeline.ledger.RENEW": lambda: [_entry(s, "inflight") for s in (J, T)],
    "messageweave.pipeline.ledger.RELEASE": lambda: [
        _entry(s, "inflight", "retry_due") for s in (J, T)],
    "messageweave.pipeline.ledger.COMMIT": lambda: [_entry(
        s, "committed", "inflight", "intent", "retry_counter", "retry_due", "stream",
        "retry_window", "waiting") for s in (J, T)],
    "messageweave.pipeline.ledger.RETRY_OR_DLQ": lambda: [_entry(
        s, "retry_counter", "stream", "dlq", "inflight", "retry_due", "intent", "committed",
        "retry_window", "waiting") for s in (J, T)],
    "messageweave.pipeline.replyless.FINISH": lambda: [{
        "stream": T, "retry_due": keys.retry_due(T),
        "entries": [str(v) for v in _entry(T, *_LEDGER).values()]}],
    "messageweave.pipeline.governor.ACQUIRE": lambda: [
        governor.lanes_of("123", c).named for c in (42, -1001)],
    "messageweave.mail.imap.catchup.SAVE_IMAP_CURSOR": lambda: [{
        "lock": keys.RECONCILE_LOCK, "cursors": keys.IMAP_CURSOR,
        "watermark": keys.IMAP_WATERMARK}],
    "messageweave.store.streams.ENQUEUE_IF_ENABLED": lambda: [{
        "stream": T, "enabled": keys.ENABLED, "claims": [keys.dedup_tg(1), keys.dedup_tg(2)]}],
    "messageweave.store.streams.REPLAY": lambda: [_entry(s, "dlq", "stream") for s in (J, T)],
    "messageweave.store.receivers.SAVE_OFFSET": lambda: [{
        "lock": keys.TELEGRAM_POLL_LOCK, "offset": keys.telegram_poll_offset("123")}],
    "messageweave.store.mail_entries.CLAIM_DEDUP_AND_ENQUEUE_MANY": lambda: [{
        "stream": J, "claims": [keys.dedup_jmap("u1", "M1"), keys.dedup_jmap("u1", "M2")]}],
    "messageweave.store.mail_entries.CLAIM_DEDUP_AND_ENQUEUE_DIGEST": lambda: [{
        "stream": J, "claims": [keys.dedup_jmap("u1", "M1"), keys.dedup_jmap("u1", "M2")]}],
    "messageweave.store.mail_entries.CHECK_AND_CLAIM": lambda: [{
        "stream": J, "mails": [keys.dedup_jmap("u1", "M1"), keys.audit_healed("u1", "M1")]}],
    "messageweave.store.reconcile_state.SAVE_CURSOR": lambda: [{
        "lock": keys.RECONCILE_LOCK, "cursor": keys.RECONCILE_CURSOR,
        "watermark": keys.RECONCILE_WATERMARK}],
    "messageweave.store.throttle.RECORD_FAILURE": lambda: [{
        "failures": keys.throttle_failures("192.0.2.1"), "lock": keys.throttle_lock("192.0.2.1"),
        "strikes": keys.throttle_strikes("192.0.2.1"), "clients": keys.THROTTLE_CLIENTS}],
    "messageweave.store.config_store.WRITE_BUSINESS_CONFIG": lambda: [{
        "config": keys.BUSINESS_CONFIG, "revision": keys.BUSINESS_CONFIG_REVISION}],
    "messageweave.store.config_store.CREATE_BUSINESS_CONFIG": lambda: [{
        "config": keys.BUSINESS_CONFIG, "revision": keys.BUSINESS_CONFIG_REVISION}],
    "messageweave.store.push.RECORD_REGISTRATION": lambda: [
        _push("latest", "status", "registration", "current", "lifecycle")],
    "messageweave.store.push.REPLACE_SUBSCRIPTION": lambda: [
        _push("current", "latest", "new_status", "old_status", "old_digest", "registration",
              "lifecycle")],
    "messageweave.store.push.UPDATE_LIFECYCLE": lambda: [_push("current", "lifecycle")],
    "messageweave.store.push.RECORD_VERIFIED": lambda: [_push("digest", "status", "lifecycle")],
    "messageweave.store.push.FORGET_REGISTRATION": lambda: [
        _push("status", "digest", "registration", "current", "latest", "lifecycle")],
    "messageweave.store.push.CLAIM_PUSH_CATCHUP": lambda: [_push("due", "deferred", "catchup")],
    "messageweave.store.push.RELEASE_DEFERRED_CATCHUP": lambda: [
        _push("due", "deferred", "catchup")],
    "messageweave.store.refused.RECORD_REFUSAL": lambda: [{
        "chats": keys.REFUSED_CHATS, "info": keys.REFUSED_CHATS_INFO}],
    "messageweave.store.accounts.CREATE_ACCOUNT": lambda: [{
        "config": a.config, "revision": a.revision, "enabled": a.enabled,
        "deleted": a.deleted} for a in _ACCOUNTS],
    "messageweave.store.accounts.DELETE_ACCOUNT": lambda: [{
        "config": a.config, "deleted": a.deleted} for a in _ACCOUNTS],
    "messageweave.store.accounts.WRITE_ACCOUNT": lambda: [{
        "config": a.config, "revision": a.revision} for a in _ACCOUNTS],
    "messageweave.store.accounts.SET_IF_ACCOUNT": lambda: [
        {"config": a.config, "target": target}
        for a in _ACCOUNTS for target in (a.enabled, a.owner_key, a.owner_session("d"))],
    "messageweave.store.gaps.RECORD_BASELINE": lambda: [{
        "lock": keys.RECONCILE_LOCK, "baseline": keys.RECONCILE_BASELINE}],
}


def _script(module: str, name: str) -> Script:
    script = getattr(__import__(module, fromlist=[name]), name)
    assert isinstance(script, Script)
    return script


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, n, _ in SCRIPTS],
                         ids=[f"{m}.{n}" for m, n, _ in SCRIPTS])
def test_every_script_is_given_keys_of_one_slot(module: str, name: str) -> None:
    """Catches a Lua script whose keys, as its callers name them, hash to more than one cluster
    slot: a Redis Cluster refuses it (CROSSSLOT), so the mail or the reply behind it is never
    delivered. A script with one key (or one variadic list of one kind) is one slot by itself."""
    script = _script(module, name)
    build = BUILT.get(f"{module}.{name}")
    if build is None:
        assert len(script.keys) == 1 and not script.keys[0].endswith("*"), (
            f"{module}.{name}: give this test the keys its callers build")
        return
    for given in build():
        flat = [k for v in given.values() for k in ([v] if isinstance(v, str) else v)]
        assert set(given) == {n.removesuffix("*") for n in script.keys}
        assert len({key_slot(str(k).encode()) for k in flat}) == 1, flat


async def test_a_call_with_keys_of_two_slots_raises_before_redis_is_asked() -> None:
    """Catches a script call that would reach Redis with keys of two slots (a single Redis
    runs it; a cluster refuses it, and then only in production): it raises `CrossSlot` at
    once, with no Redis given."""
    script = Script("return 1", keys=("a", "b"))
    with pytest.raises(CrossSlot):
        await script(None, keys={"a": "config:business",  # type: ignore[arg-type]
                                 "b": "config:business:revision"})
    with pytest.raises(CrossSlot):
        script.queue(None, keys={"a": "a:{one}:x", "b": "a:{two}:x"})  # type: ignore[arg-type]


def _account_templates() -> list[tuple[str, str]]:
    import inspect
    account = AccountKeys("<id>")
    out = []
    for name, member in inspect.getmembers(AccountKeys):
        if name.startswith("_") or name in ("named", "of", "prefix", "account_id"):
            continue
        if isinstance(member, property):
            out.append((name, getattr(account, name)))
        else:
            params = list(inspect.signature(member).parameters)[1:]
            out.append((name, getattr(account, name)(*(f"{{{p}}}" for p in params))))
    return out


@pytest.mark.parametrize(("name", "template"), _account_templates())
def test_every_account_key_carries_the_account_tag_and_is_documented(name: str,
                                                                     template: str) -> None:
    """Catches a per-account key that an account does not own (no `{<id>}` tag: two accounts
    would share it, or its scripts would cross slots) or that reference §1 does not name."""
    assert "{<id>}" in template and template.index("{<id>}") == template.index("{")
    assert template in DOC, f"AccountKeys.{name}: {template} is not in docs/reference.md"
    for fixed in keys.ACCOUNT_NAMES:
        assert f"a:{{<id>}}:{fixed}" in DOC or f"`{fixed}`" in DOC


def test_two_accounts_never_share_a_key() -> None:
    """Catches account keys built without the account: the second account's mail claims and
    cursor would be the first's (a mail of one never notified, or notified to the other)."""
    one, two = AccountKeys("family"), AccountKeys("work")
    assert one.dedup_jmap("u1", "M1") != two.dedup_jmap("u1", "M1")
    assert one.named("state:jmap:since") != two.named("state:jmap:since")
    assert key_slot(one.stream_jmap.encode()) == key_slot(one.dedup_jmap("u", "M").encode())
