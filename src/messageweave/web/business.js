// Card 3, business configuration: the readback prefilled (secrets only marked as set), save
// (first full, then changes with the revision), test connection, and the generate buttons.
import { api, reasonOf, session } from "./api.js";
import {
  addFieldHelp, baselineFrom, businessLabelKey, changedFields, checkLlm, checkTokens, FIELDS,
  FormError, fullWire, isSecret, label, randomToken, readForm, revealTokens, showGenerated,
  showValue, TOKEN_FIELDS, withLabels,
} from "./business-form.js";
import { showSource, wireSource } from "./business-imap.js";
import { $, say } from "./dom.js";
import { lang, t } from "./i18n.js";
import * as preflight from "./preflight.js";
import { certificateHint } from "./preflight.js";
import { loadStatus } from "./status.js";
import { browserZone, selectZone } from "./zones.js";

const state = {
  configured: false, revision: 0, baseline: null, secretsPresent: {}, generated: new Set(),
};
const SECRETS = FIELDS.filter(function (pair) { return isSecret(pair[1]); })
  .map(function (pair) { return pair[0]; });

export function savedState() {
  return { configured: state.configured, revision: state.revision };
}

// Whether the server holds a value for the secret `name` (a blank field keeps it).
export function hasSavedSecret(name) {
  return state.secretsPresent[name] === true;
}

// The cards that show other fields of the same configuration (the notification rules card):
// each readback is handed to them, so one read serves every card.
const readbackListeners = [];
export function onReadback(listener) {
  readbackListeners.push(listener);
}

// Another card saved only its own fields against this revision: this form's values still hold,
// only the revision to patch against moved.
export function adoptRevision(revision) {
  state.revision = revision;
  say("biz-state", t("biz.configured", { n: revision }));
}

// The marker under a secret follows its field: "Set" / "Not set" while it is empty, nothing
// once a value is typed (that value will be saved), "Generated…" for a generated one.
function updateMarker(name) {
  if (!state.baseline) return;  // before the readback nothing is known
  const typed = $("f-" + name).value.trim() !== "";
  if (!typed) state.generated.delete(name);
  const present = state.secretsPresent[name] === true;
  const marker = $("m-" + name);
  const generatedOnSave = !state.configured && TOKEN_FIELDS.indexOf(name) >= 0;
  if (typed) marker.textContent = state.generated.has(name) ? t("marker.generated") : "";
  else if (present) marker.textContent = t("marker.set");
  else marker.textContent = t(generatedOnSave ? "marker.generatedOnSave" : "marker.notSet");
  marker.classList.toggle("ok", !typed && present);
}

function generateSecret(name) {
  const el = $("f-" + name);
  el.type = "text";  // visible so it can be copied before saving; prefill hides it again
  el.value = randomToken();
  state.generated.add(name);
  updateMarker(name);
  updateDirty();
}

// The page's own check failed: the message, and every field it names marked and the first
// focused.
function formError(err) {
  if (!(err instanceof FormError)) throw err;
  say("biz-error", err.message, "error");
  revealTokens(err.fields);
  err.fields.forEach(function (name) { $("f-" + name).setAttribute("aria-invalid", "true"); });
  if (err.fields.length > 0) $("f-" + err.fields[0]).focus();
}

// A server message with the page's labels instead of the setting names.
function serverText(message) {
  return withLabels(message, businessLabelKey);
}

function prefill(body) {
  state.configured = body.configured === true;
  state.revision = body.revision || 0;
  state.secretsPresent = body.secrets_present || {};
  state.baseline = baselineFrom(body.values || {});
  FIELDS.forEach(function (pair) {
    const name = pair[0], kind = pair[1];
    const el = $("f-" + name);
    const value = state.baseline[name];
    if (isSecret(kind)) {
      el.value = "";
      el.type = "password";
      el.required = !state.configured && kind === "secret" && name !== "llm_api_key" &&
        TOKEN_FIELDS.indexOf(name) < 0;
      updateMarker(name);
    } else if (name === "timezone") {
      // A first setup proposes the browser's zone (when the server has it), not the
      // contract's default; a saved zone is shown as saved.
      selectZone((!state.configured && browserZone()) || value || "Asia/Shanghai");
    } else if (name === "bot_language" && !state.configured) {
      el.value = lang === "zh" ? "zh" : "en";  // the page's language, not the contract's zh
    } else {
      showValue(el, kind, value);
    }
  });
  showSource();
  say("biz-state", state.configured ? t("biz.configured", { n: state.revision }) : t("biz.notConfigured"));
  updateDirty();
  readbackListeners.forEach(function (listener) { listener(body); });
}

async function loadBusiness() {
  try {
    prefill(await api("GET", "/api/business-config", undefined, true));
  } catch (err) {
    if (session.token) say("biz-state", t("biz.loadFailed", { reason: reasonOf(err) }), "error");
  }
}

function isDirty() {
  if (!state.baseline) return true;
  try {
    return Object.keys(changedFields(readForm(), state.baseline)).length > 0;
  } catch (err) {
    return true;
  }
}

// Callbacks are registered from the saved configuration, so only with no unsaved change, and
// only when the settings use one (the callbacks card marks `data-nothing` otherwise).
export function updateDirty() {
  const nothing = $("cb-register").dataset.nothing === "1";
  $("cb-register").disabled = !(state.configured && !isDirty()) || nothing;
}

