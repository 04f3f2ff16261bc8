// Card "External callbacks": register the Telegram webhook and the mail push for a public
// origin, disable the push, and show the push lifecycle the server reads from Redis.
import { api, isMissingRoute, reasonOf, session } from "./api.js";
import { updateDirty } from "./business.js";
import { $, say } from "./dom.js";
import { known, t } from "./i18n.js";

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
  const reason = known(key) ? t(key) : String(status.label || status.reason);
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

export function load() {
  loadPushStatus();
}

export function reset() {
  $("cb-results").replaceChildren();
  resetPushStatus();
}

export function wire() {
  $("cb-register").addEventListener("click", registerCallbacks);
  $("cb-disable").addEventListener("click", disablePush);
  $("cb-push-refresh").addEventListener("click", loadPushStatus);
}
