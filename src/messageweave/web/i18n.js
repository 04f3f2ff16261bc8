// Every user-visible string of the page, in both languages: [English, Chinese] per key, so a
// key cannot exist in one language only. index.html names its static texts by key
// (`data-i18n`, `data-i18n-placeholder`, `data-i18n-aria`); the modules call `t(key, vars)`.
const TEXTS = {
  "app.tagline": ["Mail notifications, search and summaries in Telegram",
    "在 Telegram 中接收邮件通知、搜索和摘要"],

  "setup.title": ["Service status", "服务状态"],
  "setup.checking": ["Checking…", "正在检查…"],
  "setup.ready": ["The service is configured. Sign in to manage it.",
    "服务已配置。请登录后进行管理。"],
  "setup.setupMode": ["Setup mode: the service cannot start until these variables are set.",
    "设置模式：必须先设置以下变量，服务才能启动。"],
  "setup.unknown": ["The status could not be read. Check that the service is running, then re-check.",
    "无法读取状态。请确认服务正在运行，然后重新检查。"],
  "setup.missingIntro": ["Set these environment variables, then restart the service:",
    "请设置以下环境变量，然后重启服务："],
  "setup.version": ["Version", "版本"],
  "setup.recheck": ["Re-check", "重新检查"],

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

  "service.title": ["Service", "服务"],
  "service.enabled": ["Enable business processing", "启用业务处理"],
  "service.on": ["on", "开"],
  "service.off": ["off", "关"],
  "service.enabledSaved": ["Business processing is now {state}.", "业务处理现在为「{state}」。"],
  "service.enabledFailed": ["The switch could not be changed ({reason}); it was put back.",
    "开关未能修改（{reason}），已恢复原状。"],

  "runtime.title": ["Runtime parameters", "运行参数"],
  "runtime.jmapTimeout": ["JMAP timeout (ms)", "JMAP 超时（毫秒）"],
  "runtime.telegramTimeout": ["Telegram timeout (ms)", "Telegram 超时（毫秒）"],
  "runtime.llmTimeout": ["AI timeout (ms)", "AI 超时（毫秒）"],
  "runtime.maxRetries": ["Max retries", "最大重试次数"],
  "runtime.reload": ["Reload runtime parameters", "重新读取运行参数"],
  "runtime.defaults": ["Restore defaults", "恢复默认值"],
  "runtime.save": ["Save runtime parameters", "保存运行参数"],
  "runtime.loaded": ["Runtime parameters loaded.", "运行参数已读取。"],
  "runtime.defaultsShown": ["Defaults filled in; save to apply them.",
    "已填入默认值；保存后生效。"],
  "runtime.saved": ["Runtime parameters saved.", "运行参数已保存。"],
  "runtime.outOfRange": ["Timeouts must be 100–300000 ms and retries 0–5.",
    "超时须为 100–300000 毫秒，重试次数须为 0–5。"],
  "runtime.failed": ["Runtime parameters could not be read or saved ({reason}).",
    "无法读取或保存运行参数（{reason}）。"],

  "biz.title": ["Business configuration", "业务配置"],
  "biz.notConfigured": ["Nothing saved yet: fill in every field, then save the first configuration.",
    "尚未保存任何配置：请填写所有字段，然后保存首个配置。"],
  "biz.configured": ["Saved configuration, revision {n}. Secret fields stay blank; type only what you want to change.",
    "已保存的配置，修订号 {n}。密钥字段保持为空；只填写需要修改的内容。"],
  "biz.sectionJmap": ["01 · Mailbox (JMAP)", "01 · 邮箱（JMAP）"],
  "biz.sectionTelegram": ["02 · Telegram and access", "02 · Telegram 与访问控制"],
  "biz.sectionLlm": ["03 · AI summaries", "03 · AI 摘要"],
  "biz.sectionDisplay": ["04 · Notification display", "04 · 通知显示"],
  "biz.save": ["Save configuration", "保存配置"],
  "biz.test": ["Test connection", "测试连接"],
  "biz.reload": ["Reload from server", "从服务器重新读取"],
  "biz.nothing": ["Nothing to submit: no field changed.", "没有可提交的内容：没有字段被修改。"],
  "biz.saved": ["Saved and hot-reloaded. Revision {n}.", "已保存并热加载。修订号 {n}。"],
  "biz.savedNotApplied": ["Saved (revision {n}), but not hot-reloaded: the previous runtime keeps serving.",
    "已保存（修订号 {n}），但未热加载：原运行时继续服务。"],
  "biz.conflict": ["Someone else changed the configuration meanwhile. The form was reloaded with the current values; make your change again.",
    "其他人同时修改了配置。表单已按当前值重新载入；请重新进行修改。"],
  "biz.rejected": ["The server rejected the configuration: {reason}",
    "服务器拒绝了该配置：{reason}"],
  "biz.rejectedGeneric": ["The server rejected the configuration (unknown field or wrong type).",
    "服务器拒绝了该配置（未知字段或类型错误）。"],
  "biz.badRequest": ["The request was not valid JSON.", "请求不是有效的 JSON。"],
  "biz.unavailable": ["The service is unavailable right now (Redis or storage). Try again in 30 s.",
    "服务暂时不可用（Redis 或存储）。请 30 秒后重试。"],
  "biz.failed": ["Request failed ({reason}).", "请求失败（{reason}）。"],
  "biz.loadFailed": ["The configuration could not be read ({reason}).",
    "无法读取配置（{reason}）。"],
  "biz.required": ["Required: {field}.", "必填：{field}。"],
  "biz.badInt": ["{field} must be a whole number (64-bit).", "{field} 必须是整数（64 位）。"],
  "biz.badList": ["{field}: every entry must be a 64-bit whole number, without duplicates.",
    "{field}：每一项都必须是 64 位整数，且不能重复。"],
  "biz.llmRequired": ["With AI enabled, the API base URL, model and API key are required.",
    "启用 AI 后，API 地址、模型和 API 密钥为必填项。"],
  "biz.tooShort": ["{field} must be at least {n} characters (use Generate).",
    "{field} 至少需要 {n} 个字符（可点击“生成”）。"],
  "biz.badSecretChars": ["{field} may contain only A-Z, a-z, 0-9, _ and -.",
    "{field} 只能包含 A-Z、a-z、0-9、_ 和 -。"],
  "biz.generate": ["Generate", "生成"],
  "biz.generateFor": ["Generate a random {field}", "随机生成{field}"],
  "biz.warning": ["{component} · {step}: {detail}", "{component} · {step}：{detail}"],
  "biz.testing": ["Testing…", "正在测试…"],
  "biz.testOk": ["Validation passed.", "校验通过。"],
  "biz.testInvalid": ["Validation failed:", "校验失败："],
  "biz.componentOk": ["{component}: reachable.", "{component}：可以连接。"],
  "biz.componentFailed": ["{component}: failed.", "{component}：失败。"],
  "biz.componentSkipped": ["{component}: not probed (needs both AI switches on).",
    "{component}：未探测（需要同时打开两个 AI 开关）。"],

  "field.jmap_session_url": ["Session URL", "Session URL"],
  "field.jmap_username": ["Username", "用户名"],
  "field.jmap_password": ["App password", "应用密码"],
  "field.account_id": ["Account id (optional)", "账户 ID（可选）"],
  "field.account_idPlaceholder": ["blank = primary mail account", "留空 = 主邮件账户"],
  "field.notify_mailbox_roles": ["Notify for mailbox roles", "通知的邮箱角色"],
  "field.reconcile_interval_s": ["Reconcile interval (s, 0 = external cron)",
    "对账间隔（秒，0 = 外部定时任务）"],
  "field.degraded_reconcile_interval_s": ["Reconcile interval while push is degraded (s)",
    "推送降级时的对账间隔（秒）"],
  "field.audit_interval_s": ["Gap audit interval (s, 0 = on demand only)",
    "漏信审计间隔（秒，0 = 仅手动）"],
  "field.audit_window_s": ["Gap audit window (s)", "漏信审计窗口（秒）"],
  "field.bot_token": ["Bot token", "Bot 令牌"],
  "field.telegram_chat_id": ["Notification chat id", "通知会话 ID"],
  "field.chat_allowlist": ["Allowed chat ids", "允许的会话 ID"],
  "field.chat_allowlistPlaceholder": ["ids separated by spaces or commas", "用空格或逗号分隔的 ID"],
  "field.telegram_webhook_secret": ["Webhook secret", "Webhook 密钥"],
  "field.reconcile_token": ["Reconcile token", "对账令牌"],
  "field.worker_token": ["Worker token", "Worker 令牌"],
  "field.telegram_api_base_url": ["Bot API base URL", "Bot API 地址"],
  "field.delivery_policy": ["Delivery policy", "投递策略"],
  "field.policyAtLeastOnce": ["At least once (a duplicate is possible)", "至少一次（可能重复）"],
  "field.policyAtMostOnce": ["At most once (a loss is possible)", "至多一次（可能丢失）"],
  "field.llm_enabled": ["Enable AI summaries", "启用 AI 摘要"],
  "field.llm_allow_net": ["Allow network calls to the AI service", "允许访问 AI 服务的网络"],
  "field.llm_base_url": ["API base URL", "API 地址"],
  "field.llm_model": ["Model", "模型"],
  "field.llm_api_key": ["API key", "API 密钥"],
  "field.timezone": ["Time zone", "时区"],
  "field.timezoneFilter": ["Search time zones", "搜索时区"],
  "field.timezoneFilterPlaceholder": ["e.g. Berlin", "例如 Berlin"],

  "marker.set": ["• Set. Leave empty to keep the saved value.", "• 已设置。留空则保留已保存的值。"],
  "marker.notSet": ["• Not set. Enter a value.", "• 未设置。请输入一个值。"],
  "marker.generated": ["• Generated and shown here until you save: copy it now for the gateway or cron.",
    "• 已生成，保存前会显示在此处：请立即复制给网关或定时任务使用。"],

  "callbacks.title": ["External callbacks", "外部回调"],
  "callbacks.intro": ["The public https origin where Telegram and the mail server reach this service (no path).",
    "Telegram 和邮件服务器访问本服务所用的公网 https 源地址（不含路径）。"],
  "callbacks.origin": ["Public origin", "公网源地址"],
  "callbacks.register": ["Register callbacks", "注册回调"],
  "callbacks.disablePush": ["Disable push", "停用推送"],
  "callbacks.hint": ["Save the configuration first; registration uses the saved values.",
    "请先保存配置；注册使用已保存的值。"],
  "callbacks.badOrigin": ["Enter an https origin without path, query or credentials, e.g. https://bot.example.com",
    "请输入不含路径、查询或凭据的 https 源地址，例如 https://bot.example.com"],
  "callbacks.tgOk": ["Telegram webhook: registered ({url}).",
    "Telegram webhook：已注册（{url}）。"],
  "callbacks.tgFailed": ["Telegram webhook: failed ({reason}).",
    "Telegram webhook：失败（{reason}）。"],
  "callbacks.pushOk": ["Mail push: registered (subscription {id}).",
    "邮件推送：已注册（订阅 {id}）。"],
  "callbacks.pushFailed": ["Mail push: failed ({reason}).", "邮件推送：失败（{reason}）。"],
  "callbacks.pushBusy": ["Mail push: another registration is in progress; try again shortly.",
    "邮件推送：另一个注册正在进行；请稍后重试。"],
  "callbacks.disabled": ["Mail push: disabled for this origin.", "邮件推送：已为此源地址停用。"],
  "callbacks.noSubscription": ["Mail push: no subscription is registered for this origin.",
    "邮件推送：此源地址没有已注册的订阅。"],
  "callbacks.disableFailed": ["Mail push: could not be disabled ({reason}).",
    "邮件推送：无法停用（{reason}）。"],
  "callbacks.telegram": ["Telegram webhook", "Telegram webhook"],
  "callbacks.push": ["Mail push", "邮件推送"],
  "callbacks.pushStatusTitle": ["Mail push status", "邮件推送状态"],
  "callbacks.pushState": ["State", "状态"],
  "callbacks.lastStateChange": ["Last StateChange received", "最近一次收到 StateChange"],
  "callbacks.expires": ["Subscription expires", "订阅到期时间"],
  "callbacks.pushRefresh": ["Refresh push status", "刷新推送状态"],
  "callbacks.stateOk": ["working", "正常"],
  "callbacks.stateOkUnverified": ["working (awaiting the mail server's verification)",
    "正常（等待邮件服务器验证）"],
  "callbacks.stateOff": ["off: no push registration; new mail waits for reconcile",
    "关闭：没有推送注册；新邮件等待对账"],
  "callbacks.stateDegraded": ["degraded: {reason}. New mail still arrives by reconcile meanwhile.",
    "降级：{reason}。期间新邮件仍通过对账到达。"],
  "callbacks.reason.expired": ["the subscription expired", "订阅已过期"],
  "callbacks.reason.not_verified": ["the subscription was not verified in time (check that the callback URL reaches this service)",
    "订阅未能及时完成验证（请检查回调地址能否访问本服务）"],
  "callbacks.reason.check_failed": ["the mail server could not be checked", "无法检查邮件服务器"],
  "callbacks.reason.renewal_failed": ["the subscription could not be extended", "订阅无法续期"],
  "callbacks.reason.recreate_failed": ["the subscription was lost and could not be re-created",
    "订阅已丢失且无法重新创建"],
  "callbacks.reason.url_unknown": ["the subscription was lost; register callbacks again to re-create it",
    "订阅已丢失；请重新注册回调以重新创建"],
  "callbacks.never": ["never", "从未"],
  "callbacks.ago": ["{age} ago", "{age}前"],
  "callbacks.ageS": ["{n} s", "{n} 秒"],
  "callbacks.ageMin": ["{n} min", "{n} 分钟"],
  "callbacks.ageH": ["{n} h", "{n} 小时"],
  "callbacks.ageD": ["{n} d", "{n} 天"],
  "callbacks.noExpiry": ["no expiry", "无到期时间"],
  "callbacks.expiresAt": ["{time} UTC (in {left})", "{time} UTC（还剩 {left}）"],
  "callbacks.expiredAt": ["{time} UTC (passed)", "{time} UTC（已过期）"],
  "callbacks.statusFailed": ["The push status could not be read ({reason}).",
    "无法读取推送状态（{reason}）。"],

  "delivery.title": ["Delivery", "投递"],
  "delivery.stream": ["Stream", "队列流"],
  "delivery.length": ["Queue", "队列长度"],
  "delivery.pending": ["Pending", "处理中"],
  "delivery.dlq": ["DLQ", "死信"],
  "delivery.refresh": ["Refresh", "刷新"],
  "delivery.dlqStream": ["Dead-letter queue of", "死信队列"],
  "delivery.showDlq": ["Show entries", "显示条目"],
  "delivery.replaySelected": ["Replay selected", "重放所选"],
  "delivery.replayAll": ["Replay all", "全部重放"],
  "delivery.unknown": ["Sends with an unknown outcome (crash between send and receipt): {n}",
    "结果未知的发送（发送与回执之间崩溃）：{n}"],
  "delivery.failed": ["Delivery figures could not be read ({reason}).",
    "无法读取投递数据（{reason}）。"],
  "delivery.dlqEmpty": ["The dead-letter queue is empty.", "死信队列为空。"],
  "delivery.dlqEntry": ["{id} · {failure_class} · {reason} · attempts {attempts} · {failed_at}",
    "{id} · {failure_class} · {reason} · 尝试 {attempts} 次 · {failed_at}"],
  "delivery.replayed": ["Replayed {n} entries.", "已重放 {n} 条。"],
  "delivery.dlqFailed": ["The dead-letter queue could not be read or replayed ({reason}).",
    "无法读取或重放死信队列（{reason}）。"],

  "gap.title": ["Gap audit", "漏信审计"],
  "gap.intro": ["Checks that every new mail of the audit window got its notification, and queues the missed ones again (each at most once).",
    "检查审计窗口内的每封新邮件是否都已通知，并将遗漏的邮件重新入队（每封最多一次）。"],
  "gap.run": ["Run now", "立即运行"],
  "gap.running": ["Auditing…", "正在审计…"],
  "gap.never": ["No audit has run yet.", "尚未运行过审计。"],
  "gap.last": ["Last audit {time} UTC ({trigger}): {checked} checked, {missing} missing, {enqueued} queued again.",
    "最近一次审计 {time} UTC（{trigger}）：检查 {checked} 封，遗漏 {missing} 封，重新入队 {enqueued} 封。"],
  "gap.incomplete": ["The window held more mail than one audit covers; later runs continue.",
    "窗口内的邮件超出单次审计的上限；之后的运行会继续。"],
  "gap.lastFailed": ["Last audit {time} UTC ({trigger}) failed: {error}.",
    "最近一次审计 {time} UTC（{trigger}）失败：{error}。"],
  "gap.done": ["Audit done: {checked} checked, {missing} missing, {enqueued} queued again.",
    "审计完成：检查 {checked} 封，遗漏 {missing} 封，重新入队 {enqueued} 封。"],
  "gap.failed": ["The audit could not run ({reason}).", "审计无法运行（{reason}）。"],
  "gap.loadFailed": ["The last audit could not be read ({reason}).",
    "无法读取最近一次审计（{reason}）。"],
  "gap.trigger.schedule": ["scheduled", "定时"],
  "gap.trigger.api": ["on request", "按请求"],
  "gap.trigger.cli": ["command line", "命令行"],

  "logs.title": ["Logs", "日志"],
  "logs.refresh": ["Refresh logs", "刷新日志"],
  "logs.sendTitle": ["Send log", "发送日志"],
  "logs.auditTitle": ["Audit log", "审计日志"],
  "logs.outcome": ["Outcome", "结果"],
  "logs.outcomeAll": ["All outcomes", "全部结果"],
  "logs.outcomeDelivered": ["Delivered", "已送达"],
  "logs.outcomeRetry": ["Retry", "重试"],
  "logs.outcomeDeadLetter": ["Dead letter", "死信"],
  "logs.outcomeSkipped": ["Skipped", "已跳过"],
  "logs.outcomeUnknown": ["Unknown", "未知"],
  "logs.time": ["Time (UTC)", "时间（UTC）"],
  "logs.stream": ["Stream", "队列流"],
  "logs.kind": ["Kind", "类型"],
  "logs.chat": ["Chat", "会话"],
  "logs.failureClass": ["Failure class", "失败类别"],
  "logs.latency": ["Latency", "耗时"],
  "logs.latencyMs": ["{n} ms", "{n} 毫秒"],
  "logs.action": ["Action", "操作"],
  "logs.fields": ["Fields", "字段"],
  "logs.older": ["Load older", "加载更早的记录"],
  "logs.empty": ["No records.", "没有记录。"],
  "logs.failed": ["The log could not be read ({reason}).", "无法读取日志（{reason}）。"],

  "common.notAvailable": ["{feature}: not available on this server version.",
    "{feature}：此服务器版本不提供该功能。"],
  "common.network": ["network error", "网络错误"],

  "privacy.note": ["Secrets are sent only to this service and never shown again. Nothing is kept in cookies or browser storage; leaving the page clears the session and the form.",
    "密钥只发送给本服务，且不会再次显示。不使用 Cookie 或浏览器存储；离开页面即清除会话和表单。"],
};

