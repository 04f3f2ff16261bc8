"""Every user-visible string the bot sends, one table per language (reference §7:
bot language; issue #16).

`ZH` is the contract's text byte for byte but for the lines reference §7 lists (§7.12: the
consent's expiry and the hint of what to send); `EN` says the same in English. Both tables have the
same keys and the same `{placeholders}` (tests/unit/test_replies.py checks it), so a reply is
`texts(cfg.bot_language)[key].format(...)` wherever it is sent. Plain dicts, so a feature's
strings can be folded in as more keys.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Mapping

from messageweave.config.features import BotLanguage

# The same in every language: what `truncate` appends to a cut subject or preview.
ELLIPSIS = "…"
# How a time is written (`zoned_time`, with the zone's name).
TIME_FORMAT = "%Y-%m-%d %H:%M"

ZH: dict[str, str] = {
    "help": (
        "使用说明：\n"
        "邮件到达后会先发送发件人、主题和时间等元数据通知。\n"
        "\n"
        "授权示例（中文短语可写在句中；英文短语须单独发送：1 hour、today、7 days、"
        "until I revoke、revoke）：\n"
        "1小时：/ai on、临时一次、临时、一次\n"
        "今天：今天\n"
        "7天：7天\n"
        "直到我撤销（最长365天）：直到我撤销、长期\n"
        "撤销授权：/ai off、关闭 ai、撤销授权、停止摘要\n"
        "/summary <email_id>：请求指定邮件摘要；未授权或授权到期时只返回元数据并提示重新授权。\n"
        "/search <关键词>：搜索邮件主题与正文，返回带高亮片段的匹配列表（最多 10 条）。\n"
        "/read <email_id>：在聊天中显示邮件全文（发件人、收件人、抄送、日期、主题，"
        "然后是正文，最多 3 条消息）和附件列表，每个附件一个按钮；"
        "正文会经过 Telegram 的服务器，本服务不保存。\n"
        "/reply <email_id> <内容>：回复这封邮件（也可以在 Telegram 中直接回复它的通知）；"
        "先生成草稿，显示收件人、主题和开头几行，按“发送”才发出，按“取消”删除草稿；"
        "24 小时内未发送的草稿会被删除。\n"
        "/help（或 help）：显示本说明。\n"
        "通知下方的按钮：摘要、标为已读、归档、阅读全文（同 /read）；"
        "阅读全文回复下的 📎 按钮发送该附件；回复草稿下的按钮：发送、取消。\n"
        "\n"
        "隐私：AI 默认关闭，只有你明确开启后才会发送正文；授权有期限且不会自动续期；"
        "正文和 AI 结果不会持久化，也不会写入日志。\n"
        "如果未配置 AI 或 AI 调用失败，将回退为本地截取摘要。"
    ),
    # `/start` (issue #34, `pipeline.conversation`): what the bot does, whose chat this is,
    # the next step; never a word about the mailbox itself.
    "start_owner": (
        "你好！我是 MessageWeave 邮件助手：新邮件到达时我在这里通知你，"
        "你也可以在这个聊天中搜索、阅读和回复邮件。\n"
        "这个聊天已设置好，你是邮箱的主人。\n"
        "下一步：发送 /help 查看用法，或发送 /search <关键词> 搜索邮件。"
    ),
    "start_member": (
        "你好！我是 MessageWeave 邮件助手：我在这个聊天中发送新邮件通知。\n"
        "你不是邮箱的主人：只有主人可以在这里搜索、阅读或回复邮件。\n"
        "下一步：如需这些功能，请联系邮箱的主人（在管理页面上设置）。"
    ),
    "consent_granted": (
        "AI摘要授权已开启：{label}，到期时间 {expires_at}（{zone}）；"
        "仍需使用 /summary <email_id> 请求"
    ),
    "consent_revoked": "AI摘要授权已撤销",
    # The labels of `chat.intents.GrantConsent.label_key`.
    "label_one_hour_temporary": "临时1小时",
    "label_one_hour": "1小时",
    "label_today": "今天",
    "label_seven_days": "7天",
    "label_until_revoked": "直到撤销（最长365天）",
    "missing_email_id": "请提供邮件 ID，例如：摘要 e-123",
    # The line of what to send (issue #22) comes before the contract's own last line.
    "summary_without_consent": (
        "{sender} — {subject}\n"
        "授权：发送 /ai on（1小时）、今天、7天 或 直到我撤销，然后再发送 /summary {email_id}。\n"
        "授权已到期或尚未授权；如需 AI 摘要，请重新选择授权期限。"
    ),
    # Not in the original (it sent an empty message, which Telegram refuses): mail without text.
    "summary_no_text": "（这封邮件没有文本正文）",
    "search_empty_query": "请提供搜索关键词，例如：/search 发票",
    "search_query_too_long": "搜索关键词太长了（最多 {limit} 个字符），请缩短后再试。",
    "search_no_hits": "没有找到匹配「{query}」的邮件。",
    "search_header": "搜索「{query}」：共 {count} 封匹配邮件",
    "search_no_snippets": "（高亮片段暂不可用，以下为匹配的邮件 ID）",
    "search_no_subject": "（无主题）",
    "search_id_line": "- {email_id}",
    "search_hit_line": "- {subject}（{email_id}）",
    "search_preview_line": "  {preview}",
    # The command menu (setMyCommands, `chat.webhook_setup`).
    "command_help": "使用说明",
    "command_search": "搜索邮件：/search <关键词>",
    "command_summary": "邮件摘要：/summary <email_id>",
    "command_ai": "AI 摘要授权：/ai on 或 /ai off",
    # The buttons under a notification and the notices of a press (`pipeline.buttons`).
    "button_summary": "摘要",
    "button_read": "标为已读",
    "button_archive": "归档",
    "button_read_done": "✓ 已读",
    "button_archive_done": "✓ 已归档",
    "notice_read": "已标为已读",
    "notice_archive": "已归档",
    "notice_already": "已经处理过了",
    "notice_busy": "正在处理，请稍候",
    "notice_invalid": "这个按钮已失效",
    "not_owner": "只有邮箱的主人可以这样做",  # issue #32: `pipeline.owners`
    "account_paused": "这个邮箱已暂停",  # issue #35: the chat's account is paused
    "notice_gone": "邮箱里已没有这封邮件",
    "notice_failed": "邮件服务器拒绝了这个操作",
    "notice_retry": "暂时连不上邮件服务器，稍后会自动重试",
    # Read, attachments (issue #25: `pipeline.reading`).
    "button_read_mail": "阅读全文",
    "button_attachment": "📎 {name}",
    "command_read": "阅读邮件：/read <email_id>",
    "read_off": "已关闭在聊天中阅读邮件（设置 read_in_chat）",
    "read_from": "发件人：{value}",
    "read_to": "收件人：{value}",
    "read_cc": "抄送：{value}",
    "read_reply_to": "回复地址（Reply-To）：{value}",
    "read_date": "日期：{value}",
    "read_subject": "主题：{value}",
    "read_attachments": "附件：",
    "read_attachment_line": "- {name}（{size}）",
    "read_more": "…… 还有 {count} 个字符，请在邮件客户端中打开",
    "read_no_subject": "（无主题）",
    "read_unnamed": "（未命名附件）",
    "notice_too_large": "文件太大（{size} MB），请在邮件客户端中打开",
    "notice_sent": "已经发送过了",
    "notice_upload_failed": "文件没能发送，请再按一次",
    # Reply (issue #25: `pipeline.reply`).
    "command_reply": "回复邮件：/reply <email_id> <内容>",
    "reply_off": "此邮件服务器不支持发信（JMAP submission），无法在聊天中回复",
    "reply_empty": "请在邮件 ID 后写上回复内容：/reply <email_id> <内容>",
    "reply_no_identity": "邮箱账户没有可用来回复的发件身份",
    "reply_refused": "邮件服务器拒绝了这份草稿：{reason}",
    "reply_draft": "回复草稿（尚未发送）",
    "reply_names": "收件人名称（对方自己填写的）：{value}",
    "reply_to_differs": "⚠️ 回复将发往 Reply-To 地址，而不是发件人 {sender}",
    "reply_bad_address": "无法回复：收件人地址 {address} 不是普通的邮件地址，请在邮件客户端中回复",
    "button_send": "发送",
    "button_cancel": "取消",
    "reply_sent": "已发送（{time}）",
    "notice_reply_sent": "已发送",
    "notice_send_refused": "邮件服务器拒绝发送：{reason}",
    "notice_cancelled": "草稿已删除",
    "notice_draft_gone": "这份草稿已不在了（已发送、已取消或已过期）",
    # The backlog digest (`pipeline.digest`).
    "digest_header": "新邮件汇总：共 {count} 封",
    "digest_line": "{sender} — {subject}",
    "digest_more": "……还有 {count} 封",
    "digest_unknown_sender": "（未知发件人）",
    "digest_no_subject": "（无主题）",
    "digest_gone": "一封新邮件已不在邮箱中：{email_id}",
}

EN: dict[str, str] = {
    "help": (
        "How to use:\n"
        "When a mail arrives, you first get a notification with its sender, subject and time.\n"
        "\n"
        "Consent for AI summaries (type one of these; the Chinese phrases work too):\n"
        "1 hour: /ai on, once, 1 hour\n"
        "Today: today\n"
        "7 days: 7 days\n"
        "Until I revoke (at most 365 days): until I revoke, long term\n"
        "Revoke: /ai off, revoke, stop summaries\n"
        "/summary <email_id>: summarize one mail; without valid consent you get only its "
        "sender and subject and a hint to consent again.\n"
        "/search <words>: search the subject and body of your mail; lists up to 10 matches "
        "with highlighted snippets.\n"
        "/read <email_id>: the whole mail in the chat (From, To, Cc, Date, Subject, then the "
        "text, in at most 3 messages) and its attachments, with a button for each; the text "
        "passes through Telegram's servers and is not stored here.\n"
        "/reply <email_id> <text>: answer that mail (or simply reply to its notification in "
        "Telegram); you first get a draft with its To, Subject and first lines, sent only when "
        "you press Send (Cancel deletes it); a draft not sent within 24 hours is deleted.\n"
        "/help (or help): show this text.\n"
        "The buttons under a notification: Summary, Mark read, Archive, Read (as /read); the "
        "📎 buttons under a Read reply send that attachment; the buttons under a reply draft: "
        "Send, Cancel.\n"
        "\n"
        "Privacy: AI is off by default; a mail's text is sent to the model only after you turn "
        "it on; consent expires and is never renewed by itself; mail text and AI results are "
        "never stored or logged.\n"
        "Without an AI model, or when it fails, you get the beginning of the mail instead."
    ),
    "start_owner": (
        "Hello! I am MessageWeave, a mail assistant: I tell you here when new mail arrives, "
        "and you can search, read and answer your mail from this chat.\n"
        "This chat is set up, and you are the mailbox's owner.\n"
        "Next: send /help to see how to use me, or /search <words> to find a mail."
    ),
    "start_member": (
        "Hello! I am MessageWeave, a mail assistant: I post new-mail notifications in this "
        "chat.\n"
        "You are not the mailbox's owner: only the owner can search, read or answer mail here.\n"
        "Next: if you need that, ask the mailbox's owner (it is set on the admin page)."
    ),
    "consent_granted": (
        "AI summaries are on: {label}, until {expires_at} ({zone}). "
        "Ask for each one with /summary <email_id>"
    ),
    "consent_revoked": "AI summary consent revoked",
    "label_one_hour_temporary": "1 hour (one-off)",
    "label_one_hour": "1 hour",
    "label_today": "today",
    "label_seven_days": "7 days",
    "label_until_revoked": "until revoked (at most 365 days)",
    "missing_email_id": "Please give an email id, e.g. /summary e-123",
    "summary_without_consent": (
        "{sender} — {subject}\n"
        "To consent, send /ai on (1 hour), today, 7 days or until I revoke, then "
        "/summary {email_id} again.\n"
        "No valid consent (expired or never given); for an AI summary, "
        "choose a consent period again."
    ),
    "summary_no_text": "(This mail has no text body)",
    "search_empty_query": "Please give search words, e.g. /search invoice",
    "search_query_too_long": (
        "The search is too long (at most {limit} characters); please shorten it."
    ),
    "search_no_hits": "No mail matches \"{query}\".",
    "search_header": "Search \"{query}\": {count} matching mail(s)",
    "search_no_snippets": "(Highlighted snippets are not available; the matching email ids:)",
    "search_no_subject": "(no subject)",
    "search_id_line": "- {email_id}",
    "search_hit_line": "- {subject} ({email_id})",
    "search_preview_line": "  {preview}",
    "command_help": "How to use",
    "command_search": "Search mail: /search <words>",
    "command_summary": "Summarize a mail: /summary <email_id>",
    "command_ai": "AI summary consent: /ai on or /ai off",
    # The buttons under a notification and the notices of a press (`pipeline.buttons`).
    "button_summary": "Summary",
    "button_read": "Mark read",
    "button_archive": "Archive",
    "button_read_done": "✓ Read",
    "button_archive_done": "✓ Archived",
    "notice_read": "Marked as read",
    "notice_archive": "Archived",
    "notice_already": "Already done",
    "notice_busy": "Working on it",
    "notice_invalid": "This button is no longer valid",
    "not_owner": "Only the mailbox's owner can do this",
    "account_paused": "This mailbox is paused",
    "notice_gone": "This mail is no longer in the mailbox",
    "notice_failed": "The mail server refused this",
    "notice_retry": "The mail server is unreachable; this will be retried",
    # Read, attachments (issue #25: `pipeline.reading`).
    "button_read_mail": "Read",
    "button_attachment": "📎 {name}",
    "command_read": "Read a mail: /read <email_id>",
    "read_off": "Reading mail in the chat is turned off (setting read_in_chat)",
    "read_from": "From: {value}",
    "read_to": "To: {value}",
    "read_cc": "Cc: {value}",
    "read_reply_to": "Reply-To: {value}",
    "read_date": "Date: {value}",
    "read_subject": "Subject: {value}",
    "read_attachments": "Attachments:",
    "read_attachment_line": "- {name} ({size})",
    "read_more": "… {count} more characters, open it in your mail client",
    "read_no_subject": "(no subject)",
    "read_unnamed": "(unnamed attachment)",
    "notice_too_large": "too large ({size} MB), open it in your mail client",
    "notice_sent": "Already sent",
    "notice_upload_failed": "The file could not be sent; press again",
    # Reply (issue #25: `pipeline.reply`).
    "command_reply": "Reply to a mail: /reply <email_id> <text>",
    "reply_off": "This mail server does not offer sending (JMAP submission): replies from the "
                 "chat are off",
    "reply_empty": "Write the reply after the id: /reply <email_id> <text>",
    "reply_no_identity": "The mail account has no identity to reply as",
    "reply_refused": "The mail server refused the draft: {reason}",
    "reply_draft": "Reply draft (not sent yet)",
    "reply_names": "Name(s) the sender gave: {value}",
    "reply_to_differs": "⚠️ This reply goes to the Reply-To address, not to the sender {sender}",
    "reply_bad_address": "Cannot reply: the recipient address {address} is not a plain mail "
    "address; reply from your mail client",
    "button_send": "Send",
    "button_cancel": "Cancel",
    "reply_sent": "Sent ({time})",
    "notice_reply_sent": "Sent",
    "notice_send_refused": "The mail server refused to send it: {reason}",
    "notice_cancelled": "Draft deleted",
    "notice_draft_gone": "This draft is gone (sent, cancelled or expired)",
    # The backlog digest (`pipeline.digest`).
    "digest_header": "New mail digest: {count} mails",
    "digest_line": "{sender} — {subject}",
    "digest_more": "… and {count} more",
    "digest_unknown_sender": "(unknown sender)",
    "digest_no_subject": "(no subject)",
    "digest_gone": "A new mail is no longer in the mailbox: {email_id}",
}

TEXTS: dict[BotLanguage, dict[str, str]] = {"zh": ZH, "en": EN}


def table(language: BotLanguage) -> Mapping[str, str]:
    """The table of `bot_language`."""
    return TEXTS[language]


def local_time(unix: int, timezone: str) -> str:
    """`unix` in the IANA zone `timezone`, 24-hour, without the zone's name."""
    moment = dt.datetime.fromtimestamp(unix, tz=zoneinfo.ZoneInfo(timezone))
    return moment.strftime(TIME_FORMAT)


def zoned_time(unix: int, timezone: str) -> str:
    """How every time in the chat is shown (issue #34): `2025-01-02 18:00 (Asia/Tokyo)`, the
    configured zone named, the same in both languages (notifications, digests, Read, a sent
    reply). The IANA name, not an abbreviation: `CST` is three zones, and a name reads the same
    in Chinese."""
    return f"{local_time(unix, timezone)} ({timezone})"


def consent_granted(language: BotLanguage, label_key: str, expires_at: int,
                    timezone: str) -> str:
    """The grant's confirmation: the expiry in the configured time zone, named (issue #22:
    it said `Unix 1700000000`)."""
    table_ = table(language)
    return table_["consent_granted"].format(
        label=table_[label_key], expires_at=local_time(expires_at, timezone), zone=timezone)


def summary_without_consent(
    language: BotLanguage, sender: str | None, subject: str | None, email_id: str
) -> str:
    return table(language)["summary_without_consent"].format(
        sender=sender or "", subject=subject or "", email_id=email_id)
