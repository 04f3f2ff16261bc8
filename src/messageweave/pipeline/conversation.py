"""What the bot answers to a message from its owner.

The worker calls `reply_to_update` for each `stalwart:telegram` entry and sends the replies
through the same sender, rate governor and ledger as notifications, in the configured
`bot_language` (the owner's phrases are understood in both languages). Unknown text, and a
`/summary` for an email id the mailbox does not have, get no reply (reference §7: bot
conversation). `/start` is answered with a greeting that says whether the writer is the owner
(issue #34). A mailbox that cannot be reached raises `MailError` (or `NotConfigured`) so
the entry is retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import InitVar, dataclass, field

from messageweave.chat import consent, intents, texts
from messageweave.chat.telegram import PLAIN, SendOptions
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.source import MailSource
from messageweave.pipeline import buttons, owners, reading, reply, search, summarize
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis
from messageweave.store.streams import Entry

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 256


# What reads the mailbox or sends from it: only an owner's (`pipeline.owners`, issue #32).
_OWNERS_ONLY = (intents.Read, intents.ReplyMail, intents.Search, intents.Summary)


@dataclass(frozen=True)
class IncomingMessage:
    """The only parts of a Telegram update the conversation needs."""

    chat_id: int
    text: str
    entry_id: str = ""  # the stream entry: a retried reply finds the draft it made
    # A Telegram reply (issue #25): the signed data of the replied-to message's first button
    # (`ingress.parse_update`), which names the mail a notification was about.
    reply_to: str | None = None
    # Who wrote (`owners.sender_of`): reading and sending are an owner's. None: a private
    # chat's user, else no one.
    user_id: int | None = None
    # What the text asks for (`intents.parse_intent`): the update's one parse, carried along
    # to every decision about it. `parsed` is that parse when the caller has it (`ChatUpdate`).
    intent: intents.Intent = field(init=False, compare=False, repr=False)
    parsed: InitVar[intents.Intent | None] = None

    def __post_init__(self, parsed: intents.Intent | None) -> None:
        object.__setattr__(self, "intent",
                           parsed if parsed is not None else intents.parse_intent(self.text))

    @classmethod
    def of(cls, chat_id: int, text: str, update: ChatUpdate) -> IncomingMessage:
        """The message of a `stalwart:telegram` entry (`ingress.parse_update`'s fields), with
        the intent the update carries."""
        fields = update.fields
        return cls(chat_id, text, update.id, fields.get("reply_to_data"),
                   owners.sender_of(fields), update.intent)


@dataclass(frozen=True)
class ChatUpdate(Entry):
    """A `stalwart:telegram` entry and the intent of its text, parsed once (`chat_update`):
    the worker's replyless pass (`pipeline.replyless`) parses it to know whether it needs a
    reply and hands the entry on as this, so `events` and the conversation read the same
    parse rather than making their own."""

    intent: intents.Intent | None = field(default=None, compare=False, repr=False)  # no text

    @property
    def needs_no_reply(self) -> bool:
        """The bot answers it with nothing, known without any I/O: no text, or no command or
        phrase (`intents.Unknown`), and not a Telegram reply to one of our messages."""
        return (self.fields.get("reply_to_data") is None
                and (self.intent is None or isinstance(self.intent, intents.Unknown)))


def chat_update(entry: Entry) -> ChatUpdate:
    """`entry` with its text's intent: the parse it carries already, else the one parse."""
    if isinstance(entry, ChatUpdate):
        return entry
    text = entry.fields.get("text")
    return ChatUpdate(entry.stream, entry.id, entry.fields,
                      None if text is None else intents.parse_intent(text))


@dataclass(frozen=True)
class BotMessage:
    """A message the bot sends to a chat in answer to an update (not an e-mail reply:
    `pipeline.reply`)."""

    chat_id: int
    text: str
    options: SendOptions = PLAIN  # a Read's last message carries the attachment buttons


@dataclass
class ConversationContext:
    redis: Redis
    keys: AccountKeys  # the chat's account's (issue #35)
    config: BusinessConfig
    outbound: OutboundConfig
    # Connects on demand; raises messageweave.mail.errors.MailError when the mailbox is
    # unreachable.
    mail: Callable[[], Awaitable[MailSource]]
    now: Callable[[], float] = field(default=time.time)


async def reply_to_update(message: IncomingMessage, ctx: ConversationContext) -> list[BotMessage]:
    """The replies to one message; an empty list when the bot should stay silent."""
    if message.reply_to is None and isinstance(message.intent, intents.Unknown):
        return []
    intent = _replying(message, ctx.config) or message.intent
    sender = message.user_id if message.user_id is not None else owners.sender_of(
        {"chat_id": str(message.chat_id)})
    if isinstance(intent, _OWNERS_ONLY) and not owners.may_act(ctx.config, sender):
        log.info("a mailbox action from a user who is not an owner was refused")
        return [BotMessage(message.chat_id, texts.table(ctx.config.bot_language)["not_owner"])]
    if isinstance(intent, intents.Start):
        return _greeting(message.chat_id, sender, ctx.config)
    if isinstance(intent, intents.Read):
        return await _read(intent.email_id, message.chat_id, ctx)
    if isinstance(intent, intents.ReplyMail):
        return await _reply(intent, message, ctx)
    text = await _answer(intent, message, ctx)
    return [] if text is None else [BotMessage(message.chat_id, text)]


async def _answer(intent: intents.Intent, message: IncomingMessage,
                  ctx: ConversationContext) -> str | None:
    language = ctx.config.bot_language
    match intent:
        case intents.Help():
            return texts.table(language)["help"]
        case intents.GrantConsent():
            return await consent.grant(ctx.redis, ctx.keys, message.chat_id, intent, ctx.now(),
                                       language, ctx.config.timezone)
        case intents.RevokeConsent():
            return await consent.revoke(ctx.redis, ctx.keys, message.chat_id, language)
        case intents.MissingEmailId():
            return texts.table(language)["missing_email_id"]
        case intents.Search(query=query):
            return await _search(query, ctx)
        case intents.Summary(email_id=email_id):
            return await _summary(email_id, message.chat_id, ctx)
    return None


def _greeting(chat_id: int, sender: int | None, cfg: BusinessConfig) -> list[BotMessage]:
    """`/start` (issue #34): what the bot does, whether the writer is the owner, the next
    step. A chat outside the configured ones gets nothing: the ingress refuses it before the
    queue (reference §7: bot conversation), and this answers nothing either should one come."""
    if not reading.allowed(cfg, chat_id):
        log.info("a /start from a chat outside the allowlist got no answer")
        return []
    key = "start_owner" if owners.may_act(cfg, sender) else "start_member"
    return [BotMessage(chat_id, texts.table(cfg.bot_language)[key])]


def _replying(message: IncomingMessage, cfg: BusinessConfig) -> intents.ReplyMail | None:
    """A Telegram reply to one of our messages about a mail is an answer to that mail, unless
    it is a command (`/summary …` in reply to a notification is a command)."""
    email_id = buttons.replied_mail(cfg, message.reply_to)
    if email_id is None or message.text.lstrip().startswith("/"):
        return None
    return intents.ReplyMail(email_id, message.text.strip())


async def _reply(intent: intents.ReplyMail, message: IncomingMessage,
                 ctx: ConversationContext) -> list[BotMessage]:
    """A draft reply and its preview (`pipeline.reply`); silent for a chat outside the
    configured ones."""
    if not reading.allowed(ctx.config, message.chat_id):
        log.info("a reply from a chat outside the allowlist was refused")
        return []
    request = reply.ReplyRequest(intent.email_id, intent.text, message.chat_id,
                                 message.entry_id)
    shown = await reply.draft_reply(await ctx.mail(), ctx.redis, ctx.keys, ctx.config, request,
                                    now=ctx.now())
    return [BotMessage(message.chat_id, shown.text, SendOptions(keyboard=shown.keyboard))]


async def _read(email_id: str, chat_id: int, ctx: ConversationContext) -> list[BotMessage]:
    """`/read <email_id>` (issue #25): refused with `read_in_chat` off; silent for a chat
    outside the configured ones and for a mail the mailbox does not have (as `/summary`)."""
    if not ctx.config.read_in_chat:
        return [BotMessage(chat_id, texts.table(ctx.config.bot_language)["read_off"])]
    if not reading.allowed(ctx.config, chat_id):
        log.info("a read from a chat outside the allowlist was refused")
        return []
    found = await buttons.read_replies(await ctx.mail(), ctx.config, email_id, chat_id, None)
    if found is None:
        log.info("read requested for an email the mailbox does not have")
        return []
    return [BotMessage(r.chat_id, r.text, r.options) for r in found]


async def _search(query: str, ctx: ConversationContext) -> str:
    language = ctx.config.bot_language
    if not query:
        return texts.table(language)["search_empty_query"]
    if len(query) > MAX_QUERY_CHARS:
        return texts.table(language)["search_query_too_long"].format(limit=MAX_QUERY_CHARS)
    source = await ctx.mail()
    result = await source.search(query, limit=search.MAX_HITS)
    return search.search_reply(query, result, language)


async def _summary(email_id: str, chat_id: int, ctx: ConversationContext) -> str | None:
    mail = await summarize.fetch_mail(await ctx.mail(), email_id)
    if mail is None:
        log.info("summary requested for an email the mailbox does not have")
        return None
    return await summarize.summary_text(
        mail, chat_id, redis=ctx.redis, names=ctx.keys, config=ctx.config, outbound=ctx.outbound,
        now=ctx.now(),
    )