// The two tables by language, as the page exposes them to its tests (`window.__mw.messages`).
export const MESSAGES = { en: {}, zh: {} };
for (const [key, [en, zh]] of Object.entries(TEXTS)) {
  MESSAGES.en[key] = en;
  MESSAGES.zh[key] = zh;
}

export const lang = (function () {
  const first = (navigator.languages && navigator.languages[0]) || navigator.language || "en";
  return first.toLowerCase().startsWith("zh") ? "zh" : "en";
})();

// Keys asked for but absent from the table (a test expects none).
export const missing = [];

export function t(key, vars) {
  let text = MESSAGES[lang][key];
  if (text === undefined) {
    missing.push(key);
    text = MESSAGES.en[key] !== undefined ? MESSAGES.en[key] : key;
  }
  if (vars) {
    text = text.replace(/\{(\w+)\}/g, function (whole, name) {
      return Object.prototype.hasOwnProperty.call(vars, name) ? String(vars[name]) : whole;
    });
  }
  return text;
}

// Whether the table has `key`: for keys built from a server value (a reason, a trigger).
export function known(key) {
  return MESSAGES.en[key] !== undefined;
}

export function applyI18n() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  document.querySelectorAll("[data-i18n]").forEach(function (el) {
    el.textContent = t(el.dataset.i18n);
  });
  document.querySelectorAll("[data-i18n-placeholder]").forEach(function (el) {
    el.placeholder = t(el.dataset.i18nPlaceholder);
  });
  document.querySelectorAll("[data-i18n-aria]").forEach(function (el) {
    el.setAttribute("aria-label", t(el.dataset.i18nAria));
  });
}
