"""The inline buttons under a notification (issue #16): Summary, Mark read, Archive.

`notification_keyboard` is what every notification is sent with.
"""

from __future__ import annotations

from messageweave.chat.telegram import Keyboard
from messageweave.config.model import BusinessConfig


def notification_keyboard(cfg: BusinessConfig, email_id: str) -> Keyboard | None:
    """The keyboard under the notification of `email_id` (None: no buttons)."""
    del cfg, email_id
    return None
