// Card 2, sign-in, and the session toolbar: the admin session's life in this page, from the
// admin key to sign-out, expiry or a 401, each of which clears the page.
//
// "Stay signed in" (issue #34): ticked at sign-in, the session token and its end are kept in
// this tab's sessionStorage, so a reload resumes it; never the admin key, which the page
// forgets as soon as it is sent. Sign-out (which revokes it), expiry and a 401 forget it; a
// reload's pagehide clears the page but not the kept session. A kept session is checked with
// one call before the cards load (a stale one costs one throttled failure, not one a card).
//
// An account's owner (issue #35) signs in with the same box: a key of the form `<id>.<…>` is an
// owner key (`POST /api/owner/session`), anything else the admin key. An owner session shows
// the accounts card alone, with the owner's own account; every admin card stays hidden.
import { api, onSessionLost, reasonOf, session } from "./api.js";
import { $, say } from "./dom.js";
import { t } from "./i18n.js";

// The cards behind sign-in (set by main.js): each `load()`s when a session starts and
// `reset()`s its part of the page when it ends.
let cards = [];
let ownerCards = [];
export function manage(list, ownerList) {
  cards = list;
  ownerCards = ownerList;
}

// The cards of the session now open: the owner's, or every admin card.
function open() {
  return session.account ? ownerCards : cards;
}

const clock = { expiresAt: 0, timer: null };
const KEPT = "mw.session";
const MAX_SESSION_S = 1800;  // ADMIN_SESSION_TTL_S: the page never counts a session longer
const SESSION_TOKEN = /^[0-9a-f]{64}$/;
// `<account id>.<secret>`: an owner key (its secret url-safe) or an owner session (hex).
const OWNER_KEY = /^[a-z0-9][a-z0-9_-]{0,31}\.[A-Za-z0-9_-]+$/;
const OWNER_SESSION = /^([a-z0-9][a-z0-9_-]{0,31})\.[0-9a-f]{64}$/;

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
  const token = String(value && value.token);
  if (value && (SESSION_TOKEN.test(token) || OWNER_SESSION.test(token)) &&
      Number(value.expires_at) > Date.now()) {
    return value;
  }
  forget();
  return null;
}

// A reload with a kept session: resumed when the server still knows it, else forgotten.
async function resume() {
  const saved = kept();
  if (saved === null) return;
  const owner = OWNER_SESSION.exec(saved.token);
  try {
    await api("GET", owner ? "/api/accounts/" + owner[1] : "/api/enabled", undefined, saved.token);
  } catch (err) {
    if (err.status === 401 || err.status === 403) {
      forget();
      say("auth-msg", t(owner ? "auth.ownerExpired" : "auth.expired"), "error");
    }
    return;
  }
  // Never longer than a session lives (the server's TTL decides anyway).
  const end = Math.min(Number(saved.expires_at), Date.now() + MAX_SESSION_S * 1000);
  if (session.token === null) startSession(saved.token, end, owner ? owner[1] : null);
}

async function signIn(event) {
  event.preventDefault();
  const key = $("auth-key").value.trim();
  if (!key) return;
  say("auth-msg", "");
  $("auth-submit").disabled = true;
  const owner = OWNER_KEY.test(key);
  try {
    const data = await api("POST", owner ? "/api/owner/session" : "/api/admin/session",
      undefined, key);
    $("auth-key").value = "";
    const seconds = Math.min(Number(data.expires_in) > 0 ? Number(data.expires_in) : MAX_SESSION_S,
      MAX_SESSION_S);
    const expiresAt = Date.now() + seconds * 1000;
    if ($("auth-keep").checked) keep(data.session, expiresAt);
    else forget();
    startSession(data.session, expiresAt, owner ? data.account : null);
  } catch (err) {
    const wrong = t(owner ? "auth.ownerWrong" : "auth.wrong");
    say("auth-msg", err.status === 401 ? wrong : t("biz.failed", { reason: reasonOf(err) }), "error");
  } finally {
    $("auth-submit").disabled = false;
  }
}

// `account`: the owner's account, or null for an admin session.
function startSession(token, expiresAt, account) {
  session.token = token;
  session.account = account;
  clock.expiresAt = expiresAt;
  clearInterval(clock.timer);
  clock.timer = setInterval(tick, 1000);
  tick();
  $("session-title").textContent = account ? t("session.ownerTitle", { id: account })
    : t("session.title");
  $("auth-card").hidden = true;
  $("session-bar").hidden = false;
  $("admin").hidden = account !== null;
  open().forEach(function (card) { card.load(); });
}

function tick() {
  const left = clock.expiresAt - Date.now();
  if (left <= 0) {
    endSession(expiredKey());
    return;
  }
  say("session-expiry", t(session.account ? "session.ownerExpires" : "session.expires",
    { n: Math.max(1, Math.ceil(left / 60000)) }));
}

// Clears every secret and value from the page (sign-out, expiry, 401, pagehide).
export function clearPage() {
  const closing = open();
  session.token = null;
  session.account = null;
  clock.expiresAt = 0;
  clearInterval(clock.timer);
  clock.timer = null;
  document.querySelectorAll("input, textarea").forEach(function (el) {
    if (el.type === "checkbox") el.checked = false;
    else el.value = "";
  });
  say("session-expiry", "");
  closing.forEach(function (card) { card.reset(); });
  $("admin").hidden = true;
  $("session-bar").hidden = true;
}

function endSession(messageKey) {
  forget();
  clearPage();
  $("auth-card").hidden = false;
  const ok = messageKey === "auth.signedOut" || messageKey === "auth.signedOutOwner";
  say("auth-msg", t(messageKey), ok ? "ok" : "error");
  $("auth-key").focus();
}

// The words for a session that ended by itself: the admin's, or an owner's.
function expiredKey() {
  return session.account ? "auth.ownerExpired" : "auth.expired";
}

onSessionLost(function () { endSession(expiredKey()); });

// Sign-out ends the session on the server too: the admin's, or the owner's own (the owner's
// other sessions, on other devices, stay).
async function signOut() {
  const token = session.token;
  const owner = Boolean(session.account);
  let revoked = true;
  try {
    await api("POST", owner ? "/api/owner/session/revoke" : "/api/admin/session/revoke",
      undefined, token);
  } catch (err) {
    revoked = false;
  }
  const done = owner ? "auth.signedOutOwner" : "auth.signedOut";
  endSession(revoked ? done : "auth.signedOutLocal");
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
