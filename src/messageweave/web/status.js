// Card 1, service status: setup mode (with the missing variables), running but nothing saved
// yet, or configured; what `/ready` says, one line per check, in words; and, once signed in,
// whether processing is on and whether a notification failed. "Ready: every check passed" is
// said only when nothing is wrong: the bot hears its owner, mail push works, nothing waits for
// a peer out of reach and the dead-letter queue is empty (issue #22).
// The card follows the service by itself (issue #34): it reads again every `LIVE_MS` while the
// page is visible (`live()`), and tells the other cards (`mw:status`), so the callbacks card
// reads the same moment. A poll, not a stream: it needs nothing more than the routes the card
// already reads, /ready's probes are shared and cached on the server, and a hidden tab asks
// nothing.
import { api, session } from "./api.js";
import { $, fillList, say } from "./dom.js";
import { known, t } from "./i18n.js";

// The checks `/ready` runs, in the order shown. `configured` is not a peer: when it fails the
// peers were not probed (they need a configuration). `updates` and `push` are labels of the
// 200 body only. `mail` stands for the mail server's check, whichever the source is: `/ready`
// names it `jmap` for a JMAP mailbox and `mail` for an IMAP one (`probes.mail_probe`).
const PEERS = ["redis", "mail", "telegram", "updates", "push"];
const MAIL_CHECKS = ["jmap", "mail"];
const REQUEST = { credentials: "omit", cache: "no-store", redirect: "error",
  referrerPolicy: "no-referrer", headers: { Accept: "application/json" } };

// What the card last read: the status, `/ready`, and (signed in) the switch and the queues.
const view = { status: null, ready: null, enabled: null, delivery: null, run: 0, busy: false,
  mailCheck: null };
export const LIVE_MS = 2000;

// `/ready` answered: 200 with a boolean per check (and push and updates as labels), or 503
// with the names of the failed checks in `x-ready-failed`; null when it could not be read at
// all. A 503's body (the envelope) is read too, so the response does not stay open; for an
// admin session it says why each check failed (`failed`: {check: {reason, cause}}).
async function readReady() {
  let response;
  const headers = Object.assign({}, REQUEST.headers);
  if (session.token) headers.Authorization = "Bearer " + session.token;
  try {
    response = await fetch("/ready", Object.assign({}, REQUEST, { headers: headers }));
  } catch (err) {
    return null;
  }
  let body = null;
  try { body = await response.json(); } catch (err) { body = null; }
  if (response.ok) return rememberMailCheck(body);
  const header = response.headers.get("x-ready-failed");
  if (header === null) return null;
  const failed = header.split(",").map(function (name) { return name.trim(); });
  const answer = { status: "not_ready", configured: failed.indexOf("configured") < 0,
    reasons: body && typeof body.failed === "object" && body.failed !== null ? body.failed : {} };
  // A 503 names only the checks that failed: a mail check that passed is the one a former
  // answer named, or unknown (then said without the source's name).
  const mail = MAIL_CHECKS.find(function (name) { return failed.indexOf(name) >= 0; }) ||
    view.mailCheck;
  ["redis", "telegram"].concat(mail ? [mail] : []).forEach(function (name) {
    answer[name] = failed.indexOf(name) < 0;
  });
  return rememberMailCheck(answer);
}

// Which mail check an answer holds (`jmap`, `mail`), or null; remembered for the next 503.
function mailCheckOf(ready) {
  return MAIL_CHECKS.find(function (name) { return typeof ready[name] === "boolean"; }) || null;
}

function rememberMailCheck(ready) {
  if (ready && typeof ready === "object" && mailCheckOf(ready) !== null) {
    view.mailCheck = mailCheckOf(ready);
  }
  return ready;
}

