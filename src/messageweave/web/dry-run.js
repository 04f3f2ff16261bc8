// The dry run of the notification rules card: the rules and quiet hours in the editor, unsaved
// ones included, tried on the newest 20 mails of the notified mailboxes
// (`POST /api/rules/dry-run`), shown as "which mail would match which rule". Nothing is sent.
import { api, isMissingRoute, reasonOf, session } from "./api.js";
import { $, cell, say } from "./dom.js";
import { t } from "./i18n.js";

// Set by the card: `draft()` gives the body (or null when the page refused the editor), and
// `rejected(message)` shows a 422 next to the rule it names.
let draft = function () { return null; };
let rejected = function () {};
let generation = 0;

function sound(mail) {
  if (mail.action === "mute") return "—";
  if (mail.quiet) return t("dry.quiet");
  return t(mail.silent ? "dry.silent" : "dry.loud");
}

function row(mail) {
  const tr = document.createElement("tr");
  tr.dataset.emailId = mail.email_id;
  tr.dataset.rule = mail.rule || "";
  const muted = mail.action === "mute";
  tr.append(
    cell(mail.from || "—", "wrap"),
    cell(mail.subject || t("dry.noSubject"), "wrap"),
    cell(mail.rule === null || mail.rule === undefined ? t("dry.default") : mail.rule,
      mail.rule ? "" : "muted"),
    cell(t(muted ? "dry.mute" : "dry.notify")),
    cell(muted ? "—" : String(mail.chat_id)),
    cell(muted || mail.thread_id === null || mail.thread_id === undefined ? "—"
      : String(mail.thread_id)),
    cell(sound(mail)),
  );
  return tr;
}

function show(result) {
  const mails = result.mails || [];
  $("dry-rows").replaceChildren(...mails.map(row));
  $("dry-table").hidden = mails.length === 0;
  say("dry-msg", mails.length === 0 ? t("dry.none") : t("dry.done", { n: result.checked }), "ok");
}

async function run() {
  const body = draft();
  if (body === null) return;
  const mine = ++generation;
  $("dry-run").disabled = true;
  say("dry-msg", t("dry.running"));
  try {
    const result = await api("POST", "/api/rules/dry-run", body, true);
    if (mine === generation) show(result);
  } catch (err) {
    if (!session.token || mine !== generation) return;
    $("dry-table").hidden = true;
    if (err.status === 422) {
      say("dry-msg", "");
      rejected(err.configError);
    } else if (err.status === 503) {
      say("dry-msg", t("dry.unavailable"), "error");
    } else if (err.status === 409) {
      say("dry-msg", t("rules.needsConfig"), "error");
    } else if (isMissingRoute(err)) {
      say("dry-msg", t("common.notAvailable", { feature: t("dry.title") }), "error");
    } else {
      say("dry-msg", t("dry.failed", { reason: reasonOf(err) }), "error");
    }
  } finally {
    if (mine === generation) $("dry-run").disabled = false;
  }
}

export function reset() {
  generation++;
  $("dry-rows").replaceChildren();
  $("dry-table").hidden = true;
  say("dry-msg", "");
}

export function wire(draftBody, onRejected) {
  draft = draftBody;
  rejected = onRejected;
  $("dry-run").addEventListener("click", run);
}
