// Card 1, service status: setup mode (with the missing variables), running but nothing saved
// yet, or configured; and what `/ready` says, one line per check, in words.
import { api, session } from "./api.js";
import { $, fillList, say } from "./dom.js";
import { known, t } from "./i18n.js";

// The checks `/ready` runs, in the order shown. `configured` is not a peer: when it fails the
// peers were not probed (they need a configuration).
const PEERS = ["redis", "jmap", "telegram", "push"];
const PROBED = ["jmap", "telegram"];

// `/ready` answered: 200 with a boolean per check (and push as a label), or 503 with the names
// of the failed checks in `x-ready-failed`; null when it could not be read at all.
async function readReady() {
  let response;
  try {
    response = await fetch("/ready", { credentials: "omit", cache: "no-store",
      redirect: "error", referrerPolicy: "no-referrer", headers: { Accept: "application/json" } });
  } catch (err) {
    return null;
  }
  if (response.ok) {
    try { return await response.json(); } catch (err) { return null; }
  }
  const header = response.headers.get("x-ready-failed");
  if (header === null) return null;
  const failed = header.split(",").map(function (name) { return name.trim(); });
  const answer = { status: "not_ready", configured: failed.indexOf("configured") < 0 };
  ["redis"].concat(PROBED).forEach(function (name) { answer[name] = failed.indexOf(name) < 0; });
  return answer;
}

// `/ready` says why push is degraded in the server's English (`push_lifecycle.REASONS`); the
// page shows the callbacks card's words for that reason, in its language.
const PUSH_REASONS = {
  "subscription expired": "expired", "subscription not verified in time": "not_verified",
  "server check failed": "check_failed", "renewal failed": "renewal_failed",
  "subscription lost, re-create failed": "recreate_failed",
  "subscription lost, callback URL unknown": "url_unknown",
};

function pushWords(label) {
  if (label === "ok") return t("ready.push.ok");
  if (label === "off") return t("ready.push.off");
  const reason = String(label).replace(/^degraded:\s*/, "");
  const key = "callbacks.reason." + PUSH_REASONS[reason];
  return t("ready.push.degraded", { reason: known(key) ? t(key) : reason });
}

// One line per peer: [text, "ok" | "error" | ""].
function peerLine(name, ready) {
  if (name === "push") {
    if (ready.status !== "ready") return [t("ready.push.unknown"), ""];
    return [pushWords(ready.push), ready.push === "ok" ? "ok" : ""];
  }
  if (PROBED.indexOf(name) >= 0 && !ready.configured) return [t("ready." + name + ".skipped"), ""];
  if (ready[name]) return [t("ready." + name + ".ok"), "ok"];
  return [t("ready." + name + ".failed"), "error"];
}

function showReady(ready) {
  $("ready-box").hidden = false;
  if (ready === null) say("ready-summary", t("ready.unknown"), "error");
  else if (ready.status === "ready") say("ready-summary", t("ready.ready"), "ok");
  else say("ready-summary", t(ready.configured ? "ready.notReady" : "ready.notLoaded"), "error");
  const list = $("ready-list");
  list.replaceChildren();
  if (ready === null) return;
  PEERS.forEach(function (name) {
    const line = peerLine(name, ready);
    const li = document.createElement("li");
    li.dataset.peer = name;
    li.textContent = line[0];
    if (line[1]) li.classList.add(line[1]);
    list.appendChild(li);
  });
}

function showState(status) {
  if (status.settings_saved === true) say("setup-summary", t("setup.ready"), "ok");
  else if (status.settings_saved === false) say("setup-summary", t("setup.notConfigured"));
  else say("setup-summary", t("setup.running"));  // a server that does not say
}

export async function loadStatus() {
  say("setup-summary", t("setup.checking"));
  $("setup-missing-box").hidden = true;
  $("ready-box").hidden = true;
  try {
    const status = await api("GET", "/api/status");
    $("setup-version").textContent = status.version || "—";
    if (status.ready === true) {
      showState(status);
      if (!session.token) $("auth-card").hidden = false;
      showReady(await readReady());
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

export function wire() {
  $("setup-recheck").addEventListener("click", loadStatus);
}