// The server says why something is degraded in its own English (`push_lifecycle.REASONS`,
// `mail.eventsource.REASONS`, `pipeline.polling.REASONS`); the page shows its own words for
// that reason, in its language. A text that only begins with one (an EventSource reason with
// its detail) counts as that one.
const PUSH_REASONS = {
  "subscription expired": "callbacks.reason.expired",
  "subscription not verified in time": "callbacks.reason.not_verified",
  "server check failed": "callbacks.reason.check_failed",
  "renewal failed": "callbacks.reason.renewal_failed",
  "subscription lost, re-create failed": "callbacks.reason.recreate_failed",
  "subscription lost, callback URL unknown": "callbacks.reason.url_unknown",
  "EventSource connecting": "reason.es.connecting",
  "EventSource connection lost, reconnecting": "reason.es.failing",
  "the mail server refused the credentials for EventSource": "reason.es.refused",
  "the mail server's EventSource does not answer with an event stream": "reason.es.not_event_stream",
  "the mail server offers no EventSource": "reason.es.unavailable",
  "the session's eventSourceUrl is not on the session's origin": "reason.es.bad_url",
  "no instance holds the EventSource yet": "reason.es.none_yet",
  "IMAP IDLE connecting": "reason.idle.connecting",
  "IMAP IDLE connection lost, reconnecting": "reason.idle.failing",
  "the IMAP server refused the credentials": "reason.idle.refused",
  "a notify mailbox cannot be selected": "reason.idle.no_mailbox",
  "the IMAP server does not offer IDLE": "reason.idle.no_idle",
  "no instance holds the IMAP IDLE yet": "reason.idle.none_yet",
};
const UPDATES_REASONS = {
  "no webhook is registered with Telegram (telegram_updates is webhook)": "reason.tg.no_webhook",
  "another program receives this bot's updates (Telegram answered 409 Conflict)": "reason.tg.conflict",
  "Telegram refused the bot token (401): updates stop until it changes": "reason.tg.unauthorized",
  "Telegram asked us to slow down (429)": "reason.tg.rate_limited",
  "Telegram is unreachable": "reason.tg.unreachable",
  "no instance is receiving Telegram updates yet": "reason.tg.none_yet",
};

function reasonWords(label, table) {
  const reason = String(label).replace(/^degraded:\s*/, "");
  const found = Object.keys(table).find(function (text) { return reason.startsWith(text); });
  return found && known(table[found]) ? t(table[found]) : reason;
}

// The words for a degraded `updates` / push label (the callbacks card shows them too).
export function updatesReason(label) { return reasonWords(label, UPDATES_REASONS); }
export function pushReason(label) { return reasonWords(label, PUSH_REASONS); }

export function isOk(label) {
  return typeof label === "string" && /^ok\b/.test(label);
}

function pushWords(label) {
  if (label === "ok (eventsource)") return t("ready.push.eventsource");
  if (label === "ok (subscription)") return t("ready.push.subscription");
  if (label === "ok (idle)") return t("ready.push.idle");
  if (isOk(label)) return t("ready.push.ok");
  if (label === "off") return t("ready.push.off");
  return t("ready.push.degraded", { reason: reasonWords(label, PUSH_REASONS) });
}

function updatesWords(label) {
  if (label === "ok (polling)") return t("ready.updates.polling");
  if (label === "ok (webhook)") return t("ready.updates.webhook");
  if (label === "off") return t("ready.updates.off");
  return t("ready.updates.degraded", { reason: reasonWords(label, UPDATES_REASONS) });
}

// One line per check: [text, "ok" | "error" | ""].
function peerLine(name, ready) {
  if (name === "push" || name === "updates") {
    const label = ready[name];
    if (ready.status !== "ready" || label === undefined) return [t("ready." + name + ".unknown"), ""];
    const text = name === "push" ? pushWords(label) : updatesWords(label);
    return [text, isOk(label) ? "ok" : "error"];
  }
  if (name === "mail") return mailLine(ready);
  if (name === "telegram" && !ready.configured) return [t("ready.telegram.skipped"), ""];
  if (ready[name]) return [t("ready." + name + ".ok"), "ok"];
  return [causeWords(name, ready), "error"];
}

// The mail server's line. A 503 that names no mail check and was configured probed it: it
// passed, from a source the page may not know yet.
function mailLine(ready) {
  if (!ready.configured) return [t("ready.mailServer.skipped"), ""];
  const check = mailCheckOf(ready);
  if (check === null) return [t("ready.mailServer.ok"), "ok"];
  if (ready[check]) return [t("ready." + check + ".ok"), "ok"];
  return [causeWords(check, ready), "error"];
}

