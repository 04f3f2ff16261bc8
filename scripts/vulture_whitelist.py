"""Names `vulture` takes for dead code that are not: each is used by something vulture cannot
see. Read by `vulture` only (scripts/test.sh), never run. FastAPI routes (`@router.*`) and
Typer commands (`@*app.command`) are left out by `--ignore-decorators` in scripts/test.sh, not
listed here. Every entry says why it stays; a new entry needs as good a reason."""

# ruff: noqa

# Protocol signatures: the caller passes these, the body needs none of them.
exc_type  # aio.py: `__aexit__`'s arguments (the async context manager protocol)
tb  # aio.py: the same
signum  # cli/serving.py: a signal handler's arguments (`signal.signal`)
frame  # cli/serving.py: the same

# Read by a library, not by our code.
_._srcfile  # logs.py: the logging module's switches (the logging HOWTO's "Optimization")
_.logThreads  # logs.py: the same
_.logProcesses  # logs.py: the same
_.logMultiprocessing  # logs.py: the same
__getattr__  # cli/__init__.py: a module `__getattr__` (PEP 562) serving `messageweave.cli.app`

# Fields of JMAP (RFC 8620, RFC 8621) and Bot API answers: the models hold them as sent.
_.upload_url  # mail/jmap/models.py: JmapSession.uploadUrl
_.old_state  # mail/jmap/models.py: Changes.oldState
_.query_state  # mail/jmap/models.py: EmailQueryResult / EmailPage queryState
_.can_calculate_changes  # mail/jmap/models.py: EmailQueryResult.canCalculateChanges
_.keywords  # mail/jmap/models.py: EmailMeta.keywords
_.not_found  # mail/jmap/models.py: PushSubscriptionLookup.notFound
_.first_name  # chat/telegram/client.py: BotIdentity, the Bot API's getMe answer

# Read only by tests (left for their owners: not part of issue #24's dead-code list).
_.session_url  # mail/jmap/client.py: tests check the URL a client was built with
_.digests  # mail/reconcile.py: a pass's digest entries, in its result; only tests read it

# The IMAP client's API (mail/imap/, issue #33) that src does not call (every other method is
# now called by the source, the catch-up, the watch or the IDLE holder).
_.enable  # mail/imap/client.py: ImapClient.enable (CONDSTORE / QRESYNC); no caller and no test yet: the catch-up reads UIDs only
_.noop  # mail/imap/client.py: ImapClient.noop; no caller and no test yet: the IDLE holder re-issues IDLE instead
_.special_use  # mail/imap/mailbox.py: MailboxCommands.special_use; only tests call it (the source and the replies read the LIST's attributes once for every role)
_.content_id  # mail/imap/responses.py: BodyPart.content_id, BODYSTRUCTURE's body-fld-id kept as sent; nothing reads it yet (inline images)

# A trace step's fields, read by `Step.json()` (`dataclasses.fields`) and `Step.text()` (the
# kind's template), not by name.
_.new_entry_id  # pipeline/trace_steps.py: Replayed, in the JSON and the CLI's line
_.deliveries  # pipeline/trace_steps.py: Queued, in the JSON
