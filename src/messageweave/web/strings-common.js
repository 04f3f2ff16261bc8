// Part of the page's string table, [English, Chinese] per key. i18n.js merges the strings-*.js
// modules into `MESSAGES`; the other modules take their texts from i18n.js, never from here.
// This part: the page header, service status, readiness, sign-in, the admin session and the
// texts every card shares.
export const TEXTS = {
  "app.tagline": ["Mail notifications, search and summaries in Telegram", "在 Telegram 中接收邮件通知、搜索和摘要"],

  "setup.title": ["Service status", "服务状态"],
  "setup.checking": ["Checking…", "正在检查…"],
  "setup.ready": ["The service is configured. Sign in to manage it.", "服务已配置。请登录后进行管理。"],
  "setup.setupMode": ["Setup mode: the service cannot start until these variables are set.", "设置模式：必须先设置以下变量，服务才能启动。"],
  "setup.unknown": ["The status could not be read. Check that the service is running, then re-check.", "无法读取状态。请确认服务正在运行，然后重新检查。"],
  "setup.missingIntro": ["Set these environment variables, then restart the service:", "请设置以下环境变量，然后重启服务："],
  "setup.version": ["Version", "版本"],
  "setup.recheck": ["Re-check", "重新检查"],
  "setup.notConfigured": ["Running, not configured yet — sign in to configure.", "正在运行，尚未配置——请登录后进行配置。"],
  "setup.running": ["The service is running. Sign in to manage it.", "服务正在运行。请登录后进行管理。"],

  "ready.title": ["Readiness", "就绪检查"],
  "ready.ready": ["Ready: every check passed.", "已就绪：所有检查均已通过。"],
  "ready.notReady": ["Not ready: a check below failed.", "未就绪：下面有检查未通过。"],
  "ready.notLoaded": ["Not ready: no business configuration is loaded yet.", "未就绪：尚未加载业务配置。"],
  "ready.unknown": ["Readiness could not be read.", "无法读取就绪状态。"],
  "ready.redis.ok": ["Redis: reachable.", "Redis：可以连接。"],
  "ready.redis.failed": ["Redis: not reachable — check REDIS_URL and that Redis runs.", "Redis：无法连接——请检查 REDIS_URL 以及 Redis 是否在运行。"],
  "ready.jmap.ok": ["Mail server (JMAP): reachable, sign-in accepted.", "邮件服务器（JMAP）：可以连接，登录已通过。"],
  "ready.jmap.failed": ["Mail server (JMAP): not reachable or sign-in refused — Test connection shows why.", "邮件服务器（JMAP）：无法连接或登录被拒绝——“测试连接”会显示原因。"],
  "ready.jmap.skipped": ["Mail server (JMAP): not checked until a configuration is saved.", "邮件服务器（JMAP）：保存配置后才会检查。"],
  "ready.telegram.ok": ["Telegram: the bot token works.", "Telegram：Bot 令牌有效。"],
  "ready.telegram.failed": ["Telegram: the bot token was refused or the Bot API is not reachable.", "Telegram：Bot 令牌被拒绝，或无法访问 Bot API。"],
  "ready.telegram.skipped": ["Telegram: not checked until a configuration is saved.", "Telegram：保存配置后才会检查。"],
  "ready.push.ok": ["Mail push: working.", "邮件推送：正常。"],
  "ready.push.off": ["Mail push: off — new mail arrives by the periodic reconcile.", "邮件推送：关闭——新邮件通过定期对账到达。"],
  "ready.push.degraded": ["Mail push: degraded ({reason}) — new mail still arrives by reconcile.", "邮件推送：降级（{reason}）——新邮件仍通过对账到达。"],
  "ready.push.unknown": ["Mail push: reported once the service is ready.", "邮件推送：服务就绪后才会报告。"],

  "auth.title": ["Create admin session", "创建管理会话"],
  "auth.intro": ["Enter the CONFIG_ENCRYPTION_KEY of this service. The session lives only in this page's memory.",
    "请输入本服务的 CONFIG_ENCRYPTION_KEY。会话只保存在本页面的内存中。"],
  "auth.keyLabel": ["Admin credential", "管理凭据"],
  "auth.keyPlaceholder": ["64 hex characters", "64 位十六进制字符"],
  "auth.submit": ["Sign in", "登录"],
  "auth.wrong": ["Wrong credential. Check CONFIG_ENCRYPTION_KEY and try again.",
    "凭据错误。请检查 CONFIG_ENCRYPTION_KEY 后重试。"],
  "auth.expired": ["Your admin session ended (it expired or another sign-in replaced it). Sign in again.",
    "管理会话已结束（已过期或被新的登录取代）。请重新登录。"],
  "auth.signedOut": ["Signed out. The session was revoked and the page cleared.",
    "已退出。会话已撤销，页面已清空。"],
  "auth.signedOutLocal": ["Signed out locally; the server could not confirm the revocation.",
    "已在本地退出；服务器未能确认撤销。"],

  "session.title": ["Admin session", "管理会话"],
  "session.expires": ["Admin session expires in about {n} minutes.", "管理会话约 {n} 分钟后过期。"],
  "session.signOut": ["Sign out and clear session", "退出并清除会话"],

  "common.notAvailable": ["{feature}: not available on this server version.", "{feature}：此服务器版本不提供该功能。"],
  "common.network": ["network error", "网络错误"],

  "privacy.note": ["Secrets are sent only to this service and never shown again. Nothing is kept in cookies or browser storage; leaving the page clears the session and the form.", "密钥只发送给本服务，且不会再次显示。不使用 Cookie 或浏览器存储；离开页面即清除会话和表单。"],
};
