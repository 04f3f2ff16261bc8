"use strict";
// The admin page: status, sign-in, business configuration, service switches, callbacks,
// delivery and logs. Vanilla JS under a strict CSP: no inline code, no eval, no storage, no
// cookies.
(function () {
  // ---- messages (identical key sets; a test compares them) ---------------------------------
  const MESSAGES = {
    en: {
      "app.tagline": "Mail notifications, search and summaries in Telegram",
      "setup.title": "Service status",
      "setup.checking": "Checking…",
      "setup.ready": "The service is configured. Sign in to manage it.",
      "setup.setupMode": "Setup mode: the service cannot start until these variables are set.",
      "setup.unknown": "The status could not be read. Check that the service is running, then re-check.",
      "setup.missingIntro": "Set these environment variables, then restart the service:",
      "setup.version": "Version",
      "setup.recheck": "Re-check",
      "auth.title": "Create admin session",
      "auth.intro": "Enter the CONFIG_ENCRYPTION_KEY of this service. The session lives only in this page's memory.",
      "auth.keyLabel": "Admin credential",
      "auth.keyPlaceholder": "64 hex characters",
      "auth.submit": "Sign in",
      "auth.wrong": "Wrong credential. Check CONFIG_ENCRYPTION_KEY and try again.",
      "auth.expired": "Your admin session ended (it expired or another sign-in replaced it). Sign in again.",
      "auth.signedOut": "Signed out. The session was revoked and the page cleared.",
      "auth.signedOutLocal": "Signed out locally; the server could not confirm the revocation.",
      "session.title": "Admin session",
      "session.expires": "Admin session expires in about {n} minutes.",
      "session.signOut": "Sign out and clear session",
      "service.title": "Service",
      "service.enabled": "Enable business processing",
      "service.on": "on",
      "service.off": "off",
      "service.enabledSaved": "Business processing is now {state}.",
      "service.enabledFailed": "The switch could not be changed ({reason}); it was put back.",
      "runtime.title": "Runtime parameters",
      "runtime.jmapTimeout": "JMAP timeout (ms)",
      "runtime.telegramTimeout": "Telegram timeout (ms)",
      "runtime.llmTimeout": "AI timeout (ms)",
      "runtime.maxRetries": "Max retries",
      "runtime.reload": "Reload runtime parameters",
      "runtime.defaults": "Restore defaults",
      "runtime.save": "Save runtime parameters",
      "runtime.loaded": "Runtime parameters loaded.",
      "runtime.defaultsShown": "Defaults filled in; save to apply them.",
      "runtime.saved": "Runtime parameters saved.",
      "runtime.outOfRange": "Timeouts must be 100–300000 ms and retries 0–5.",
      "runtime.failed": "Runtime parameters could not be read or saved ({reason}).",
      "biz.title": "Business configuration",
      "biz.notConfigured": "Nothing saved yet: fill in every field, then save the first configuration.",
      "biz.configured": "Saved configuration, revision {n}. Secret fields stay blank; type only what you want to change.",
      "biz.sectionJmap": "01 · Mailbox (JMAP)",
      "biz.sectionTelegram": "02 · Telegram and access",
      "biz.sectionLlm": "03 · AI summaries",
      "biz.sectionDisplay": "04 · Notification display",
      "biz.save": "Save configuration",
      "biz.test": "Test connection",
      "biz.reload": "Reload from server",
      "biz.nothing": "Nothing to submit: no field changed.",
      "biz.saved": "Saved and hot-reloaded. Revision {n}.",
      "biz.savedNotApplied": "Saved (revision {n}), but not hot-reloaded: the previous runtime keeps serving.",
      "biz.conflict": "Someone else changed the configuration meanwhile. The form was reloaded with the current values; make your change again.",
      "biz.rejected": "The server rejected the configuration: {reason}",
      "biz.rejectedGeneric": "The server rejected the configuration (unknown field or wrong type).",
      "biz.badRequest": "The request was not valid JSON.",
      "biz.unavailable": "The service is unavailable right now (Redis or storage). Try again in 30 s.",
      "biz.failed": "Request failed ({reason}).",
      "biz.loadFailed": "The configuration could not be read ({reason}).",
      "biz.required": "Required: {field}.",
      "biz.badInt": "{field} must be a whole number (64-bit).",
      "biz.badList": "{field}: every entry must be a 64-bit whole number, without duplicates.",
      "biz.llmRequired": "With AI enabled, the API base URL, model and API key are required.",
      "biz.tooShort": "{field} must be at least {n} characters (use Generate).",
      "biz.badSecretChars": "{field} may contain only A-Z, a-z, 0-9, _ and -.",
      "biz.generate": "Generate",
      "biz.generateFor": "Generate a random {field}",
      "biz.warning": "{component} · {step}: {detail}",
      "biz.testing": "Testing…",
      "biz.testOk": "Validation passed.",
      "biz.testInvalid": "Validation failed:",
      "biz.componentOk": "{component}: reachable.",
      "biz.componentFailed": "{component}: failed.",
      "biz.componentSkipped": "{component}: not probed (needs both AI switches on).",
      "field.jmap_session_url": "Session URL",
      "field.jmap_username": "Username",
      "field.jmap_password": "App password",
      "field.account_id": "Account id (optional)",
      "field.account_idPlaceholder": "blank = primary mail account",
      "field.notify_mailbox_roles": "Notify for mailbox roles",
      "field.reconcile_interval_s": "Reconcile interval (s, 0 = external cron)",
      "field.degraded_reconcile_interval_s": "Reconcile interval while push is degraded (s)",
      "field.audit_interval_s": "Gap audit interval (s, 0 = on demand only)",
      "field.audit_window_s": "Gap audit window (s)",
      "field.bot_token": "Bot token",
      "field.telegram_chat_id": "Notification chat id",
      "field.chat_allowlist": "Allowed chat ids",
      "field.chat_allowlistPlaceholder": "ids separated by spaces or commas",
      "field.telegram_webhook_secret": "Webhook secret",
      "field.reconcile_token": "Reconcile token",
      "field.worker_token": "Worker token",
      "field.telegram_api_base_url": "Bot API base URL",
      "field.delivery_policy": "Delivery policy",
      "field.policyAtLeastOnce": "At least once (a duplicate is possible)",
      "field.policyAtMostOnce": "At most once (a loss is possible)",
      "field.llm_enabled": "Enable AI summaries",
      "field.llm_allow_net": "Allow network calls to the AI service",
      "field.llm_base_url": "API base URL",
      "field.llm_model": "Model",
      "field.llm_api_key": "API key",
      "field.timezone": "Time zone",
      "field.timezoneFilter": "Search time zones",
      "field.timezoneFilterPlaceholder": "e.g. Berlin",
      "marker.set": "• Set. Leave empty to keep the saved value.",
      "marker.notSet": "• Not set. Enter a value.",
      "marker.generated": "• Generated and shown here until you save: copy it now for the gateway or cron.",
      "callbacks.title": "External callbacks",
      "callbacks.intro": "The public https origin where Telegram and the mail server reach this service (no path).",
      "callbacks.origin": "Public origin",
      "callbacks.register": "Register callbacks",
      "callbacks.disablePush": "Disable push",
      "callbacks.hint": "Save the configuration first; registration uses the saved values.",
      "callbacks.badOrigin": "Enter an https origin without path, query or credentials, e.g. https://bot.example.com",
      "callbacks.tgOk": "Telegram webhook: registered ({url}).",
      "callbacks.tgFailed": "Telegram webhook: failed ({reason}).",
      "callbacks.pushOk": "Mail push: registered (subscription {id}).",
      "callbacks.pushFailed": "Mail push: failed ({reason}).",
      "callbacks.pushBusy": "Mail push: another registration is in progress; try again shortly.",
      "callbacks.disabled": "Mail push: disabled for this origin.",
      "callbacks.noSubscription": "Mail push: no subscription is registered for this origin.",
      "callbacks.disableFailed": "Mail push: could not be disabled ({reason}).",
      "callbacks.telegram": "Telegram webhook",
      "callbacks.push": "Mail push",
      "callbacks.pushStatusTitle": "Mail push status",
      "callbacks.pushState": "State",
      "callbacks.lastStateChange": "Last StateChange received",
      "callbacks.expires": "Subscription expires",
      "callbacks.pushRefresh": "Refresh push status",
      "callbacks.stateOk": "working",
      "callbacks.stateOkUnverified": "working (awaiting the mail server's verification)",
      "callbacks.stateOff": "off: no push registration; new mail waits for reconcile",
      "callbacks.stateDegraded": "degraded: {reason}. New mail still arrives by reconcile meanwhile.",
      "callbacks.reason.expired": "the subscription expired",
      "callbacks.reason.not_verified": "the subscription was not verified in time (check that the callback URL reaches this service)",
      "callbacks.reason.check_failed": "the mail server could not be checked",
      "callbacks.reason.renewal_failed": "the subscription could not be extended",
      "callbacks.reason.recreate_failed": "the subscription was lost and could not be re-created",
      "callbacks.reason.url_unknown": "the subscription was lost; register callbacks again to re-create it",
      "callbacks.never": "never",
      "callbacks.ago": "{age} ago",
      "callbacks.ageS": "{n} s",
      "callbacks.ageMin": "{n} min",
      "callbacks.ageH": "{n} h",
      "callbacks.ageD": "{n} d",
      "callbacks.noExpiry": "no expiry",
      "callbacks.expiresAt": "{time} UTC (in {left})",
      "callbacks.expiredAt": "{time} UTC (passed)",
      "callbacks.statusFailed": "The push status could not be read ({reason}).",
      "delivery.title": "Delivery",
      "delivery.stream": "Stream",
      "delivery.length": "Queue",
      "delivery.pending": "Pending",
      "delivery.dlq": "DLQ",
      "delivery.refresh": "Refresh",
      "delivery.dlqStream": "Dead-letter queue of",
      "delivery.showDlq": "Show entries",
      "delivery.replaySelected": "Replay selected",
      "delivery.replayAll": "Replay all",
      "delivery.unknown": "Sends with an unknown outcome (crash between send and receipt): {n}",
      "delivery.failed": "Delivery figures could not be read ({reason}).",
      "delivery.dlqEmpty": "The dead-letter queue is empty.",
      "delivery.dlqEntry": "{id} · {failure_class} · {reason} · attempts {attempts} · {failed_at}",
      "delivery.replayed": "Replayed {n} entries.",
      "delivery.dlqFailed": "The dead-letter queue could not be read or replayed ({reason}).",
      "gap.title": "Gap audit",
      "gap.intro": "Checks that every new mail of the audit window got its notification, and queues the missed ones again (each at most once).",
      "gap.run": "Run now",
      "gap.running": "Auditing…",
      "gap.never": "No audit has run yet.",
      "gap.last": "Last audit {time} UTC ({trigger}): {checked} checked, {missing} missing, {enqueued} queued again.",
      "gap.incomplete": "The window held more mail than one audit covers; later runs continue.",
      "gap.lastFailed": "Last audit {time} UTC ({trigger}) failed: {error}.",
      "gap.done": "Audit done: {checked} checked, {missing} missing, {enqueued} queued again.",
      "gap.failed": "The audit could not run ({reason}).",
      "gap.loadFailed": "The last audit could not be read ({reason}).",
      "gap.trigger.schedule": "scheduled",
      "gap.trigger.api": "on request",
      "gap.trigger.cli": "command line",
      "logs.title": "Logs",
      "logs.refresh": "Refresh logs",
      "logs.sendTitle": "Send log",
      "logs.auditTitle": "Audit log",
      "logs.outcome": "Outcome",
      "logs.outcomeAll": "All outcomes",
      "logs.outcomeDelivered": "Delivered",
      "logs.outcomeRetry": "Retry",
      "logs.outcomeDeadLetter": "Dead letter",
      "logs.outcomeSkipped": "Skipped",
      "logs.outcomeUnknown": "Unknown",
      "logs.time": "Time (UTC)",
      "logs.stream": "Stream",
      "logs.kind": "Kind",
      "logs.chat": "Chat",
      "logs.failureClass": "Failure class",
      "logs.latency": "Latency",
      "logs.latencyMs": "{n} ms",
      "logs.action": "Action",
      "logs.fields": "Fields",
      "logs.older": "Load older",
      "logs.empty": "No records.",
      "logs.failed": "The log could not be read ({reason}).",
      "common.notAvailable": "{feature}: not available on this server version.",
      "common.network": "network error",
      "privacy.note": "Secrets are sent only to this service and never shown again. Nothing is kept in cookies or browser storage; leaving the page clears the session and the form.",
    },
    zh: {
      "app.tagline": "在 Telegram 中接收邮件通知、搜索和摘要",
      "setup.title": "服务状态",
      "setup.checking": "正在检查…",
      "setup.ready": "服务已配置。请登录后进行管理。",
      "setup.setupMode": "设置模式：必须先设置以下变量，服务才能启动。",
      "setup.unknown": "无法读取状态。请确认服务正在运行，然后重新检查。",
      "setup.missingIntro": "请设置以下环境变量，然后重启服务：",
      "setup.version": "版本",
      "setup.recheck": "重新检查",
      "auth.title": "创建管理会话",
      "auth.intro": "请输入本服务的 CONFIG_ENCRYPTION_KEY。会话只保存在本页面的内存中。",
      "auth.keyLabel": "管理凭据",
      "auth.keyPlaceholder": "64 位十六进制字符",
      "auth.submit": "登录",
      "auth.wrong": "凭据错误。请检查 CONFIG_ENCRYPTION_KEY 后重试。",
      "auth.expired": "管理会话已结束（已过期或被新的登录取代）。请重新登录。",
      "auth.signedOut": "已退出。会话已撤销，页面已清空。",
      "auth.signedOutLocal": "已在本地退出；服务器未能确认撤销。",
      "session.title": "管理会话",
      "session.expires": "管理会话约 {n} 分钟后过期。",
      "session.signOut": "退出并清除会话",
      "service.title": "服务",
      "service.enabled": "启用业务处理",
      "service.on": "开",
      "service.off": "关",
      "service.enabledSaved": "业务处理现在为「{state}」。",
      "service.enabledFailed": "开关未能修改（{reason}），已恢复原状。",
      "runtime.title": "运行参数",
      "runtime.jmapTimeout": "JMAP 超时（毫秒）",
      "runtime.telegramTimeout": "Telegram 超时（毫秒）",
      "runtime.llmTimeout": "AI 超时（毫秒）",
      "runtime.maxRetries": "最大重试次数",
      "runtime.reload": "重新读取运行参数",
      "runtime.defaults": "恢复默认值",
      "runtime.save": "保存运行参数",
      "runtime.loaded": "运行参数已读取。",
      "runtime.defaultsShown": "已填入默认值；保存后生效。",
      "runtime.saved": "运行参数已保存。",
      "runtime.outOfRange": "超时须为 100–300000 毫秒，重试次数须为 0–5。",
      "runtime.failed": "无法读取或保存运行参数（{reason}）。",
      "biz.title": "业务配置",
      "biz.notConfigured": "尚未保存任何配置：请填写所有字段，然后保存首个配置。",
      "biz.configured": "已保存的配置，修订号 {n}。密钥字段保持为空；只填写需要修改的内容。",
      "biz.sectionJmap": "01 · 邮箱（JMAP）",
      "biz.sectionTelegram": "02 · Telegram 与访问控制",
      "biz.sectionLlm": "03 · AI 摘要",
      "biz.sectionDisplay": "04 · 通知显示",
      "biz.save": "保存配置",
      "biz.test": "测试连接",
      "biz.reload": "从服务器重新读取",
      "biz.nothing": "没有可提交的内容：没有字段被修改。",
      "biz.saved": "已保存并热加载。修订号 {n}。",
      "biz.savedNotApplied": "已保存（修订号 {n}），但未热加载：原运行时继续服务。",
      "biz.conflict": "其他人同时修改了配置。表单已按当前值重新载入；请重新进行修改。",
      "biz.rejected": "服务器拒绝了该配置：{reason}",
      "biz.rejectedGeneric": "服务器拒绝了该配置（未知字段或类型错误）。",
      "biz.badRequest": "请求不是有效的 JSON。",
      "biz.unavailable": "服务暂时不可用（Redis 或存储）。请 30 秒后重试。",
      "biz.failed": "请求失败（{reason}）。",
      "biz.loadFailed": "无法读取配置（{reason}）。",
      "biz.required": "必填：{field}。",
      "biz.badInt": "{field} 必须是整数（64 位）。",
      "biz.badList": "{field}：每一项都必须是 64 位整数，且不能重复。",
      "biz.llmRequired": "启用 AI 后，API 地址、模型和 API 密钥为必填项。",
      "biz.tooShort": "{field} 至少需要 {n} 个字符（可点击“生成”）。",
      "biz.badSecretChars": "{field} 只能包含 A-Z、a-z、0-9、_ 和 -。",
      "biz.generate": "生成",
      "biz.generateFor": "随机生成{field}",
      "biz.warning": "{component} · {step}：{detail}",
      "biz.testing": "正在测试…",
      "biz.testOk": "校验通过。",
      "biz.testInvalid": "校验失败：",
      "biz.componentOk": "{component}：可以连接。",
      "biz.componentFailed": "{component}：失败。",
      "biz.componentSkipped": "{component}：未探测（需要同时打开两个 AI 开关）。",
      "field.jmap_session_url": "Session URL",
      "field.jmap_username": "用户名",
      "field.jmap_password": "应用密码",
      "field.account_id": "账户 ID（可选）",
      "field.account_idPlaceholder": "留空 = 主邮件账户",
      "field.notify_mailbox_roles": "通知的邮箱角色",
      "field.reconcile_interval_s": "对账间隔（秒，0 = 外部定时任务）",
      "field.degraded_reconcile_interval_s": "推送降级时的对账间隔（秒）",
      "field.audit_interval_s": "漏信审计间隔（秒，0 = 仅手动）",
      "field.audit_window_s": "漏信审计窗口（秒）",
      "field.bot_token": "Bot 令牌",
      "field.telegram_chat_id": "通知会话 ID",
      "field.chat_allowlist": "允许的会话 ID",
      "field.chat_allowlistPlaceholder": "用空格或逗号分隔的 ID",
      "field.telegram_webhook_secret": "Webhook 密钥",
      "field.reconcile_token": "对账令牌",
      "field.worker_token": "Worker 令牌",
      "field.telegram_api_base_url": "Bot API 地址",
      "field.delivery_policy": "投递策略",
      "field.policyAtLeastOnce": "至少一次（可能重复）",
      "field.policyAtMostOnce": "至多一次（可能丢失）",
      "field.llm_enabled": "启用 AI 摘要",
      "field.llm_allow_net": "允许访问 AI 服务的网络",
      "field.llm_base_url": "API 地址",
      "field.llm_model": "模型",
      "field.llm_api_key": "API 密钥",
      "field.timezone": "时区",
      "field.timezoneFilter": "搜索时区",
      "field.timezoneFilterPlaceholder": "例如 Berlin",
      "marker.set": "• 已设置。留空则保留已保存的值。",
      "marker.notSet": "• 未设置。请输入一个值。",
      "marker.generated": "• 已生成，保存前会显示在此处：请立即复制给网关或定时任务使用。",
      "callbacks.title": "外部回调",
      "callbacks.intro": "Telegram 和邮件服务器访问本服务所用的公网 https 源地址（不含路径）。",
      "callbacks.origin": "公网源地址",
      "callbacks.register": "注册回调",
      "callbacks.disablePush": "停用推送",
      "callbacks.hint": "请先保存配置；注册使用已保存的值。",
      "callbacks.badOrigin": "请输入不含路径、查询或凭据的 https 源地址，例如 https://bot.example.com",
      "callbacks.tgOk": "Telegram webhook：已注册（{url}）。",
      "callbacks.tgFailed": "Telegram webhook：失败（{reason}）。",
      "callbacks.pushOk": "邮件推送：已注册（订阅 {id}）。",
      "callbacks.pushFailed": "邮件推送：失败（{reason}）。",
      "callbacks.pushBusy": "邮件推送：另一个注册正在进行；请稍后重试。",
      "callbacks.disabled": "邮件推送：已为此源地址停用。",
      "callbacks.noSubscription": "邮件推送：此源地址没有已注册的订阅。",
      "callbacks.disableFailed": "邮件推送：无法停用（{reason}）。",
      "callbacks.telegram": "Telegram webhook",
      "callbacks.push": "邮件推送",
      "callbacks.pushStatusTitle": "邮件推送状态",
      "callbacks.pushState": "状态",
      "callbacks.lastStateChange": "最近一次收到 StateChange",
      "callbacks.expires": "订阅到期时间",
      "callbacks.pushRefresh": "刷新推送状态",
      "callbacks.stateOk": "正常",
      "callbacks.stateOkUnverified": "正常（等待邮件服务器验证）",
      "callbacks.stateOff": "关闭：没有推送注册；新邮件等待对账",
      "callbacks.stateDegraded": "降级：{reason}。期间新邮件仍通过对账到达。",
      "callbacks.reason.expired": "订阅已过期",
      "callbacks.reason.not_verified": "订阅未能及时完成验证（请检查回调地址能否访问本服务）",
      "callbacks.reason.check_failed": "无法检查邮件服务器",
      "callbacks.reason.renewal_failed": "订阅无法续期",
      "callbacks.reason.recreate_failed": "订阅已丢失且无法重新创建",
      "callbacks.reason.url_unknown": "订阅已丢失；请重新注册回调以重新创建",
      "callbacks.never": "从未",
      "callbacks.ago": "{age}前",
      "callbacks.ageS": "{n} 秒",
      "callbacks.ageMin": "{n} 分钟",
      "callbacks.ageH": "{n} 小时",
      "callbacks.ageD": "{n} 天",
      "callbacks.noExpiry": "无到期时间",
      "callbacks.expiresAt": "{time} UTC（还剩 {left}）",
      "callbacks.expiredAt": "{time} UTC（已过期）",
      "callbacks.statusFailed": "无法读取推送状态（{reason}）。",
      "delivery.title": "投递",
      "delivery.stream": "队列流",
      "delivery.length": "队列长度",
      "delivery.pending": "处理中",
      "delivery.dlq": "死信",
      "delivery.refresh": "刷新",
      "delivery.dlqStream": "死信队列",
      "delivery.showDlq": "显示条目",
      "delivery.replaySelected": "重放所选",
      "delivery.replayAll": "全部重放",
      "delivery.unknown": "结果未知的发送（发送与回执之间崩溃）：{n}",
      "delivery.failed": "无法读取投递数据（{reason}）。",
      "delivery.dlqEmpty": "死信队列为空。",
      "delivery.dlqEntry": "{id} · {failure_class} · {reason} · 尝试 {attempts} 次 · {failed_at}",
      "delivery.replayed": "已重放 {n} 条。",
      "delivery.dlqFailed": "无法读取或重放死信队列（{reason}）。",
      "gap.title": "漏信审计",
      "gap.intro": "检查审计窗口内的每封新邮件是否都已通知，并将遗漏的邮件重新入队（每封最多一次）。",
      "gap.run": "立即运行",
      "gap.running": "正在审计…",
      "gap.never": "尚未运行过审计。",
      "gap.last": "最近一次审计 {time} UTC（{trigger}）：检查 {checked} 封，遗漏 {missing} 封，重新入队 {enqueued} 封。",
      "gap.incomplete": "窗口内的邮件超出单次审计的上限；之后的运行会继续。",
      "gap.lastFailed": "最近一次审计 {time} UTC（{trigger}）失败：{error}。",
      "gap.done": "审计完成：检查 {checked} 封，遗漏 {missing} 封，重新入队 {enqueued} 封。",
      "gap.failed": "审计无法运行（{reason}）。",
      "gap.loadFailed": "无法读取最近一次审计（{reason}）。",
      "gap.trigger.schedule": "定时",
      "gap.trigger.api": "按请求",
      "gap.trigger.cli": "命令行",
      "logs.title": "日志",
      "logs.refresh": "刷新日志",
      "logs.sendTitle": "发送日志",
      "logs.auditTitle": "审计日志",
      "logs.outcome": "结果",
      "logs.outcomeAll": "全部结果",
      "logs.outcomeDelivered": "已送达",
      "logs.outcomeRetry": "重试",
      "logs.outcomeDeadLetter": "死信",
      "logs.outcomeSkipped": "已跳过",
      "logs.outcomeUnknown": "未知",
      "logs.time": "时间（UTC）",
      "logs.stream": "队列流",
      "logs.kind": "类型",
      "logs.chat": "会话",
      "logs.failureClass": "失败类别",
      "logs.latency": "耗时",
      "logs.latencyMs": "{n} 毫秒",
      "logs.action": "操作",
      "logs.fields": "字段",
      "logs.older": "加载更早的记录",
      "logs.empty": "没有记录。",
      "logs.failed": "无法读取日志（{reason}）。",
      "common.notAvailable": "{feature}：此服务器版本不提供该功能。",
      "common.network": "网络错误",
      "privacy.note": "密钥只发送给本服务，且不会再次显示。不使用 Cookie 或浏览器存储；离开页面即清除会话和表单。",
    },
  };

  const lang = (function () {
    const first = (navigator.languages && navigator.languages[0]) || navigator.language || "en";
    return first.toLowerCase().startsWith("zh") ? "zh" : "en";
  })();
  const missing = [];

  function t(key, vars) {
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

  function applyI18n() {
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

  // ---- helpers -----------------------------------------------------------------------------
  const $ = function (id) { return document.getElementById(id); };

  function say(id, text, kind) {
    const el = $(id);
    el.textContent = text || "";
    el.classList.toggle("error", kind === "error");
    el.classList.toggle("ok", kind === "ok");
  }

  function fillList(id, lines) {
    const list = $(id);
    list.replaceChildren();
    lines.forEach(function (line) {
      const li = document.createElement("li");
      li.textContent = line;
      list.appendChild(li);
    });
  }

  // Integers are kept as strings and written as bare JSON numbers (64-bit ids exceed 2^53).
  const INT_MARK = "\u0000int:";
  function jsonBody(obj) {
    return JSON.stringify(obj, function (_key, value) {
      return typeof value === "bigint" ? INT_MARK + value.toString() : value;
    }).replace(/"\\u0000int:(-?\d+)"/g, "$1");
  }

  const I64_MIN = -(2n ** 63n);
  const I64_MAX = 2n ** 63n - 1n;
  function parseI64(raw) {
    const text = String(raw).trim();
    if (!/^-?\d+$/.test(text)) return null;
    const value = BigInt(text);
    return value < I64_MIN || value > I64_MAX ? null : value;
  }

  // ---- session and fetch ---------------------------------------------------------------------
  const session = { token: null, expiresAt: 0, timer: null };
  const FETCH = {
    credentials: "omit",
    cache: "no-store",
    redirect: "error",
    referrerPolicy: "no-referrer",
  };

  class ApiFailure extends Error {
    constructor(status, code, configError) {
      super(code || (status ? "HTTP " + status : t("common.network")));
      this.status = status;
      this.code = code;
      this.configError = configError;
    }
  }

  // `auth`: a bearer token, or true for the session. Answers the parsed body (null for 204);
  // a 401 on a session call ends the session.
  async function api(method, path, body, auth) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const token = auth === true ? session.token : auth;
    if (token) headers.Authorization = "Bearer " + token;
    let response;
    try {
      response = await fetch(path, Object.assign({}, FETCH, {
        method: method,
        headers: headers,
        body: body === undefined ? undefined : jsonBody(body),
      }));
    } catch (err) {
      throw new ApiFailure(0, null, null);
    }
    let data = null;
    if (response.status !== 204) {
      try { data = await response.json(); } catch (err) { data = null; }
    }
    if (!response.ok) {
      const code = data && typeof data.error === "string" ? data.error : null;
      const failure = new ApiFailure(response.status, code, response.headers.get("x-config-error"));
      if (response.status === 401 && auth === true && session.token) {
        endSession("auth.expired");
      }
      throw failure;
    }
    return data;
  }

  function reasonOf(err) {
    if (!(err instanceof ApiFailure)) return String(err && err.message ? err.message : err);
    if (err.status === 0) return t("common.network");
    return err.code ? err.code + ", " + err.status : "HTTP " + err.status;
  }

  function isMissingRoute(err) {
    return err instanceof ApiFailure && err.status === 404 && (err.code === "not_found" || !err.code);
  }

  // ---- 1. setup card -------------------------------------------------------------------------
  async function loadStatus() {
    say("setup-summary", t("setup.checking"));
    $("setup-missing-box").hidden = true;
    try {
      const status = await api("GET", "/api/status");
      $("setup-version").textContent = status.version || "—";
      if (status.ready === true) {
        say("setup-summary", t("setup.ready"), "ok");
        if (!session.token) $("auth-card").hidden = false;
      } else if (status.mode === "configuration-setup") {
        say("setup-summary", t("setup.setupMode"), "error");
        fillList("setup-missing", (status.missing || []).filter(function (name) {
          return name === "REDIS_URL" || name === "CONFIG_ENCRYPTION_KEY";
        }));
        $("setup-missing-box").hidden = false;
        $("auth-card").hidden = true;
      } else {
        say("setup-summary", t("setup.unknown"), "error");
        $("auth-card").hidden = true;
      }
    } catch (err) {
      say("setup-summary", t("setup.unknown"), "error");
      $("auth-card").hidden = true;
    }
  }

  // ---- 2. sign-in / sign-out -------------------------------------------------------------------
  async function signIn(event) {
    event.preventDefault();
    const key = $("auth-key").value.trim();
    if (!key) return;
    say("auth-msg", "");
    $("auth-submit").disabled = true;
    try {
      const data = await api("POST", "/api/admin/session", undefined, key);
      $("auth-key").value = "";
      startSession(data.session, data.expires_in);
    } catch (err) {
      say("auth-msg", err.status === 401 ? t("auth.wrong") : t("biz.failed", { reason: reasonOf(err) }), "error");
    } finally {
      $("auth-submit").disabled = false;
    }
  }

  function startSession(token, expiresIn) {
    const seconds = Math.min(Number(expiresIn) > 0 ? Number(expiresIn) : 1800, 1800);
    session.token = token;
    session.expiresAt = Date.now() + seconds * 1000;
    clearInterval(session.timer);
    session.timer = setInterval(tick, 1000);
    tick();
    $("auth-card").hidden = true;
    $("admin").hidden = false;
    loadAll();
  }

  function tick() {
    const left = session.expiresAt - Date.now();
    if (left <= 0) {
      endSession("auth.expired");
      return;
    }
    say("session-expiry", t("session.expires", { n: Math.max(1, Math.ceil(left / 60000)) }));
  }

  // Clears every secret and value from the page (sign-out, expiry, 401, pagehide).
  function clearPage() {
    session.token = null;
    session.expiresAt = 0;
    clearInterval(session.timer);
    session.timer = null;
    document.querySelectorAll("input, textarea").forEach(function (el) {
      if (el.type === "checkbox") el.checked = false;
      else el.value = "";
    });
    TOKEN_FIELDS.forEach(function (name) { $("f-" + name).type = "password"; });
    state.configured = false;
    state.revision = 0;
    state.baseline = null;
    ["biz-msg", "biz-error", "preflight-result", "runtime-msg", "enabled-msg", "delivery-msg",
      "dlq-msg", "biz-state", "session-expiry"].forEach(function (id) { say(id, ""); });
    ["biz-warnings", "preflight-issues", "cb-results", "dlq-list", "delivery-rows"].forEach(
      function (id) { $(id).replaceChildren(); });
    resetPushStatus();
    resetLog("send");
    resetLog("audit");
    resetGapAudit();
    $("send-outcome").value = "";
    $("admin").hidden = true;
  }

  function endSession(messageKey) {
    clearPage();
    $("auth-card").hidden = false;
    say("auth-msg", t(messageKey), messageKey === "auth.signedOut" ? "ok" : "error");
    $("auth-key").focus();
  }

  async function signOut() {
    const token = session.token;
    let revoked = true;
    try {
      await api("POST", "/api/admin/session/revoke", undefined, token);
    } catch (err) {
      revoked = false;
    }
    endSession(revoked ? "auth.signedOut" : "auth.signedOutLocal");
  }

  function loadAll() {
    loadEnabled();
    loadRuntime();
    loadBusiness();
    loadPushStatus();
    loadDelivery();
    loadGapAudit();
    loadLogs();
  }

  // ---- 5. service card -------------------------------------------------------------------------
  function showEnabled(on) {
    $("enabled").checked = on;
    $("enabled-state").textContent = t(on ? "service.on" : "service.off");
  }

  async function loadEnabled() {
    try {
      const data = await api("GET", "/api/enabled", undefined, true);
      showEnabled(data.enabled === true);
    } catch (err) {
      say("enabled-msg", t("service.enabledFailed", { reason: reasonOf(err) }), "error");
    }
  }

  async function toggleEnabled() {
    const wanted = $("enabled").checked;
    $("enabled").disabled = true;
    try {
      const data = await api("PUT", "/api/enabled", { enabled: wanted }, true);
      showEnabled(data.enabled === true);
      say("enabled-msg", t("service.enabledSaved", { state: t(data.enabled ? "service.on" : "service.off") }), "ok");
    } catch (err) {
      if (session.token) {
        showEnabled(!wanted);
        say("enabled-msg", t("service.enabledFailed", { reason: reasonOf(err) }), "error");
      }
    } finally {
      $("enabled").disabled = false;
    }
  }

  const RUNTIME_FIELDS = ["jmap_timeout_ms", "telegram_timeout_ms", "llm_timeout_ms", "max_retries"];
  const RUNTIME_DEFAULTS = { jmap_timeout_ms: 15000, telegram_timeout_ms: 10000, llm_timeout_ms: 30000, max_retries: 3 };

  function fillRuntime(values) {
    RUNTIME_FIELDS.forEach(function (name) { $("rt-" + name).value = String(values[name]); });
  }

  async function loadRuntime() {
    $("runtime-save").disabled = true;
    try {
      fillRuntime(await api("GET", "/api/config", undefined, true));
      $("runtime-save").disabled = false;
      say("runtime-msg", t("runtime.loaded"));
    } catch (err) {
      if (session.token) say("runtime-msg", t("runtime.failed", { reason: reasonOf(err) }), "error");
    }
  }

  async function saveRuntime(event) {
    event.preventDefault();
    const body = {};
    for (const name of RUNTIME_FIELDS) {
      const input = $("rt-" + name);
      const value = Number(input.value);
      if (input.value.trim() === "" || !Number.isInteger(value) ||
          value < Number(input.min) || value > Number(input.max)) {
        say("runtime-msg", t("runtime.outOfRange"), "error");
        input.focus();
        return;
      }
      body[name] = value;
    }
    try {
      fillRuntime(await api("PUT", "/api/config", body, true));
      say("runtime-msg", t("runtime.saved"), "ok");
    } catch (err) {
      if (!session.token) return;
      if (err.status >= 500) $("runtime-save").disabled = true;
      say("runtime-msg", err.configError ? t("biz.rejected", { reason: err.configError })
        : t("runtime.failed", { reason: reasonOf(err) }), "error");
    }
  }

  // ---- 3. business configuration -------------------------------------------------------------
  // kind: text | nullable (blank = null) | secret | int | intlist | strlist | bool | choice
  const FIELDS = [
    ["jmap_session_url", "text"], ["jmap_username", "text"], ["jmap_password", "secret"],
    ["account_id", "nullable"], ["notify_mailbox_roles", "strlist"],
    ["reconcile_interval_s", "int"], ["bot_token", "secret"], ["telegram_chat_id", "int"],
    ["chat_allowlist", "intlist"], ["telegram_webhook_secret", "secret"],
    ["reconcile_token", "secret"], ["worker_token", "secret"],
    ["telegram_api_base_url", "text"], ["delivery_policy", "choice"],
    ["llm_enabled", "bool"], ["llm_allow_net", "bool"], ["llm_base_url", "nullable"],
    ["llm_model", "nullable"], ["llm_api_key", "secret"], ["timezone", "choice"],
    ["degraded_reconcile_interval_s", "int"], ["audit_interval_s", "int"],
    ["audit_window_s", "int"],
  ];
  const REQUIRED = ["bot_token", "telegram_chat_id", "chat_allowlist", "telegram_webhook_secret",
    "timezone", "jmap_session_url", "jmap_username", "jmap_password", "llm_enabled",
    "llm_allow_net", "reconcile_token", "worker_token"];
  const state = { configured: false, revision: 0, baseline: null, secretsPresent: {} };

  class FormError extends Error {
    constructor(message, field) { super(message); this.field = field; }
  }

  function label(name) { return t("field." + name); }

  // The form as canonical values: strings for text, BigInt for integers, arrays for lists.
  function readField(name, kind) {
    const el = $("f-" + name);
    if (kind === "bool") return el.checked;
    const raw = el.value;
    switch (kind) {
      case "int": {
        if (raw.trim() === "") return null;
        const value = parseI64(raw);
        if (value === null) throw new FormError(t("biz.badInt", { field: label(name) }), name);
        return value;
      }
      case "intlist": {
        const parts = raw.split(/[\s,]+/).filter(Boolean);
        const values = parts.map(parseI64);
        const unique = new Set(values.map(String));
        if (values.some(function (v) { return v === null; }) || unique.size !== values.length) {
          throw new FormError(t("biz.badList", { field: label(name) }), name);
        }
        return values;
      }
      case "strlist":
        return raw.split(/[\s,]+/).filter(Boolean);
      case "nullable":
        return raw.trim() === "" ? null : raw.trim();
      case "secret":
        return raw;
      default:
        return raw.trim();
    }
  }

  function readForm() {
    const values = {};
    FIELDS.forEach(function (pair) { values[pair[0]] = readField(pair[0], pair[1]); });
    return values;
  }

  function comparable(kind, value) {
    if (kind === "intlist") return value.map(String).sort().join(",");
    if (kind === "strlist") return value.join(",");
    return value === null ? "\u0000null" : String(value);
  }

  // The full wire for a first save: every required field must be filled.
  function fullWire(values) {
    const wire = {};
    FIELDS.forEach(function (pair) {
      const name = pair[0], kind = pair[1];
      let value = values[name];
      if (kind === "secret" && value.trim() === "") value = name === "llm_api_key" ? null : "";
      if (REQUIRED.indexOf(name) >= 0 &&
          (value === null || value === "" || (kind === "intlist" && value.length === 0))) {
        throw new FormError(t("biz.required", { field: label(name) }), name);
      }
      if (value === null && kind === "int") return;  // optional: the server default applies
      wire[name] = value;
    });
    return wire;
  }

  // Only what differs from the readback; secrets only when typed.
  function changedFields(values) {
    const patch = {};
    FIELDS.forEach(function (pair) {
      const name = pair[0], kind = pair[1];
      const value = values[name];
      if (kind === "secret") {
        if (value.trim() !== "") patch[name] = value;
        return;
      }
      if (value === null && kind === "int") return;  // a blank number cannot clear a field
      if (comparable(kind, value) !== comparable(kind, state.baseline[name])) patch[name] = value;
    });
    return patch;
  }

  // The shared secrets that guard routes (reference §5.2): at least 16 characters, and the
  // webhook secret only what Telegram's setWebhook accepts as secret_token.
  const TOKEN_FIELDS = ["telegram_webhook_secret", "reconcile_token", "worker_token"];
  const MIN_TOKEN_CHARS = 16;
  const URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

  // 32 url-safe characters; 256 is a multiple of 64, so `b & 63` keeps every one equally likely.
  function randomToken() {
    const bytes = new Uint8Array(32);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, function (b) { return URLSAFE[b & 63]; }).join("");
  }

  function generateSecret(name) {
    const el = $("f-" + name);
    el.type = "text";  // visible so it can be copied before saving; prefill hides it again
    el.value = randomToken();
    const marker = $("m-" + name);
    marker.textContent = t("marker.generated");
    marker.classList.remove("ok");
    updateDirty();
  }

  function checkTokens(values) {
    TOKEN_FIELDS.forEach(function (name) {
      const value = values[name];
      if (value.trim() === "") return;  // blank: the saved value stays, or "required" says so
      if (value.trim().length < MIN_TOKEN_CHARS) {
        throw new FormError(t("biz.tooShort", { field: label(name), n: MIN_TOKEN_CHARS }), name);
      }
      if (name === "telegram_webhook_secret" && !/^[A-Za-z0-9_-]+$/.test(value)) {
        throw new FormError(t("biz.badSecretChars", { field: label(name) }), name);
      }
    });
  }

  function checkLlm(values) {
    if (!values.llm_enabled) return;
    const hasKey = values.llm_api_key.trim() !== "" || state.secretsPresent.llm_api_key;
    if (values.llm_base_url === null || values.llm_model === null || !hasKey) {
      throw new FormError(t("biz.llmRequired"), values.llm_base_url === null ? "llm_base_url" : "llm_model");
    }
  }

  function formError(err) {
    if (!(err instanceof FormError)) throw err;
    say("biz-error", err.message, "error");
    if (err.field) $("f-" + err.field).focus();
  }

  function baselineFrom(values) {
    const base = {};
    FIELDS.forEach(function (pair) {
      const name = pair[0], kind = pair[1];
      let value = values[name];
      if (kind === "secret") return;
      if (kind === "int") value = value === null || value === undefined ? null : BigInt(value);
      if (kind === "intlist") value = (value || []).map(function (v) { return BigInt(v); });
      if (kind === "strlist") value = value || [];
      if (kind === "text") value = value || "";
      if (kind === "nullable") value = value === undefined || value === "" ? null : value;
      base[name] = value;
    });
    return base;
  }

  function prefill(body) {
    state.configured = body.configured === true;
    state.revision = body.revision || 0;
    state.secretsPresent = body.secrets_present || {};
    state.baseline = baselineFrom(body.values || {});
    FIELDS.forEach(function (pair) {
      const name = pair[0], kind = pair[1];
      const el = $("f-" + name);
      const value = state.baseline[name];
      if (kind === "secret") {
        el.value = "";
        el.type = "password";
        el.required = !state.configured && name !== "llm_api_key";
        const marker = $("m-" + name);
        marker.textContent = t(state.secretsPresent[name] ? "marker.set" : "marker.notSet");
        marker.classList.toggle("ok", state.secretsPresent[name] === true);
      } else if (kind === "bool") {
        el.checked = value === true;
      } else if (kind === "intlist" || kind === "strlist") {
        el.value = value.map(String).join(kind === "intlist" ? ", " : ", ");
      } else if (name === "timezone") {
        selectZone(value || "Asia/Shanghai");
      } else {
        el.value = value === null ? "" : String(value);
      }
    });
    say("biz-state", state.configured ? t("biz.configured", { n: state.revision }) : t("biz.notConfigured"));
    updateDirty();
  }

  async function loadBusiness() {
    try {
      prefill(await api("GET", "/api/business-config", undefined, true));
    } catch (err) {
      if (session.token) say("biz-state", t("biz.loadFailed", { reason: reasonOf(err) }), "error");
    }
  }

  function isDirty() {
    if (!state.baseline) return true;
    try {
      return Object.keys(changedFields(readForm())).length > 0;
    } catch (err) {
      return true;
    }
  }

  function updateDirty() {
    $("cb-register").disabled = !(state.configured && !isDirty());
  }

  function warningLines(warnings) {
    return (warnings || []).map(function (w) {
      return t("biz.warning", { component: w.component, step: w.step, detail: w.detail });
    });
  }

  async function saveBusiness(event) {
    event.preventDefault();
    ["biz-error", "biz-msg", "preflight-result"].forEach(function (id) { say(id, ""); });
    $("biz-warnings").replaceChildren();
    $("preflight-issues").replaceChildren();
    let body;
    try {
      const values = readForm();
      checkLlm(values);
      checkTokens(values);
      if (state.configured) {
        body = changedFields(values);
        if (Object.keys(body).length === 0) {
          say("biz-msg", t("biz.nothing"));
          return;
        }
        body.revision = state.revision;
      } else {
        body = fullWire(values);
      }
    } catch (err) {
      formError(err);
      return;
    }
    $("biz-save").disabled = true;
    try {
      const result = await api("PUT", "/api/business-config", body, true);
      await loadBusiness();
      if (result.runtime_applied) {
        say("biz-msg", t("biz.saved", { n: result.revision }), "ok");
      } else {
        say("biz-msg", t("biz.savedNotApplied", { n: result.revision }), "error");
        fillList("biz-warnings", warningLines(result.warnings));
      }
    } catch (err) {
      if (!session.token) return;
      if (err.status === 409) {
        await loadBusiness();
        say("biz-error", t("biz.conflict"), "error");
      } else if (err.status === 422) {
        say("biz-error", err.configError ? t("biz.rejected", { reason: err.configError })
          : t("biz.rejectedGeneric"), "error");
      } else if (err.status === 400) {
        say("biz-error", t("biz.badRequest"), "error");
      } else if (err.status === 503) {
        say("biz-error", t("biz.unavailable"), "error");
      } else {
        say("biz-error", t("biz.failed", { reason: reasonOf(err) }), "error");
      }
    } finally {
      $("biz-save").disabled = false;
    }
  }

  async function testConnection() {
    ["biz-error", "biz-msg"].forEach(function (id) { say(id, ""); });
    $("preflight-issues").replaceChildren();
    let body;
    try {
      const values = readForm();
      checkTokens(values);
      // With a saved configuration the server merges the changes onto it: no secret re-typing.
      body = state.configured ? changedFields(values) : fullWire(values);
    } catch (err) {
      formError(err);
      return;
    }
    say("preflight-result", t("biz.testing"));
    $("biz-test").disabled = true;
    try {
      const result = await api("POST", "/api/business-config/preflight", body, true);
      const lines = [];
      if (!result.validation || !result.validation.ok) {
        say("preflight-result", t("biz.testInvalid"), "error");
        fillList("preflight-issues", (result.validation && result.validation.errors) || []);
        return;
      }
      let allOk = true;
      ["jmap", "llm"].forEach(function (name) {
        const component = result.components && result.components[name];
        if (!component) {
          lines.push(t("biz.componentSkipped", { component: name }));
        } else if (component.ok) {
          lines.push(t("biz.componentOk", { component: name }));
        } else {
          allOk = false;
          lines.push(t("biz.componentFailed", { component: name }));
          lines.push.apply(lines, warningLines(component.errors));
        }
      });
      say("preflight-result", t("biz.testOk"), allOk ? "ok" : "error");
      fillList("preflight-issues", lines);
    } catch (err) {
      if (session.token) say("preflight-result", t("biz.failed", { reason: reasonOf(err) }), "error");
    } finally {
      $("biz-test").disabled = false;
    }
  }

  // ---- time zones: the shortlist first, then every zone the backend accepts --------------------
  // static.py replaces the marker list below with the backend's zones when it serves this file.
  const SERVER_ZONES = ["__MW_TIMEZONES__"];
  const SHORTLIST = ["Etc/UTC", "Africa/Cairo", "Europe/Istanbul", "Africa/Nairobi", "Asia/Dubai",
    "Asia/Karachi", "Asia/Kolkata", "Asia/Bangkok", "Asia/Ho_Chi_Minh", "Asia/Shanghai",
    "Asia/Hong_Kong", "Asia/Taipei", "Asia/Singapore", "Asia/Manila", "Asia/Tokyo", "Asia/Seoul"];
  const ZONES = (function () {
    if (SERVER_ZONES[0] !== "__MW_TIMEZONES__") return SERVER_ZONES;
    const rest = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
    return SHORTLIST.concat(rest.filter(function (z) { return SHORTLIST.indexOf(z) < 0; }));
  })();

  function zoneLabel(zone) {
    try {
      const parts = new Intl.DateTimeFormat("en", { timeZone: zone, timeZoneName: "shortOffset" })
        .formatToParts(new Date());
      const offset = parts.find(function (p) { return p.type === "timeZoneName"; });
      return zone + (offset ? " (" + offset.value.replace("GMT", "UTC") + ")" : "");
    } catch (err) {
      return zone;
    }
  }

  function renderZones(selected) {
    const select = $("f-timezone");
    const current = selected || select.value || "Asia/Shanghai";
    const needle = $("tz-filter").value.trim().toLowerCase();
    const shown = ZONES.filter(function (z) {
      return z === current || !needle || z.toLowerCase().indexOf(needle) >= 0;
    });
    if (shown.indexOf(current) < 0) shown.unshift(current);
    select.replaceChildren();
    shown.forEach(function (zone, index) {
      const option = document.createElement("option");
      option.value = zone;
      option.textContent = zoneLabel(zone);
      select.appendChild(option);
      if (index === SHORTLIST.length - 1 && !needle) {
        const sep = document.createElement("option");
        sep.disabled = true;
        sep.textContent = "──────────";
        select.appendChild(sep);
      }
    });
    select.value = current;
  }

  function selectZone(zone) {
    $("tz-filter").value = "";
    renderZones(zone);
  }

  // ---- 6. callbacks ----------------------------------------------------------------------------
  function readOrigin() {
    const raw = $("cb-origin").value.trim();
    let url;
    try { url = new URL(raw); } catch (err) { return null; }
    if (url.protocol !== "https:" || url.username || url.password || url.search || url.hash ||
        (url.pathname !== "/" && url.pathname !== "") || raw.replace(/\/$/, "") !== url.origin) {
      return null;
    }
    return url.origin;
  }

  function callbackLine(text, ok) {
    const li = document.createElement("li");
    li.textContent = text;
    li.classList.add(ok ? "ok" : "error");
    $("cb-results").appendChild(li);
  }

  async function registerCallbacks() {
    $("cb-results").replaceChildren();
    const origin = readOrigin();
    if (!origin) {
      callbackLine(t("callbacks.badOrigin"), false);
      $("cb-origin").focus();
      return;
    }
    $("cb-register").disabled = true;
    try {
      const tg = await api("POST", "/api/telegram/register-webhook", { callback_url: origin + "/webhook/tg" }, true);
      callbackLine(t("callbacks.tgOk", { url: tg && tg.url ? tg.url : origin + "/webhook/tg" }), true);
    } catch (err) {
      if (!session.token) return;
      callbackLine(isMissingRoute(err) ? t("common.notAvailable", { feature: t("callbacks.telegram") })
        : t("callbacks.tgFailed", { reason: reasonOf(err) }), false);
    }
    try {
      const push = await api("POST", "/api/push/register", { callback_url: origin + "/push/jmap" }, true);
      callbackLine(t("callbacks.pushOk", { id: push.push_subscription_id }), true);
    } catch (err) {
      if (!session.token) return;
      if (isMissingRoute(err)) callbackLine(t("common.notAvailable", { feature: t("callbacks.push") }), false);
      else if (err.status === 409) callbackLine(t("callbacks.pushBusy"), false);
      else callbackLine(t("callbacks.pushFailed", { reason: reasonOf(err) }), false);
    } finally {
      updateDirty();
      if (session.token) loadPushStatus();
    }
  }

  async function disablePush() {
    $("cb-results").replaceChildren();
    const origin = readOrigin();
    if (!origin) {
      callbackLine(t("callbacks.badOrigin"), false);
      return;
    }
    try {
      await api("POST", "/api/push/disable", { callback_url: origin + "/push/jmap" }, true);
      callbackLine(t("callbacks.disabled"), true);
    } catch (err) {
      if (!session.token) return;
      if (isMissingRoute(err)) callbackLine(t("common.notAvailable", { feature: t("callbacks.push") }), false);
      else if (err.code === "push_subscription_not_found") callbackLine(t("callbacks.noSubscription"), false);
      else callbackLine(t("callbacks.disableFailed", { reason: reasonOf(err) }), false);
    }
    if (session.token) loadPushStatus();
  }

  // The push lifecycle as the server reads it from Redis (`GET /api/push/status`).
  function ageText(seconds) {
    const s = Math.max(0, Math.floor(Number(seconds) || 0));
    if (s >= 86400) return t("callbacks.ageD", { n: Math.floor(s / 86400) });
    if (s >= 3600) return t("callbacks.ageH", { n: Math.floor(s / 3600) });
    if (s >= 60) return t("callbacks.ageMin", { n: Math.floor(s / 60) });
    return t("callbacks.ageS", { n: s });
  }

  function utcText(unix) {
    return new Date(unix * 1000).toISOString().replace("T", " ").replace(/\.\d{3}Z$/, "");
  }

  function pushStateText(status) {
    if (status.state === "off") return t("callbacks.stateOff");
    if (status.state === "ok") return t(status.verified ? "callbacks.stateOk" : "callbacks.stateOkUnverified");
    const key = "callbacks.reason." + status.reason;
    const reason = MESSAGES.en[key] !== undefined ? t(key) : String(status.label || status.reason);
    return t("callbacks.stateDegraded", { reason: reason });
  }

  function expiryText(status) {
    if (status.state === "off") return "—";
    if (status.expires_at === null || status.expires_at === undefined) return t("callbacks.noExpiry");
    const time = utcText(status.expires_at);
    return status.expires_in_s > 0 ? t("callbacks.expiresAt", { time: time, left: ageText(status.expires_in_s) })
      : t("callbacks.expiredAt", { time: time });
  }

  function resetPushStatus() {
    $("cb-push-table").hidden = true;
    ["cb-push-state", "cb-push-last", "cb-push-expires"].forEach(function (id) { $(id).textContent = "—"; });
    say("cb-push-msg", "");
  }

  async function loadPushStatus() {
    say("cb-push-msg", "");
    try {
      const status = await api("GET", "/api/push/status", undefined, true);
      const cell = $("cb-push-state");
      cell.textContent = pushStateText(status);
      cell.classList.toggle("ok", status.state === "ok");
      cell.classList.toggle("error", status.state === "degraded");
      const age = status.last_state_change_age_s;
      $("cb-push-last").textContent = age === null || age === undefined ? t("callbacks.never")
        : t("callbacks.ago", { age: ageText(age) });
      $("cb-push-expires").textContent = expiryText(status);
      $("cb-push-table").hidden = false;
    } catch (err) {
      if (!session.token) return;
      resetPushStatus();
      say("cb-push-msg", isMissingRoute(err) ? t("common.notAvailable", { feature: t("callbacks.pushStatusTitle") })
        : t("callbacks.statusFailed", { reason: reasonOf(err) }), "error");
    }
  }

  // ---- 7. delivery -----------------------------------------------------------------------------
  async function loadDelivery() {
    say("delivery-msg", "");
    try {
      const data = await api("GET", "/api/delivery", undefined, true);
      const rows = $("delivery-rows");
      rows.replaceChildren();
      Object.keys(data.streams || {}).forEach(function (name) {
        const s = data.streams[name];
        const tr = document.createElement("tr");
        [name, s.length, s.pending, s.dlq].forEach(function (value, index) {
          const cell = document.createElement(index === 0 ? "th" : "td");
          if (index === 0) cell.scope = "row";
          cell.textContent = String(value);
          tr.appendChild(cell);
        });
        rows.appendChild(tr);
      });
      $("delivery-table").hidden = false;
      $("delivery-unknown").hidden = false;
      $("delivery-unknown").textContent = t("delivery.unknown", { n: data.unknown_after_send || 0 });
    } catch (err) {
      if (!session.token) return;
      $("delivery-table").hidden = true;
      $("delivery-unknown").hidden = true;
      say("delivery-msg", isMissingRoute(err) ? t("common.notAvailable", { feature: t("delivery.title") })
        : t("delivery.failed", { reason: reasonOf(err) }), "error");
    }
  }

  async function showDlq() {
    say("dlq-msg", "");
    const list = $("dlq-list");
    list.replaceChildren();
    $("dlq-replay-selected").disabled = true;
    $("dlq-replay-all").disabled = true;
    const stream = $("dlq-stream").value;
    try {
      const data = await api("GET", "/api/dlq?stream=" + encodeURIComponent(stream) + "&limit=50", undefined, true);
      const entries = data.entries || [];
      if (entries.length === 0) {
        say("dlq-msg", t("delivery.dlqEmpty"));
        return;
      }
      entries.forEach(function (entry) {
        const li = document.createElement("li");
        const box = document.createElement("input");
        box.type = "checkbox";
        box.value = entry.id;
        box.id = "dlq-" + entry.id;
        const text = document.createElement("label");
        text.htmlFor = box.id;
        const at = Number(entry.failed_at) || 0;  // seconds or milliseconds since the epoch
        const when = at ? new Date(at > 1e12 ? at : at * 1000).toISOString() : "—";
        text.textContent = t("delivery.dlqEntry", Object.assign({}, entry, { failed_at: when }));
        li.append(box, text);
        list.appendChild(li);
      });
      $("dlq-replay-selected").disabled = false;
      $("dlq-replay-all").disabled = false;
    } catch (err) {
      if (!session.token) return;
      say("dlq-msg", isMissingRoute(err) ? t("common.notAvailable", { feature: t("delivery.dlq") })
        : t("delivery.dlqFailed", { reason: reasonOf(err) }), "error");
    }
  }

  async function replayDlq(all) {
    const body = { stream: $("dlq-stream").value };
    if (!all) {
      body.ids = Array.from(document.querySelectorAll("#dlq-list input:checked")).map(function (b) { return b.value; });
      if (body.ids.length === 0) return;
    }
    try {
      const data = await api("POST", "/api/dlq/replay", body, true);
      await showDlq();
      say("dlq-msg", t("delivery.replayed", { n: data.replayed }), "ok");
      loadDelivery();
    } catch (err) {
      if (!session.token) return;
      say("dlq-msg", isMissingRoute(err) ? t("common.notAvailable", { feature: t("delivery.dlq") })
        : t("delivery.dlqFailed", { reason: reasonOf(err) }), "error");
    }
  }

  // ---- 7b. gap audit: the last run (`GET /api/audit`) and "run now" (`POST /api/audit`) ----------
  function gapTrigger(trigger) {
    const key = "gap.trigger." + trigger;
    return MESSAGES.en[key] !== undefined ? t(key) : String(trigger || "—");
  }

  function gapTime(unix) {
    return new Date(Number(unix) * 1000).toISOString().replace("T", " ").replace(/\.\d{3}Z$/, "");
  }

  function showGapLast(last) {
    if (!last) {
      say("gap-last", t("gap.never"));
      return;
    }
    const vars = { time: gapTime(last.at), trigger: gapTrigger(last.trigger) };
    if (last.ok === false) {
      say("gap-last", t("gap.lastFailed", Object.assign(vars, { error: last.error || "—" })), "error");
      return;
    }
    let text = t("gap.last", Object.assign(vars, { checked: last.checked, missing: last.missing,
      enqueued: last.enqueued }));
    if (last.complete === false) text += " " + t("gap.incomplete");
    say("gap-last", text, last.missing > 0 ? "error" : "ok");
  }

  function resetGapAudit() {
    say("gap-last", "");
    say("gap-msg", "");
    $("gap-run").disabled = false;
  }

  async function loadGapAudit() {
    try {
      const data = await api("GET", "/api/audit", undefined, true);
      showGapLast(data.last);
    } catch (err) {
      if (!session.token) return;
      say("gap-last", isMissingRoute(err) ? t("common.notAvailable", { feature: t("gap.title") })
        : t("gap.loadFailed", { reason: reasonOf(err) }), "error");
    }
  }

  async function runGapAudit() {
    $("gap-run").disabled = true;
    say("gap-msg", t("gap.running"));
    try {
      const data = await api("POST", "/api/audit", undefined, true);
      say("gap-msg", t("gap.done", data), data.missing > 0 ? "error" : "ok");
    } catch (err) {
      if (!session.token) return;
      say("gap-msg", isMissingRoute(err) ? t("common.notAvailable", { feature: t("gap.title") })
        : t("gap.failed", { reason: reasonOf(err) }), "error");
    } finally {
      $("gap-run").disabled = false;
    }
    if (session.token) loadGapAudit();
  }

  // ---- 8. logs: newest first, paged with `before` -------------------------------------------
  const LOG_PAGE = 20;
  const LOGS = {
    send: { path: "/api/logs/send", before: null, generation: 0, columns: function (r) {
      return [r.stream, r.kind, r.chat_id, r.outcome, r.failure_class,
        r.latency_ms === undefined || r.latency_ms === null ? null
          : t("logs.latencyMs", { n: r.latency_ms })];
    } },
    audit: { path: "/api/logs/audit", before: null, generation: 0, columns: function (r) {
      return [r.action, auditFields(r)];
    } },
  };
  const AUDIT_OWN = ["id", "time", "action", "request_id"];

  function auditFields(record) {
    return Object.keys(record).filter(function (k) { return AUDIT_OWN.indexOf(k) < 0; })
      .map(function (k) {
        const v = record[k];
        const text = Array.isArray(v) ? v.join(" ")
          : v !== null && typeof v === "object" ? JSON.stringify(v) : String(v);
        return k + "=" + text;
      }).join(", ");
  }

  function logTime(iso) {
    return String(iso || "—").replace("T", " ").replace(/Z$/, "");
  }

  function logRow(name, record) {
    const tr = document.createElement("tr");
    tr.dataset.id = record.id;
    [logTime(record.time)].concat(LOGS[name].columns(record)).forEach(function (value) {
      const td = document.createElement("td");
      td.textContent = value === null || value === undefined || value === "" ? "—" : String(value);
      tr.appendChild(td);
    });
    return tr;
  }

  function resetLog(name) {
    LOGS[name].before = null;
    LOGS[name].generation += 1;
    $(name + "-rows").replaceChildren();
    $(name + "-table").hidden = true;
    $(name + "-older").hidden = true;
    say(name + "-msg", "");
  }

  // `older`: append the next page; otherwise start again from the newest record.
  async function loadLog(name, older) {
    const log = LOGS[name];
    if (!older) resetLog(name);
    const generation = log.generation;
    let path = log.path + "?limit=" + LOG_PAGE;
    if (older && log.before) path += "&before=" + encodeURIComponent(log.before);
    if (name === "send" && $("send-outcome").value) {
      path += "&outcome=" + encodeURIComponent($("send-outcome").value);
    }
    $(name + "-older").disabled = true;
    try {
      const data = await api("GET", path, undefined, true);
      if (generation !== log.generation) return;  // a refresh started meanwhile
      const rows = $(name + "-rows");
      (data.records || []).forEach(function (record) { rows.appendChild(logRow(name, record)); });
      log.before = data.next_before || null;
      $(name + "-table").hidden = rows.children.length === 0;
      $(name + "-older").hidden = log.before === null;
      say(name + "-msg", rows.children.length === 0 ? t("logs.empty") : "");
    } catch (err) {
      if (!session.token || generation !== log.generation) return;
      say(name + "-msg", isMissingRoute(err) ? t("common.notAvailable", { feature: t("logs.title") })
        : t("logs.failed", { reason: reasonOf(err) }), "error");
    } finally {
      $(name + "-older").disabled = false;
    }
  }

  function loadLogs() {
    loadLog("send", false);
    loadLog("audit", false);
  }

  // ---- wiring ----------------------------------------------------------------------------------
  window.__mw = {
    lang: lang,
    messages: MESSAGES,
    missing: missing,
    zones: ZONES,
    hasSession: function () { return session.token !== null; },
    state: function () { return { configured: state.configured, revision: state.revision }; },
  };

  document.addEventListener("DOMContentLoaded", function () {
    applyI18n();
    renderZones("Asia/Shanghai");
    $("setup-recheck").addEventListener("click", loadStatus);
    $("auth-form").addEventListener("submit", signIn);
    $("sign-out").addEventListener("click", signOut);
    $("enabled").addEventListener("change", toggleEnabled);
    $("runtime-form").addEventListener("submit", saveRuntime);
    $("runtime-reload").addEventListener("click", loadRuntime);
    $("runtime-defaults").addEventListener("click", function () {
      fillRuntime(RUNTIME_DEFAULTS);
      say("runtime-msg", t("runtime.defaultsShown"));
    });
    $("biz-form").addEventListener("submit", saveBusiness);
    $("biz-form").addEventListener("input", updateDirty);
    $("biz-form").addEventListener("change", updateDirty);
    $("biz-test").addEventListener("click", testConnection);
    document.querySelectorAll("[data-generate]").forEach(function (button) {
      const name = button.dataset.generate;
      button.setAttribute("aria-label", t("biz.generateFor", { field: label(name) }));
      button.addEventListener("click", function () { generateSecret(name); });
    });
    $("biz-reload").addEventListener("click", function () {
      ["biz-error", "biz-msg", "preflight-result"].forEach(function (id) { say(id, ""); });
      loadBusiness();
    });
    $("tz-filter").addEventListener("input", function () { renderZones(); });
    $("cb-register").addEventListener("click", registerCallbacks);
    $("cb-disable").addEventListener("click", disablePush);
    $("cb-push-refresh").addEventListener("click", loadPushStatus);
    $("delivery-refresh").addEventListener("click", loadDelivery);
    $("dlq-show").addEventListener("click", showDlq);
    $("dlq-replay-selected").addEventListener("click", function () { replayDlq(false); });
    $("dlq-replay-all").addEventListener("click", function () { replayDlq(true); });
    $("gap-run").addEventListener("click", runGapAudit);
    $("logs-refresh").addEventListener("click", loadLogs);
    $("send-outcome").addEventListener("change", function () { loadLog("send", false); });
    $("send-older").addEventListener("click", function () { loadLog("send", true); });
    $("audit-older").addEventListener("click", function () { loadLog("audit", true); });
    // Leaving the page (or putting it in the back/forward cache) forgets every secret.
    window.addEventListener("pagehide", clearPage);
    loadStatus();
  });
})();
