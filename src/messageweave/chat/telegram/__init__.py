"""Outbound Telegram: plain-text sends split to Telegram's limit, failures sorted into classes.

`TelegramClient` calls the Bot API (at `{api_base_url}/bot{token}/{method}`, so a local Bot API
server or the test emulator works) through one method, `TelegramClient.call`, on httpx: every
Bot API method the service uses goes down that path and through its one map of failures. It
does not retry: every failure surfaces as a `TelegramSendError` whose `failure_class` tells the
pipeline whether to back off and retry (`transient`, `rate_limit`) or give up (everything else),
and whose `maybe_sent` tells it whether the message may have been delivered all the same.

What a call did is read from the wire (`transport`): an `ok: true` answer is a delivery whatever
its `result` holds, and a failure is `maybe_sent` exactly when the request was written and no
readable answer came back.

The bot token is a credential. It never appears in our exceptions or reprs, and the loggers that
would print it get a filter that redacts it (`redaction`).

Where things are: `client` (`call` and the methods on it), `errors` (`TelegramSendError`,
`classify`), `split` (`split_text`), `transport` (`Exchange`, reading an answer), `redaction`.
Import from here, not from the submodules.
"""

from messageweave.chat.telegram.client import (
    DEFAULT_API_BASE_URL,
    DEFAULT_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    BotIdentity,
    TelegramClient,
)
from messageweave.chat.telegram.errors import FailureClass, TelegramSendError, classify
from messageweave.chat.telegram.split import MAX_MESSAGE_UTF16, split_text, utf16_len
from messageweave.chat.telegram.transport import PLAIN, UNKNOWN_MESSAGE_ID, Keyboard, SendOptions

__all__ = [
    "DEFAULT_API_BASE_URL",
    "DEFAULT_TIMEOUT_S",
    "MAX_MESSAGE_UTF16",
    "PLAIN",
    "PROBE_TIMEOUT_S",
    "UNKNOWN_MESSAGE_ID",
    "BotIdentity",
    "FailureClass",
    "Keyboard",
    "SendOptions",
    "TelegramClient",
    "TelegramSendError",
    "classify",
    "split_text",
    "utf16_len",
]
