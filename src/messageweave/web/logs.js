// Card "Logs": the send log (with its outcome filter) and the audit log, newest first, paged
// with `before`.
import { api, isMissingRoute, reasonOf, session } from "./api.js";
import { $, cell, say } from "./dom.js";
import { queueName, t, utcTime } from "./i18n.js";

const LOG_PAGE = 20;
const LOGS = {
  send: { path: "/api/logs/send", before: null, generation: 0, columns: function (r) {
    return [r.stream ? queueName(r.stream) : null, r.kind, r.chat_id, r.outcome, r.failure_class,
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

function logRow(name, record) {
  const tr = document.createElement("tr");
  tr.dataset.id = record.id;
  [utcTime(record.time, true)].concat(LOGS[name].columns(record)).forEach(function (value) {
    tr.appendChild(cell(value === null || value === undefined || value === "" ? "—"
      : String(value)));
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

export function load() {
  loadLog("send", false);
  loadLog("audit", false);
}

export function reset() {
  resetLog("send");
  resetLog("audit");
  $("send-outcome").value = "";
}

export function wire() {
  $("logs-refresh").addEventListener("click", load);
  $("send-outcome").addEventListener("change", function () { loadLog("send", false); });
  $("send-older").addEventListener("click", function () { loadLog("send", true); });
  $("audit-older").addEventListener("click", function () { loadLog("audit", true); });
}
