"""Who may read mail and send replies from the chat (issue #32).

Notifications may go to any allowlisted chat (a family or team group, `notify_rules`), but the
actions that read the mailbox or send from it (`/search`, `/read`, `/summary`, `/reply` and a
Telegram reply, the Read, attachment and Summary buttons, a draft's Send and Cancel) are taken
only from an owner: a Telegram user listed in `owner_user_ids`; with none listed, the user of a
private `telegram_chat_id` (a private chat's id is its user's id). With none listed and a group
as `telegram_chat_id` there is no one to tell apart: every member may, as before the rule, and
the admin page and `diagnose` warn of it (`unguarded_group`).
"""

from __future__ import annotations

from collections.abc import Mapping

from messageweave.config.model import BusinessConfig


def owners(cfg: BusinessConfig) -> frozenset[int] | None:
    """The owners' user ids; None when anyone in a configured chat may act."""
    if cfg.owner_user_ids:
        return frozenset(cfg.owner_user_ids)
    if cfg.telegram_chat_id > 0:  # a private chat: its id is its user's
        return frozenset({cfg.telegram_chat_id})
    return None


def unguarded_group(cfg: BusinessConfig) -> bool:
    """A group as the notification chat and no owner listed: every member may read and send."""
    return owners(cfg) is None


def may_act(cfg: BusinessConfig, user_id: int | None) -> bool:
    allowed = owners(cfg)
    return allowed is None or user_id in allowed


def sender_of(fields: Mapping[str, str]) -> int | None:
    """The user id of who wrote or pressed (`from_id`, `ingress.parse_update`). An entry queued
    before it was kept, from a private chat, is that chat's user's; else None (no one)."""
    for name in ("from_id", "chat_id"):
        try:
            value = int(fields.get(name, ""))
        except ValueError:
            continue
        if name == "from_id" or value > 0:
            return value
    return None
