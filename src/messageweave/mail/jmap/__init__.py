"""A thin async JMAP client (RFC 8620 core, RFC 8621 mail) on httpx.

Where things are:

- `client`: `JmapClient` — transport, session discovery, account selection, `call()`;
- `mail`, `push`, `reading`, `submission`: its typed methods (Mailbox/Email/SearchSnippet,
  PushSubscription, a mail read whole and its blobs, identities, drafts and their submission);
- `calls`: a request and its answer (`MethodCall`, `MethodResponses`, `result_ref`);
- `models`: what the methods return (with `mail.records`, the source-neutral records they
  share with every mail source); `errors`: what they raise; `parse`: reading the JSON;
- `source`: what makes `JmapClient` a `mail.source.MailSource` (the pipeline's and the chat's
  view of a mailbox).

Errors are typed: `JmapTransportError` (network, timeout, HTTP 5xx/429), `JmapAuthError`
(401/403), `JmapRequestError` (RFC 8620 §3.6.1 problem JSON), `JmapMethodError` and one subclass
per RFC method-level error type (`CannotCalculateChanges`, `InvalidArguments`, ...), and
`JmapSetError` for a refused create/update/destroy. The password never appears in a message or
a repr. `call()` sends any batch of method calls (with back-references, see `result_ref`); the
typed methods build on it.

Import from here (`from messageweave.mail.jmap import JmapClient`), not from the submodules.
"""

from messageweave.mail.jmap.calls import (
    CORE,
    MAIL,
    Invocation,
    MethodCall,
    MethodResponses,
    result_ref,
)
from messageweave.mail.jmap.client import (
    MAX_REDIRECTS,
    WELL_KNOWN,
    JmapClient,
    build_ssl_context,
    session_resource_url,
)
from messageweave.mail.jmap.errors import (
    AccountNotFound,
    AccountNotSupportedByMethod,
    AccountReadOnly,
    AnchorNotFound,
    CannotCalculateChanges,
    Forbidden,
    InvalidArguments,
    InvalidResultReference,
    JmapAccountError,
    JmapAuthError,
    JmapError,
    JmapMethodError,
    JmapOffOriginError,
    JmapProtocolError,
    JmapRedirectError,
    JmapRequestError,
    JmapSetError,
    JmapTransportError,
    RequestTooLarge,
    ServerFail,
    ServerPartialFail,
    ServerUnavailable,
    StateMismatch,
    TooManyChanges,
    UnknownMethod,
    UnsupportedFilter,
    UnsupportedSort,
)
from messageweave.mail.jmap.mail import DEFAULT_EMAIL_PROPERTIES, NEWEST_FIRST
from messageweave.mail.jmap.models import (
    ChangesPage,
    EmailChanges,
    EmailPage,
    EmailQueryResult,
    JmapSession,
    Mailbox,
    MailboxChanges,
    MailboxList,
    PushSubscription,
    PushSubscriptionLookup,
)
from messageweave.mail.jmap.reading import BlobTooLarge
from messageweave.mail.jmap.submission import SUBMISSION, MissingMailbox
from messageweave.mail.records import (
    Address,
    Attachment,
    Draft,
    DraftState,
    EmailMeta,
    Identity,
    MailText,
    SearchResult,
    SearchSnippet,
)

__all__ = [
    "CORE",
    "DEFAULT_EMAIL_PROPERTIES",
    "MAIL",
    "MAX_REDIRECTS",
    "NEWEST_FIRST",
    "SUBMISSION",
    "WELL_KNOWN",
    "AccountNotFound",
    "AccountNotSupportedByMethod",
    "AccountReadOnly",
    "Address",
    "AnchorNotFound",
    "Attachment",
    "BlobTooLarge",
    "CannotCalculateChanges",
    "ChangesPage",
    "Draft",
    "DraftState",
    "EmailChanges",
    "EmailMeta",
    "EmailPage",
    "EmailQueryResult",
    "Forbidden",
    "Identity",
    "InvalidArguments",
    "InvalidResultReference",
    "Invocation",
    "JmapAccountError",
    "JmapAuthError",
    "JmapClient",
    "JmapError",
    "JmapMethodError",
    "JmapOffOriginError",
    "JmapProtocolError",
    "JmapRedirectError",
    "JmapRequestError",
    "JmapSession",
    "JmapSetError",
    "JmapTransportError",
    "MailText",
    "Mailbox",
    "MailboxChanges",
    "MailboxList",
    "MethodCall",
    "MethodResponses",
    "MissingMailbox",
    "PushSubscription",
    "PushSubscriptionLookup",
    "RequestTooLarge",
    "SearchResult",
    "SearchSnippet",
    "ServerFail",
    "ServerPartialFail",
    "ServerUnavailable",
    "StateMismatch",
    "TooManyChanges",
    "UnknownMethod",
    "UnsupportedFilter",
    "UnsupportedSort",
    "build_ssl_context",
    "result_ref",
    "session_resource_url",
]
