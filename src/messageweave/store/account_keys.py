"""The per-account Redis names (issue #35, SPEC G.6; reference §1.0): the part of
`messageweave.store.keys` that belongs to one account, in a module of its own. `keys`
re-exports them and holds the `default` account's (`keys.DEFAULT`); every name is still
reached through `keys`."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ACCOUNT = "default"
_DEFAULT_PREFIX = f"a:{{{DEFAULT_ACCOUNT}}}:"


@dataclass(frozen=True)
class AccountKeys:
    """The per-account names (SPEC G.6): the mailbox's stream and claims, its cursors, locks and
    schedules, push, consent, buttons and reply drafts. Each is `prefix` (`a:{<id>}:`) + the
    contract's name, so every script of one account runs in the account's slot."""

    account_id: str

    @property
    def prefix(self) -> str:
        """What every key of the account starts with: its hash tag."""
        return f"a:{{{self.account_id}}}:"

    def _key(self, name: str) -> str:
        return self.prefix + name

    def consent_ai(self, chat_id: int) -> str:
        return self._key(f"consent:ai:{chat_id}")

    @property
    def stream_jmap(self) -> str:
        return self._key("stalwart:jmap")

    def digest_plan(self, entry_id: str) -> str:
        """A digest entry's plan (issue #16, `pipeline.digest`): which of its mails go into
        which message, and where; ids and chats only. Lives as long as the terminal record."""
        return f"delivery:digest:{self.stream_jmap}:{entry_id}"

    def button_action(self, action: str, email_id: str) -> str:
        return self._key(f"button:{action}:{email_id}")

    def button_part(self, email_id: str, part_id: str) -> str:
        return self._key(f"button:f:{email_id}:{part_id}")

    @property
    def reply_drafts(self) -> str:
        """The account's drafts made from the chat and not sent yet (`store.drafts`)."""
        return self._key("reply:drafts")

    def reply_draft(self, draft_id: str) -> str:
        return self._key(f"reply:draft:{draft_id}")

    def reply_entry(self, entry_id: str) -> str:
        """The draft the `stalwart:telegram` entry made: its retry does not make a second one."""
        return self._key(f"reply:entry:{entry_id}")

    def dedup_jmap(self, account_id: str, email_id: str) -> str:
        return self._key(f"dedup:jmap:{account_id}:{email_id}")

    def ratelimit_push_verify(self, subscription_id: str) -> str:
        return self._key(f"ratelimit:push-verify:{subscription_id}")

    def reconcile_catchup(self, account_id: str) -> str:
        return self._key(f"reconcile:catchup:{account_id}")

    def audit_healed(self, account_id: str, email_id: str) -> str:
        """Set when the auditor re-enqueued this mail (value: the new entry id, EX
        `DEDUP_JMAP_TTL_S`): a mail is re-enqueued by the auditor at most once."""
        return self._key(f"audit:healed:{account_id}:{email_id}")

    def push_register_lock(self, url_digest: str) -> str:
        return self._key(f"lock:push-register:{url_digest}")

    def push_subscription(self, subscription_id: str) -> str:
        return self._key(f"push:subscription:{subscription_id}")

    def push_subscription_status(self, subscription_id: str) -> str:
        return self._key(f"push:subscription:{subscription_id}:status")

    def push_registration(self, url_digest: str) -> str:
        return self._key(f"push:registration:{url_digest}")

    def push_orphan(self, subscription_id: str) -> str:
        return self._key(f"push:orphan:{subscription_id}")

    def of(self, default_name: str) -> str:
        """A per-account name of `keys` (they are `default`'s: `keys.RECONCILE_CURSOR`…) in
        this account."""
        if not default_name.startswith(_DEFAULT_PREFIX):
            raise KeyError(default_name)
        return self.prefix + default_name.removeprefix(_DEFAULT_PREFIX)

    def named(self, name: str) -> str:
        """One of the fixed per-account names of `ACCOUNT_NAMES`, in this account."""
        if name not in ACCOUNT_NAMES:
            raise KeyError(name)
        return self._key(name)

    # --- the account's own configuration (issue #35, `messageweave.store.accounts`) ------
    @property
    def config(self) -> str:
        """The encrypted account wire (`config.accounts`); absent for `default`."""
        return f"{self.prefix}config"

    @property
    def revision(self) -> str:
        return f"{self.prefix}config:revision"

    @property
    def name(self) -> str:
        """`default`'s name (the other accounts' is in their wire)."""
        return f"{self.prefix}name"

    @property
    def enabled(self) -> str:
        return f"{self.prefix}enabled"

    @property
    def owner_key(self) -> str:
        return f"{self.prefix}owner_key"

    def owner_session(self, digest: str) -> str:
        return f"{self.prefix}owner_session:{digest}"

    @property
    def last_notified(self) -> str:
        """When (ms) a notification of the account's mail was last delivered (`ops.sendlog`):
        its status's `last_notified_at`, however busy the other accounts' send log is."""
        return f"{self.prefix}notified:last"

    @property
    def deleted(self) -> str:
        """Set (EX `ACCOUNT_DELETE_WINDOW_S`) by the account's deletion, in the same script as
        its configuration goes: a create of the id is refused while it stands (`CREATE_ACCOUNT`),
        so a late write of the deleted account never lands in a new one."""
        return f"{self.prefix}deleted"

    @property
    def every_key(self) -> str:
        """The SCAN pattern of the keys named after the account (its deletion matches
        `*` + this, so the names derived from its stream too: `store.account_sweep`)."""
        return f"{self.prefix}*"


# The fixed (not patterned) per-account names: the contract's names that `keys`' module-level
# constants hold in the `default` account (`keys.DEFAULT.named`).
ACCOUNT_NAMES = (
    "state:jmap:since", "lock:reconcile", "state:jmap:watermark", "schedule:reconcile",
    "schedule:push-orphan-sweep", "state:jmap:baseline_at", "state:imap:cursor",
    "state:imap:watermark", "schedule:gap-audit", "audit:last", "push:subscription:id",
    "push:registration:current", "push:lifecycle", "push:state-change:last", "push:catchup:due",
    "push:catchup:deferred", "schedule:push-maintenance", "schedule:reconcile-degraded",
    "lock:jmap-eventsource", "push:eventsource:status", "lock:imap-idle",
    "push:imap-idle:status",
)
