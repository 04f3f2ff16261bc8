// Card "Gap audit": the last run (`GET /api/audit`) and "run now" (`POST /api/audit`), of the
// account chosen (issue #35: `?account=`; a paused account's run answers 409).
import { accountPaused, accountQuery, api, isMissingRoute, reasonOf, session } from "./api.js";
import { $, say } from "./dom.js";
import { known, t, utcTime } from "./i18n.js";

function gapTrigger(trigger) {
  const key = "gap.trigger." + trigger;
  return known(key) ? t(key) : String(trigger || "—");
}

function showGapLast(last) {
  if (!last) {
    say("gap-last", t("gap.never"));
    return;
  }
  const vars = { time: utcTime(last.at), trigger: gapTrigger(last.trigger) };
  if (last.ok === false) {
    say("gap-last", t("gap.lastFailed", Object.assign(vars, { error: last.error || "—" })), "error");
    return;
  }
  let text = t("gap.last", Object.assign(vars, { checked: last.checked, missing: last.missing,
    enqueued: last.enqueued }));
  if (last.complete === false) text += " " + t("gap.incomplete");
  say("gap-last", text, last.missing > 0 ? "error" : "ok");
}

function gapPath() {
  return "/api/audit" + accountQuery("?", $("gap-account").value);
}

// A failure in words: the 409 of a paused account, else `key` with the reason.
function gapFailure(err, key) {
  if (isMissingRoute(err)) return t("common.notAvailable", { feature: t("gap.title") });
  return err.status === 409 ? accountPaused($("gap-account").value)
    : t(key, { reason: reasonOf(err) });
}

async function loadGapAudit() {
  try {
    const data = await api("GET", gapPath(), undefined, true);
    showGapLast(data.last);
  } catch (err) {
    if (!session.token) return;
    say("gap-last", gapFailure(err, "gap.loadFailed"), "error");
  }
}

async function runGapAudit() {
  $("gap-run").disabled = true;
  say("gap-msg", t("gap.running"));
  try {
    const data = await api("POST", gapPath(), undefined, true);
    say("gap-msg", t("gap.done", data), data.missing > 0 ? "error" : "ok");
  } catch (err) {
    if (!session.token) return;
    say("gap-msg", gapFailure(err, "gap.failed"), "error");
  } finally {
    $("gap-run").disabled = false;
  }
  if (session.token) loadGapAudit();
}

export function load() {
  loadGapAudit();
}

export function reset() {
  say("gap-last", "");
  say("gap-msg", "");
  $("gap-run").disabled = false;
}

export function wire() {
  $("gap-run").addEventListener("click", runGapAudit);
  $("gap-account").addEventListener("change", function () {
    say("gap-msg", "");
    loadGapAudit();
  });
}
