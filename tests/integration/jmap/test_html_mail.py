"""The text of HTML-only and multipart mail as Cyrus serves it (RFC 8621 §4.1.4: `textBody` falls
back to the text/html parts when there is no text/plain one): what the summary excerpt and the
model read."""

from __future__ import annotations

import email.utils
from email.message import EmailMessage
from email.policy import SMTP

from messageweave.mail.jmap import JmapClient
from tests.helpers import NEWSLETTER, NEWSLETTER_TEXT, FreshUser, html_message
from tests.peers.cyrus import CyrusServer, make_message


async def _text_body_types(client: JmapClient, email_id: str) -> list[str]:
    """The types of the parts Cyrus lists in `textBody` (raw, not through our parsing)."""
    await client.get_session()
    responses = await client.call([
        ("Email/get", {"accountId": client.account_id, "ids": [email_id],
                       "properties": ["textBody"], "bodyProperties": ["type"]}, "g"),
    ])
    res = responses.result("g", "Email/get")
    return [part["type"] for part in res["list"][0]["textBody"]]


async def test_html_only_mail_reads_as_its_text_without_markup_script_or_style(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    """Catches the HTML of an HTML-only mail reaching the excerpt and the model as markup (tags,
    entities, the script's code, the stylesheet, link targets, hidden text)."""
    msg = cyrus.append(html_message(NEWSLETTER))
    assert await _text_body_types(client, msg.email_id) == ["text/html"]

    [meta] = await client.get_emails([msg.email_id], fetch_text=True)

    assert meta.text == NEWSLETTER_TEXT
    assert not meta.text_truncated
    for markup in ("<p", "&amp;", "&eacute;", "SCRIPTED", "tracking", "font-family", "tracker",
                   "Hidden preheader", "Newsletter title"):
        assert markup not in meta.text


async def test_html_in_another_charset_is_decoded_before_conversion(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    """Catches an HTML part in ISO-8859-1 read as bytes of the wrong charset."""
    msg = cyrus.append(html_message("<p>Déjà vu, señor &amp; garçon</p>", charset="iso-8859-1"))
    [meta] = await client.get_emails([msg.email_id], fetch_text=True)
    assert meta.text == "Déjà vu, señor & garçon"


async def test_multipart_alternative_takes_the_text_part_in_either_order(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    """Catches the HTML alternative being used (or added) when the mail has a text/plain one."""
    text_first = make_message("alt", "Plain words here.", html="<p>Html words</p>")
    msg = EmailMessage(policy=SMTP)
    msg["From"], msg["To"], msg["Subject"] = "bob@example.org", "alice@localhost", "alt 2"
    msg["Message-ID"] = email.utils.make_msgid(domain="example.org")
    msg.set_content("<p>Html words</p>", subtype="html")
    msg.add_alternative("Plain words here.\n", subtype="plain")
    for raw in (text_first, msg.as_bytes()):
        appended = cyrus.append(raw)
        [meta] = await client.get_emails([appended.email_id], fetch_text=True)
        assert meta.text is not None and meta.text.strip() == "Plain words here."


async def test_html_body_with_a_text_attachment_reads_the_body_only(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    """Catches an attached text file being read as the mail's text next to (or instead of) the
    converted HTML body."""
    raw = html_message("<p>See the <b>attached</b> notes.</p>", attachment=b"attachment words\n")
    msg = cyrus.append(raw)
    [meta] = await client.get_emails([msg.email_id], fetch_text=True)
    assert meta.text == "See the attached notes."


async def test_the_byte_cap_applies_to_the_converted_text_not_to_the_markup(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    """Catches the cap being spent on markup: with the server cutting the HTML at the text's cap,
    6 KB of stylesheet before the words would leave no text at a 2 KB cap. The HTML is fetched
    at 8 times the cap (`body.HTML_BYTES_PER_TEXT_BYTE`), converted, then cut to the cap."""
    css = "".join(f".c{n} {{ color: #{n:06x}; padding: 0 }}\n" for n in range(150))
    paragraphs = "".join(f"<p>Paragraph {n} of the letter.</p>" for n in range(400))
    html = f"<html><head><style>{css}</style></head><body>{paragraphs}</body></html>"
    assert len(css) > 5000
    msg = cyrus.append(html_message(html))

    [capped] = await client.get_emails([msg.email_id], fetch_text=True, body_max_bytes=2000)
    assert capped.text is not None and capped.text.startswith("Paragraph 0 of the letter.")
    assert 1950 <= len(capped.text.encode()) <= 2000
    assert capped.text_truncated
    assert "<" not in capped.text and "color" not in capped.text

    [whole] = await client.get_emails([msg.email_id], fetch_text=True)
    assert whole.text is not None and whole.text.endswith("Paragraph 399 of the letter.")
    assert not whole.text_truncated

    # HTML longer than the server sends: the words it did send, marked truncated.
    [cut] = await client.get_emails([msg.email_id], fetch_text=True, body_max_bytes=1000)
    assert cut.text is not None and cut.text.startswith("Paragraph 0 of the letter.")
    assert cut.text_truncated


async def test_query_and_get_converts_html_too(fresh: FreshUser, cyrus: CyrusServer) -> None:
    """Catches the Email/query + Email/get path reading HTML differently from `get_emails`."""
    cyrus.append(html_message("<p>Only <i>html</i> here</p>"), user=fresh.user)
    inbox = next(m.id for m in await fresh.client.mailboxes() if m.role == "inbox")
    page = await fresh.client.query_and_get({"inMailbox": inbox}, limit=5, fetch_text=True)
    assert [e.text for e in page.emails] == ["Only html here"]
