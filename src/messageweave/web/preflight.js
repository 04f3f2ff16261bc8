// "Test connection" (`POST /api/business-config/preflight`) in the page's words: one line per
// component probed, each failure linked to the field that fixes it. Shared by the business card
// and the accounts card, whose form holds the same fields under another id prefix (`f-` or
// `a-f-`): a line's `field` is a field name, its link goes to `prefix + field`.
import { api } from "./api.js";
import { imapLines } from "./business-imap.js";
import { $, say } from "./dom.js";
import { known, t } from "./i18n.js";

// `host:port` of the session URL in the form, for the openssl command of the hint.
function serverAddress(prefix) {
  try {
    const url = new URL($(prefix + "jmap_session_url").value.trim());
    return url.hostname + ":" + (url.port || "443");
  } catch (err) {
    return "mail.example.com:443";
  }
}

// A JMAP warning whose TLS verification failed (OpenSSL's reason code), in words; or null.
export function certificateHint(warnings, prefix) {
  const failed = (warnings || []).find(function (w) {
    return w.component === "jmap" && /CERTIFICATE_VERIFY_FAILED/.test(w.detail || "");
  });
  if (!failed) return null;
  return /self[- ]signed|local issuer/i.test(failed.detail)
    ? t("biz.certSelfSigned", { host: serverAddress(prefix) }) : t("biz.certUntrusted");
}

// The warnings as red lines; a certificate failure adds its hint, linked to the field.
export function failureLines(warnings, prefix) {
  const lines = (warnings || []).map(function (w) {
    if (w.component === "accounts" && w.step === "runtime") {
      return { text: t("acct.notServed"), kind: "error" };  // said in the page's words
    }
    const key = "biz.component." + w.component;
    return { text: t("biz.warning", { component: known(key) ? t(key) : w.component,
      step: w.step, detail: w.detail }), kind: "error" };
  });
  const hint = certificateHint(warnings, prefix);
  if (hint) lines.push({ text: hint, kind: "error", field: "jmap_ca_pem" });
  return lines;
}

// One item per line, each coloured by its own outcome ("ok", "error" or none), so a success
// never shows in red beside a failure, nor a failure in green.
export function report(id, lines, prefix) {
  const list = $(id);
  list.replaceChildren();
  lines.forEach(function (line) {
    const li = document.createElement("li");
    if (line.kind) li.classList.add(line.kind);
    if (line.field) {
      const link = document.createElement("a");
      link.href = "#" + prefix + line.field;
      link.textContent = line.text;
      link.addEventListener("click", function (event) {
        event.preventDefault();
        $(prefix + line.field).focus();
      });
      li.appendChild(link);
    } else {
      li.textContent = line.text;
    }
    list.appendChild(li);
  });
}

// A preflight's Telegram failure in the page's words (the token, or the address), linked to
// the field to fix; then the server's own detail.
function telegramLines(errors, prefix) {
  const detail = String((errors && errors[0] && errors[0].detail) || "");
  const lines = [];
  if (/^Telegram refused the bot token/.test(detail)) {
    lines.push({ text: t("biz.telegramRefused"), kind: "error", field: "bot_token" });
  } else if (/^the Bot API could not be reached/.test(detail)) {
    lines.push({ text: t("biz.telegramUnreachable"), kind: "error", field: "telegram_api_base_url" });
  }
  return lines.concat(failureLines(errors, prefix));
}

// The lines of every probed component; `ok` only when every probed peer answered.
function componentLines(result, prefix) {
  const lines = [];
  let allOk = true;
  // Telegram is tested too (issue #22): getMe for the token at the Bot API address. A
  // server that does not report it yet shows no line for it.
  // An IMAP wire (issue #33) has `mail` and `smtp` (null while no SMTP server is set) and
  // no `jmap`; a JMAP wire neither of the two.
  ["jmap", "mail", "smtp", "telegram", "llm"].forEach(function (name) {
    const component = result.components && result.components[name];
    const label = t("biz.component." + name);
    if (component === undefined && name === "telegram") return;
    if (!component && name !== "llm") return;
    if (!component) {
      lines.push({ text: t("biz.componentSkipped", { component: label }) });
    } else if (component.ok) {
      lines.push({ text: t(name === "telegram" ? "biz.telegramOk" : "biz.componentOk",
        { component: label }), kind: "ok" });
    } else {
      allOk = false;
      lines.push({ text: t("biz.componentFailed", { component: label }), kind: "error" });
      if (name === "mail" || name === "smtp") {
        lines.push.apply(lines, imapLines(name, component.errors));
      }
      lines.push.apply(lines, name === "telegram" ? telegramLines(component.errors, prefix)
        : failureLines(component.errors, prefix));
    }
  });
  // Replies from the chat need JMAP submission (issue #25): said, not counted as a failure.
  const replies = result.components && result.components.replies;
  if (replies && !replies.ok) {
    const smtpOff = replies.errors && replies.errors[0] && replies.errors[0].step === "smtp";
    lines.push(smtpOff ? { text: t("biz.repliesOffSmtp"), kind: "error", field: "smtp_host" }
      : { text: t("biz.repliesOff"), kind: "error" });
  }
  return { ok: allOk, lines: lines };
}

// Test `body` (a full wire, or changes merged by the server onto the stored configuration) and
// show the outcome in `ids.result` (the headline) and `ids.issues` (the lines). `serverText`
// puts the page's labels into the server's messages. Answers the result; throws what `api()`
// throws.
export async function testConnection(body, ids, prefix, serverText) {
  say(ids.result, t("biz.testing"));
  const result = await api("POST", "/api/business-config/preflight", body, true);
  if (!result.validation || !result.validation.ok) {
    say(ids.result, t("biz.testInvalid"), "error");
    report(ids.issues, ((result.validation && result.validation.errors) || [])
      .map(function (text) { return { text: serverText(text), kind: "error" }; }), prefix);
    return result;
  }
  const outcome = componentLines(result, prefix);
  // The headline is the outcome: "passed" only when every probed peer answered.
  say(ids.result, t(outcome.ok ? "biz.testOk" : "biz.testFailed"), outcome.ok ? "ok" : "error");
  report(ids.issues, outcome.lines, prefix);
  return result;
}
