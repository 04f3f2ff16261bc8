"""Every user-visible string the bot sends, in one place (inventory §5.2)."""

from __future__ import annotations

HELP = (
    "使用说明：\n"
    "邮件到达后会先发送发件人、主题和时间等元数据通知。\n"
    "\n"
    "授权示例（请按原文中文输入，不支持英文别名）：\n"
    "1小时：/ai on、临时一次、临时、一次\n"
    "今天：今天\n"
    "7天：7天\n"
    "直到我撤销（最长365天）：直到我撤销、长期\n"
    "撤销授权：/ai off、关闭 ai、撤销授权、停止摘要\n"
    "/summary <email_id>：请求指定邮件摘要；未授权或授权到期时只返回元数据并提示重新授权。\n"
    "/search <关键词>：搜索邮件主题与正文，返回带高亮片段的匹配列表（最多 10 条）。\n"
    "/help（或 help）：显示本说明。\n"
    "\n"
    "隐私：AI 默认关闭，只有你明确开启后才会发送正文；授权有期限且不会自动续期；"
    "正文和 AI 结果不会持久化，也不会写入日志。\n"
    "如果未配置 AI 或 AI 调用失败，将回退为本地截取摘要。"
)

CONSENT_GRANTED = (
    "AI摘要授权已开启：{label}，到期时间 Unix {expires_at}；仍需使用 /summary <email_id> 请求"
)
CONSENT_REVOKED = "AI摘要授权已撤销"
MISSING_EMAIL_ID = "请提供邮件 ID，例如：摘要 e-123"
SUMMARY_WITHOUT_CONSENT = (
    "{sender} — {subject}\n授权已到期或尚未授权；如需 AI 摘要，请重新选择授权期限。"
)
# Not in the original (it sent an empty message, which Telegram refuses): mail without text.
SUMMARY_NO_TEXT = "（这封邮件没有文本正文）"

SEARCH_EMPTY_QUERY = "请提供搜索关键词，例如：/search 发票"
SEARCH_QUERY_TOO_LONG = "搜索关键词太长了（最多 {limit} 个字符），请缩短后再试。"
SEARCH_NO_HITS = "没有找到匹配「{query}」的邮件。"
SEARCH_HEADER = "搜索「{query}」：共 {count} 封匹配邮件"
SEARCH_NO_SNIPPETS = "（高亮片段暂不可用，以下为匹配的邮件 ID）"
SEARCH_NO_SUBJECT = "（无主题）"
SEARCH_ID_LINE = "- {email_id}"
SEARCH_HIT_LINE = "- {subject}（{email_id}）"
SEARCH_PREVIEW_LINE = "  {preview}"
ELLIPSIS = "…"


def consent_granted(label: str, expires_at: int) -> str:
    return CONSENT_GRANTED.format(label=label, expires_at=expires_at)


def summary_without_consent(sender: str | None, subject: str | None) -> str:
    return SUMMARY_WITHOUT_CONSENT.format(sender=sender or "", subject=subject or "")
