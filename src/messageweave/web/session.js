// Card 2, sign-in, and the session toolbar: the admin session's life in this page, from the
// admin key to sign-out, expiry or a 401, each of which clears the page.
import { api, onSessionLost, reasonOf, session } from "./api.js";
import { $, say } from "./dom.js";
import { t } from "./i18n.js";

// The cards behind sign-in (set by main.js): each `load()`s when a session starts and
// `reset()`s its part of the page when it ends.
let cards = [];
export function manage(list) {
  cards = list;
}

const clock = { expiresAt: 0, timer: null };

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
  clock.expiresAt = Date.now() + seconds * 1000;
  clearInterval(clock.timer);
  clock.timer = setInterval(tick, 1000);
  tick();
  $("auth-card").hidden = true;
  $("admin").hidden = false;
  cards.forEach(function (card) { card.load(); });
}

function tick() {
  const left = clock.expiresAt - Date.now();
  if (left <= 0) {
    endSession("auth.expired");
    return;
  }
  say("session-expiry", t("session.expires", { n: Math.max(1, Math.ceil(left / 60000)) }));
}

// Clears every secret and value from the page (sign-out, expiry, 401, pagehide).
export function clearPage() {
  session.token = null;
  clock.expiresAt = 0;
  clearInterval(clock.timer);
  clock.timer = null;
  document.querySelectorAll("input, textarea").forEach(function (el) {
    if (el.type === "checkbox") el.checked = false;
    else el.value = "";
  });
  say("session-expiry", "");
  cards.forEach(function (card) { card.reset(); });
  $("admin").hidden = true;
}

function endSession(messageKey) {
  clearPage();
  $("auth-card").hidden = false;
  say("auth-msg", t(messageKey), messageKey === "auth.signedOut" ? "ok" : "error");
  $("auth-key").focus();
}

onSessionLost(function () { endSession("auth.expired"); });

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

export function hasSession() {
  return session.token !== null;
}

export function wire() {
  $("auth-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
}