// A failed check in words: its cause when `/ready` told one (the admin); else only what it
// tells anyone, the failed check's name, and that signing in shows why (issue #34: the
// signed-out page guessed "the bot token was refused"). Redis's check has one cause.
function causeWords(name, ready) {
  if (name === "redis") return t("ready.redis.failed");
  const why = (ready.reasons || {})[name];
  const peer = t("ready.name." + name);
  if (!why || typeof why.reason !== "string") {
    return t("ready.failedSignIn", { peer: peer, check: name });
  }
  const key = "ready." + name + ".cause." + why.reason;
  if (known(key)) return t(key);
  return t("ready.failedCause", { peer: peer, cause: String(why.cause || why.reason) });
}

function utcMinute(unix) {
  return new Date(Number(unix) * 1000).toISOString().slice(0, 16).replace("T", " ");
}

// What is wrong although `/ready` passed, in plain words, most important first.
function problems(ready) {
  const out = [];
  const off = view.enabled === false || (view.enabled === null && ready.updates === "off");
  if (off) {
    out.push(t("ready.problem.off"));
  } else if (ready.updates === "off") {
    out.push(t("ready.problem.updatesOff"));  // switched on a moment ago: not polling yet
  } else if (ready.updates !== undefined && !isOk(ready.updates)) {
    out.push(t("ready.problem.updates", { reason: reasonWords(ready.updates, UPDATES_REASONS) }));
  }
  // Switched off, push is off too (nothing holds the EventSource): that is the one problem.
  if (ready.push !== undefined && !isOk(ready.push) && !(off && ready.push === "off")) {
    out.push(ready.push === "off" ? t("ready.problem.pushOff")
      : t("ready.problem.push", { reason: reasonWords(ready.push, PUSH_REASONS) }));
  }
  const waiting = ready.waiting || {};
  ["telegram", "jmap"].forEach(function (peer) {
    const w = waiting[peer];
    if (w && Number(w.entries) > 0) {
      out.push(t("ready.problem.waiting." + peer, { n: w.entries, time: utcMinute(w.since) }));
    }
  });
  if (view.delivery) {
    const streams = view.delivery.streams || {};
    const dead = Object.keys(streams).reduce(function (sum, name) {
      return sum + (Number(streams[name].dlq) || 0);
    }, 0);
    if (dead > 0) out.push(t("ready.problem.dlq", { n: dead }));
  }
  return out;
}

function showReady() {
  const ready = view.ready;
  $("ready-box").hidden = false;
  $("ready-problems").replaceChildren();
  $("ready-list").replaceChildren();
  if (ready === null) {
    say("ready-summary", t("ready.unknown"), "error");
    return;
  }
  if (ready.status !== "ready") {
    say("ready-summary", t(ready.configured ? "ready.notReady" : "ready.notLoaded"), "error");
  } else {
    const wrong = problems(ready);
    if (wrong.length > 0) say("ready-summary", t("ready.notAll"), "error");
    else if (session.token && view.delivery) say("ready-summary", t("ready.ready"), "ok");
    else say("ready-summary", t("ready.readySignedOut"), "ok");
    fillList("ready-problems", wrong);
  }
  PEERS.forEach(function (name) {
    const line = peerLine(name, ready);
    const li = document.createElement("li");
    li.dataset.peer = name === "mail" ? mailCheckOf(ready) || "mail" : name;
    li.textContent = line[0];
    if (line[1]) li.classList.add(line[1]);
    $("ready-list").appendChild(li);
  });
}

function showState() {
  const status = view.status;
  const signed = session.token !== null;
  if (status.settings_saved === true) say("setup-summary", t(signed ? "setup.readySignedIn" : "setup.ready"), "ok");
  else if (status.settings_saved === false) say("setup-summary", t(signed ? "setup.notConfiguredSignedIn" : "setup.notConfigured"));
  else say("setup-summary", t(signed ? "setup.runningSignedIn" : "setup.running"));  // a server that does not say
  // Processing off is the first thing a signed-in owner reads, with the switch beside it.
  say("processing-msg", t("status.processingOff"), "error");
  $("processing-row").hidden = !(signed && status.settings_saved === true && view.enabled === false);
}

