// Card "How messages and mail arrive": which way is in force for Telegram's messages (long
// polling or a webhook) and for new mail (EventSource, a push subscription, or the periodic
// check), from `GET /api/push/status`; the optional webhook and push subscription for a
// service with a public HTTPS origin; and the push subscription's lifecycle. No button leads
// to a dead end (issue #22): a webhook is not offered while messages are fetched by long
// polling, a push subscription not while `push_mode` uses none, "delete the webhook" only
// while one is in force and the setting does not insist on it, "disable push" only with a
// subscription. The card follows the service (issue #34): it reads again whenever the status
// card did (`mw:status`, every 2 s while the page is visible), and shows the PushSubscription's
// lifecycle only while a subscription is in force or wanted, never beside an EventSource.
import { api, isMissingRoute, reasonOf, session } from "./api.js";
import { updateDirty } from "./business.js";
import { $, say } from "./dom.js";
import { known, t, utcTime } from "./i18n.js";
import { isOk, pushReason, updatesReason } from "./status.js";

// The last push status read (null before, or when it could not be read).
const state = { status: null, later: null, run: 0 };

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

// `kind`: "ok", "error", or none (a note: nothing failed, nothing was done).
function callbackLine(text, kind) {
  const li = document.createElement("li");
  li.textContent = text;
  if (kind) li.classList.add(kind);
  $("cb-results").appendChild(li);
}

// What the saved configuration wants registered: a webhook unless messages must be fetched by
// long polling; a push subscription when `push_mode` may use one. An older server that does
// not say: both, as before.
function wanted() {
  const status = state.status || {};
  return {
    webhook: status.telegram_updates !== "polling",
    push: !status.push_mode || status.push_mode === "auto" || status.push_mode === "subscription",
  };
}

// The register button's part of the decision (business.js's `updateDirty` adds the saved,
// unchanged configuration it needs): off when there is nothing the settings would use.
function updateRegister() {
  const want = wanted();
  const nothing = !want.webhook && !want.push;
  $("cb-register").dataset.nothing = nothing ? "1" : "";
  const saved = state.status !== null && state.status.telegram_updates !== null &&
    state.status.telegram_updates !== undefined;
  const hint = nothing ? "callbacks.nothingToRegister" : saved ? "callbacks.hintSaved" : "callbacks.hint";
  $("cb-hint").dataset.i18n = hint;  // the words follow a change of the page's language too
  say("cb-hint", t(hint));
  updateDirty();
}

function webhookFailed(err) {
  if (isMissingRoute(err)) return t("common.notAvailable", { feature: t("callbacks.telegram") });
  if (err.code === "telegram_updates_polling") return t("callbacks.tgPolling");
  if (err.status === 502) return t("callbacks.tgRefused", { reason: err.telegramError || reasonOf(err) });
  if (err.status === 503) return t("callbacks.tgNoRuntime");
  return t("callbacks.tgFailed", { reason: reasonOf(err) });
}

// A push registration that failed, in words: [text, kind].
function pushFailed(err) {
  if (isMissingRoute(err)) return [t("common.notAvailable", { feature: t("callbacks.push") }), "error"];
  if (err.code === "push_not_supported") {
    const eventsource = state.status && state.status.in_force === "ok (eventsource)";
    return eventsource ? [t("callbacks.pushNotSupportedEs"), ""] : [t("callbacks.pushNotSupported"), "error"];
  }
  if (err.status === 409) return [t("callbacks.pushBusy"), "error"];
  if (err.status === 503) return [t("callbacks.pushUnavailable"), "error"];
  return [t("callbacks.pushFailed", { reason: reasonOf(err) }), "error"];
}

// The settle time of a switch: the poller looks for a webhook every 10 s.
function refreshSoon() {
  clearTimeout(state.later);
  state.later = setTimeout(function () { if (session.token) loadPushStatus(); }, 11000);
}

async function registerCallbacks() {
  $("cb-results").replaceChildren();
  const origin = readOrigin();
  if (!origin) {
    callbackLine(t("callbacks.badOrigin"), "error");
    $("cb-origin").focus();
    return;
  }
  const want = wanted();
  $("cb-register").disabled = true;
  if (want.webhook) {
    try {
      const tg = await api("POST", "/api/telegram/register-webhook", { callback_url: origin + "/webhook/tg" }, true);
      callbackLine(t("callbacks.tgOk", { url: tg && tg.url ? tg.url : origin + "/webhook/tg" }), "ok");
    } catch (err) {
      if (!session.token) return;
      callbackLine(webhookFailed(err), "error");
    }
  } else {
    callbackLine(t("callbacks.tgNotWanted"));
  }
  if (want.push) {
    try {
      const push = await api("POST", "/api/push/register", { callback_url: origin + "/push/jmap" }, true);
      callbackLine(t("callbacks.pushOk", { id: push.push_subscription_id }), "ok");
    } catch (err) {
      if (!session.token) return;
      const line = pushFailed(err);
      callbackLine(line[0], line[1]);
    }
  } else {
    callbackLine(t("callbacks.pushNotWanted"));
  }
  updateDirty();
  if (session.token) {
    loadPushStatus();
    refreshSoon();
  }
}

async function deleteWebhook() {
  $("cb-results").replaceChildren();
  $("cb-delete-webhook").disabled = true;
  try {
    await api("POST", "/api/telegram/delete-webhook", undefined, true);
    callbackLine(t("callbacks.webhookDeleted"), "ok");
    refreshSoon();
  } catch (err) {
    if (!session.token) return;
    callbackLine(isMissingRoute(err) ? t("common.notAvailable", { feature: t("callbacks.telegram") })
      : t("callbacks.deleteFailed", { reason: err.telegramError || reasonOf(err) }), "error");
  } finally {
    $("cb-delete-webhook").disabled = false;
  }
  if (session.token) loadPushStatus();
}