// The warnings of a save as red lines; a certificate failure's hint is repeated under its field.
function failureLines(warnings) {
  const hint = certificateHint(warnings, "f-");
  if (hint) say("cert-hint", hint, "error");
  return preflight.failureLines(warnings, "f-");
}

function clearResults() {
  ["biz-error", "biz-msg", "preflight-result", "cert-hint"].forEach(function (id) { say(id, ""); });
  ["biz-warnings", "preflight-issues"].forEach(function (id) { $(id).replaceChildren(); });
  document.querySelectorAll("#biz-form [aria-invalid]").forEach(function (el) {
    el.removeAttribute("aria-invalid");
  });
}

async function saveBusiness(event) {
  event.preventDefault();
  clearResults();
  showGenerated(null);
  let body;
  try {
    const values = readForm();
    checkLlm(values, state.secretsPresent.llm_api_key);
    checkTokens(values);
    if (state.configured) {
      body = changedFields(values, state.baseline);
      if (Object.keys(body).length === 0) {
        say("biz-msg", t("biz.nothing"));
        return;
      }
      body.revision = state.revision;
    } else {
      body = fullWire(values);
    }
  } catch (err) {
    formError(err);
    return;
  }
  $("biz-save").disabled = true;
  const first = !state.configured;
  try {
    const result = await api("PUT", "/api/business-config", body, true);
    await loadBusiness();
    showGenerated(result.generated);
    // The first save switches processing on: a new owner expects the bot to work now. If the
    // switch cannot be set, the status card says processing is off, with the switch beside it.
    const switched = first ? await switchOn() : false;
    loadStatus();  // the status card now says "configured"
    document.dispatchEvent(new CustomEvent("mw:saved"));  // the callbacks card re-reads
    const on = switched ? " " + t("biz.switchedOn") : "";
    if (result.runtime_applied) {
      say("biz-msg", t("biz.saved", { n: result.revision }) + on, "ok");
    } else {
      say("biz-msg", t("biz.savedOnly", { n: result.revision }) + on, "ok");
      preflight.report("biz-warnings", [{ text: t("biz.notApplied"), kind: "error" }]
        .concat(failureLines(result.warnings)), "f-");
    }
  } catch (err) {
    if (!session.token) return;
    if (err.status === 409) {
      await loadBusiness();
      say("biz-error", t("biz.conflict"), "error");
    } else if (err.status === 422) {
      const reason = err.configError && serverText(err.configError);
      say("biz-error", reason ? t("biz.rejected", { reason: reason }) : t("biz.rejectedGeneric"),
        "error");
    } else if (err.status === 400) {
      say("biz-error", t("biz.badRequest"), "error");
    } else if (err.status === 503) {
      say("biz-error", t("biz.unavailable"), "error");
    } else {
      say("biz-error", t("biz.failed", { reason: reasonOf(err) }), "error");
    }
  } finally {
    $("biz-save").disabled = false;
  }
}

// PUT /api/enabled true; whether it worked. The service card's switch follows.
async function switchOn() {
  try {
    const data = await api("PUT", "/api/enabled", { enabled: true }, true);
    document.dispatchEvent(new CustomEvent("mw:enabled", { detail: data.enabled === true }));
    return data.enabled === true;
  } catch (err) {
    return false;
  }
}

async function testConnection() {
  clearResults();
  let body;
  try {
    const values = readForm();
    checkTokens(values);
    // With a saved configuration the server merges the changes onto it: no secret re-typing.
    body = state.configured ? changedFields(values, state.baseline) : fullWire(values);
  } catch (err) {
    formError(err);
    return;
  }
  $("biz-test").disabled = true;
  try {
    const result = await preflight.testConnection(body,
      { result: "preflight-result", issues: "preflight-issues" }, "f-", serverText);
    const jmap = result && result.components && result.components.jmap;
    const hint = certificateHint(jmap && jmap.errors, "f-");
    if (hint) say("cert-hint", hint, "error");
  } catch (err) {
    if (session.token) say("preflight-result", t("biz.failed", { reason: reasonOf(err) }), "error");
  } finally {
    $("biz-test").disabled = false;
  }
}

export function load() {
  return loadBusiness();
}

export function reset() {
  TOKEN_FIELDS.forEach(function (name) { $("f-" + name).type = "password"; });
  state.configured = false;
  state.revision = 0;
  state.baseline = null;
  state.generated.clear();
  SECRETS.forEach(function (name) { say("m-" + name, ""); });
  clearResults();
  showGenerated(null);
  $("biz-tokens").open = false;
  say("biz-state", "");
}

export function wire() {
  addFieldHelp();
  wireSource();
  $("biz-form").addEventListener("submit", saveBusiness);
  $("biz-form").addEventListener("input", function (event) {
    const name = event.target.id.replace(/^f-/, "");
    if (SECRETS.indexOf(name) >= 0) updateMarker(name);
    updateDirty();
  });
  $("biz-form").addEventListener("change", updateDirty);
  $("biz-test").addEventListener("click", testConnection);
  document.querySelectorAll("[data-generate]").forEach(function (button) {
    const name = button.dataset.generate;
    button.setAttribute("aria-label", t("biz.generateFor", { field: label(name) }));
    button.addEventListener("click", function () { generateSecret(name); });
  });
  $("biz-reload").addEventListener("click", function () {
    clearResults();
    showGenerated(null);
    loadBusiness();
  });
}