// The signed-in part: the switch and the queues (each null when it could not be read).
async function readSignedIn() {
  if (!session.token) return { enabled: null, delivery: null };
  const [enabled, delivery] = await Promise.all([
    api("GET", "/api/enabled", undefined, true).catch(function () { return null; }),
    api("GET", "/api/delivery", undefined, true).catch(function () { return null; }),
  ]);
  return { enabled: enabled && typeof enabled.enabled === "boolean" ? enabled.enabled : null,
    delivery: delivery };
}

export async function loadStatus() {
  say("setup-summary", t("setup.checking"));
  $("setup-missing-box").hidden = true;
  $("ready-box").hidden = true;
  $("processing-row").hidden = true;
  await readStatus();
}

// Read and show the status; `loadStatus` first blanks the card, a live read does not.
async function readStatus() {
  const run = ++view.run;  // a later call wins: an earlier answer arriving late is dropped
  try {
    const status = await api("GET", "/api/status");
    if (run !== view.run) return;
    view.status = status;
    $("setup-version").textContent = status.version || "—";
    if (status.ready === true) {
      if (!session.token) $("auth-card").hidden = false;
      const answers = await Promise.all([readReady(), readSignedIn()]);
      if (run !== view.run) return;
      view.enabled = answers[1].enabled;
      view.delivery = answers[1].delivery;
      view.ready = answers[0];
      showState();
      showReady();
      document.dispatchEvent(new CustomEvent("mw:status", { detail: view.ready }));
    } else if (status.mode === "configuration-setup") {
      say("setup-summary", t("setup.setupMode"), "error");
      fillList("setup-missing", (status.missing || []).filter(function (name) {
        return name === "REDIS_URL" || name === "CONFIG_ENCRYPTION_KEY";
      }).map(function (name) { return t("setup.variable." + name); }));
      $("setup-missing-box").hidden = false;
      $("auth-card").hidden = true;
    } else {
      say("setup-summary", t("setup.unknown"), "error");
      $("auth-card").hidden = true;
    }
  } catch (err) {
    if (run !== view.run) return;
    say("setup-summary", t("setup.unknown"), "error");
    $("auth-card").hidden = true;
  }
}

// One live read, unless the page is hidden or the last read is still out (a slow probe).
async function liveTick() {
  if (document.visibilityState !== "visible" || view.busy) return;
  view.busy = true;
  try { await readStatus(); } finally { view.busy = false; }
}

// Switch processing on from the status card; the service card's switch follows (`mw:enabled`).
async function switchOn() {
  $("processing-on").disabled = true;
  try {
    const data = await api("PUT", "/api/enabled", { enabled: true }, true);
    document.dispatchEvent(new CustomEvent("mw:enabled", { detail: data.enabled === true }));
  } catch (err) {
    if (session.token) say("processing-msg", t("status.switchFailed"), "error");
  } finally {
    $("processing-on").disabled = false;
  }
}

// The card's part behind sign-in (main.js hands it to session.js with the cards): a session
// re-reads the status with the switch and the queues; its end shows the signed-out words.
export const signedIn = {
  load: loadStatus,
  reset: function () {
    view.enabled = null;
    view.delivery = null;
    if (view.status && view.status.ready === true) {
      showState();
      showReady();
    }
  },
  wire: function () {},
};

export function wire() {
  $("setup-recheck").addEventListener("click", loadStatus);
  $("processing-on").addEventListener("click", switchOn);
  document.addEventListener("mw:enabled", function () { loadStatus(); });
  document.addEventListener("mw:saved", function () {
    view.mailCheck = null;  // the source may have changed: the next answer says which
    liveTick();
  });
  document.addEventListener("visibilitychange", liveTick);
  setInterval(liveTick, LIVE_MS);
}