async function disablePush() {
  $("cb-results").replaceChildren();
  const origin = readOrigin();
  if (!origin) {
    callbackLine(t("callbacks.badOrigin"), "error");
    return;
  }
  try {
    await api("POST", "/api/push/disable", { callback_url: origin + "/push/jmap" }, true);
    callbackLine(t("callbacks.disabled"), "ok");
  } catch (err) {
    if (!session.token) return;
    if (isMissingRoute(err)) callbackLine(t("common.notAvailable", { feature: t("callbacks.push") }), "error");
    else if (err.code === "push_subscription_not_found") callbackLine(t("callbacks.noSubscription"), "error");
    else callbackLine(t("callbacks.disableFailed", { reason: reasonOf(err) }), "error");
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
  const time = utcTime(status.expires_at);
  return status.expires_in_s > 0 ? t("callbacks.expiresAt", { time: time, left: ageText(status.expires_in_s) })
    : t("callbacks.expiredAt", { time: time });
}

// How Telegram's messages arrive now, in words (`updates` of issue #22).
function updatesText(label) {
  if (label === "ok (polling)") return t("callbacks.updates.polling");
  if (label === "ok (webhook)") return t("callbacks.updates.webhook");
  if (label === "off") return t("callbacks.updates.off");
  return t("callbacks.updates.degraded", { reason: updatesReason(label) });
}

// How new mail is noticed now (`in_force`), in words.
function mailText(label, age) {
  if (label === "ok (eventsource)") {
    return age === null || age === undefined ? t("callbacks.mail.eventsource")
      : t("callbacks.mail.eventsourceAge", { age: ageText(age) });
  }
  if (label === "ok (idle)") {  // an IMAP mailbox (issue #34: it read "periodic check only")
    return age === null || age === undefined ? t("callbacks.mail.idle")
      : t("callbacks.mail.idleAge", { age: ageText(age) });
  }
  if (label === "ok (subscription)") return t("callbacks.mail.subscription");
  if (label === "off") return t("callbacks.mail.off");
  return t("callbacks.mail.degraded", { reason: pushReason(label) });
}

function wayCell(id, text, ok) {
  const cell = $(id);
  cell.textContent = text;
  cell.classList.toggle("ok", ok);
  cell.classList.toggle("error", !ok);
}

function showWays(status) {
  // Nothing saved yet (`telegram_updates` null): no way is in force, and none is shown.
  const told = typeof status.updates === "string" && typeof status.in_force === "string" &&
    status.telegram_updates !== null;
  $("cb-ways").hidden = !told;
  if (told) {
    wayCell("cb-way-updates", updatesText(status.updates), isOk(status.updates));
    wayCell("cb-way-mail", mailText(status.in_force, status.last_event_age_s), isOk(status.in_force));
  }
  // A webhook is in force and the setting does not insist on one: it can go, and the service
  // fetches the messages itself.
  $("cb-delete-webhook").hidden = !(status.updates === "ok (webhook)" &&
    status.telegram_updates !== "webhook");
  $("cb-disable").hidden = !status.subscription_id;
}

// The PushSubscription's lifecycle matters only while one is the way in force, is wanted
// (`push_mode` subscription) or exists (registered, or lost and being re-created).
function subscriptionShown(status) {
  return status.in_force === "ok (subscription)" || status.push_mode === "subscription" ||
    Boolean(status.subscription_id) || status.state !== "off";
}

function resetPushStatus() {
  state.status = null;
  clearTimeout(state.later);
  $("cb-push-box").hidden = true;
  $("cb-ways").hidden = true;
  $("cb-delete-webhook").hidden = true;
  $("cb-disable").hidden = true;
  ["cb-push-state", "cb-push-last", "cb-push-expires", "cb-way-updates", "cb-way-mail"]
    .forEach(function (id) { $(id).textContent = "—"; });
  say("cb-push-msg", "");
  $("cb-register").dataset.nothing = "";
  $("cb-hint").dataset.i18n = "callbacks.hint";
  say("cb-hint", t("callbacks.hint"));
}

async function loadPushStatus() {
  const run = ++state.run;  // a later read wins
  try {
    const status = await api("GET", "/api/push/status", undefined, true);
    if (run !== state.run) return;
    say("cb-push-msg", "");
    state.status = status;
    const cell = $("cb-push-state");
    cell.textContent = pushStateText(status);
    cell.classList.toggle("ok", status.state === "ok");
    cell.classList.toggle("error", status.state === "degraded");
    const age = status.last_state_change_age_s;
    $("cb-push-last").textContent = age === null || age === undefined ? t("callbacks.never")
      : t("callbacks.ago", { age: ageText(age) });
    $("cb-push-expires").textContent = expiryText(status);
    $("cb-push-box").hidden = !subscriptionShown(status);
    showWays(status);
    updateRegister();
  } catch (err) {
    if (!session.token || run !== state.run) return;
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
  $("cb-delete-webhook").addEventListener("click", deleteWebhook);
  $("cb-disable").addEventListener("click", disablePush);
  $("cb-push-refresh").addEventListener("click", loadPushStatus);
  // A saved change of how messages or mail arrive changes what the card offers.
  document.addEventListener("mw:saved", function () { if (session.token) loadPushStatus(); });
  document.addEventListener("mw:status", function () { if (session.token) loadPushStatus(); });
}
