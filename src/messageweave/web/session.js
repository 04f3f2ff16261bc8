// Card 2, sign-in, and the session toolbar: the admin session's life in this page, from the
// admin key to sign-out, expiry or a 401, each of which clears the page.
//
// "Stay signed in" (issue #34): ticked at sign-in, the session token and its end are kept in
// this tab's sessionStorage, so a reload resumes it; never the admin key, which the page
// forgets as soon as it is sent. Sign-out (which revokes it), expiry and a 401 forget it; a
// reload's pagehide clears the page but not the kept session. A kept session is checked with
// one call before the cards load (a stale one costs one throttled failure, not one a card).
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
const KEPT = "mw.session";
const MAX_SESSION_S = 1800;  // ADMIN_SESSION_TTL_S: the page never counts a session longer
const SESSION_TOKEN = /^[0-9a-f]{64}$/;

function keep(token, expiresAt) {
  try {
    sessionStorage.setItem(KEPT, JSON.stringify({ token: token, expires_at: expiresAt }));
  } catch (err) {
    // storage refused (a private window's quota): the session stays in memory only
  }
}

function forget() {
  try { sessionStorage.removeItem(KEPT); } catch (err) { /* nothing was kept */ }
}

// The kept session while it has not expired, else null (and an expired one forgotten).
function kept() {
  let value = null;
  try { value = JSON.parse(sessionStorage.getItem(KEPT) || "null"); } catch (err) { value = null; }
  if (value && SESSION_TOKEN.test(String(value.token)) && Number(value.expires_at) > Date.now()) {
    return value;
  }
  forget();
  return null;
}

// A reload with a kept session: resumed when the server still knows it, else forgotten.
async function resume() {
  const saved = kept();
  if (saved === null) return;
  try {
    await api("GET", "/api/enabled", undefined, saved.token);
  } catch (err) {
    if (err.status === 401 || err.status === 403) {
      forget();
      say("auth-msg", t("auth.expired"), "error");
    }
    return;
  }
  // Never longer than a session lives (the server's TTL decides anyway).
  const end = Math.min(Number(saved.expires_at), Date.now() + MAX_SESSION_S * 1000);
  if (session.token === null) startSession(saved.token, end);
}

async function signIn(event) {
  event.preventDefault();
  const key = $("auth-key").value.trim();
  if (!key) return;
  say("auth-msg", "");
  $("auth-submit").disabled = true;
  try {
    const data = await api("POST", "/api/admin/session", undefined, key);
    $("auth-key").value = "";
    const seconds = Math.min(Number(data.expires_in) > 0 ? Number(data.expires_in) : MAX_SESSION_S,
      MAX_SESSION_S);
    const expiresAt = Date.now() + seconds * 1000;
    if ($("auth-keep").checked) keep(data.session, expiresAt);
    else forget();
    startSession(data.session, expiresAt);
  } catch (err) {
    say("auth-msg", err.status === 401 ? t("auth.wrong") : t("biz.failed", { reason: reasonOf(err) }), "error");
  } finally {
    $("auth-submit").disabled = false;
  }
}

function startSession(token, expiresAt) {
  session.token = token;
  clock.expiresAt = expiresAt;
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
  forget();
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
  // A reload, or a page back from the back/forward cache (whose pagehide cleared it).
  window.addEventListener("pageshow", function (event) { if (event.persisted) resume(); });
  resume();
}
