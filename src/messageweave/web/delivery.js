// Card "Delivery": per stream what waits, what is being sent (or waits for its retry) and what
// failed for good, and the dead-letter queue listed and replayed. The stream's length counts
// delivered entries too, until they are trimmed (issue #22): what waits and what is done and
// kept in history are shown apart, so a history never reads as a backlog (issue #34). The
// streams are named in words ("mail queue"), their keys in the tooltip.
import { api, isMissingRoute, reasonOf, session } from "./api.js";
import { $, say } from "./dom.js";
import { queueName, t, utcTime } from "./i18n.js";

// Entries the stream still holds that are neither waiting nor being sent: done (delivered,
// skipped or dead-lettered), kept until the trim. "—" when the server does not say.
function keptInHistory(s) {
  if (s.unread === undefined || s.length === undefined) return "—";
  return Math.max(0, Number(s.length) - Number(s.unread) - Number(s.pending));
}

function queueCell(name) {
  const cell = document.createElement("th");
  cell.scope = "row";
  cell.textContent = queueName(name);
  cell.title = name;
  return cell;
}

async function loadDelivery() {
  say("delivery-msg", "");
  try {
    const data = await api("GET", "/api/delivery", undefined, true);
    const rows = $("delivery-rows");
    rows.replaceChildren();
    Object.keys(data.streams || {}).forEach(function (name) {
      const s = data.streams[name];
      const tr = document.createElement("tr");
      // `unread` is new (issue #22): an older server does not say what waits ("—").
      const waiting = s.unread === undefined ? "—" : s.unread;
      tr.appendChild(queueCell(name));
      [waiting, s.pending, s.dlq, keptInHistory(s)].forEach(function (value) {
        const cell = document.createElement("td");
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
      text.textContent = t("delivery.dlqEntry", Object.assign({}, entry,
        { failed_at: at ? utcTime(at) : "—" }));
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

export function load() {
  loadDelivery();
}

export function reset() {
  say("delivery-msg", "");
  say("dlq-msg", "");
  ["dlq-list", "delivery-rows"].forEach(function (id) { $(id).replaceChildren(); });
}

export function wire() {
  $("delivery-refresh").addEventListener("click", loadDelivery);
  $("dlq-show").addEventListener("click", showDlq);
  $("dlq-replay-selected").addEventListener("click", function () { replayDlq(false); });
  $("dlq-replay-all").addEventListener("click", function () { replayDlq(true); });
}
