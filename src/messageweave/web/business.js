// Card 3, business configuration: the readback prefilled (secrets only marked as set), save
// (first full, then changes with the revision), test connection, and the generate buttons.
import { api, reasonOf, session } from "./api.js";
import {
  baselineFrom, changedFields, checkLlm, checkTokens, FIELDS, FormError, fullWire, label,
  randomToken, readForm, TOKEN_FIELDS,
} from "./business-form.js";
import { $, fillList, say } from "./dom.js";
import { t } from "./i18n.js";
import { selectZone } from "./zones.js";

const state = { configured: false, revision: 0, baseline: null, secretsPresent: {} };

export function savedState() {
  return { configured: state.configured, revision: state.revision };
}

function generateSecret(name) {
  const el = $("f-" + name);
  el.type = "text";  // visible so it can be copied before saving; prefill hides it again
  el.value = randomToken();
  const marker = $("m-" + name);
  marker.textContent = t("marker.generated");
  marker.classList.remove("ok");
  updateDirty();
}

function formError(err) {
  if (!(err instanceof FormError)) throw err;
  say("biz-error", err.message, "error");
  if (err.field) $("f-" + err.field).focus();
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
    if (kind === "secret") {
      el.value = "";
      el.type = "password";
      el.required = !state.configured && name !== "llm_api_key";
      const marker = $("m-" + name);
      marker.textContent = t(state.secretsPresent[name] ? "marker.set" : "marker.notSet");
      marker.classList.toggle("ok", state.secretsPresent[name] === true);
    } else if (kind === "bool") {
      el.checked = value === true;
    } else if (kind === "intlist" || kind === "strlist") {
      el.value = value.map(String).join(", ");
    } else if (name === "timezone") {
      selectZone(value || "Asia/Shanghai");
    } else {
      el.value = value === null ? "" : String(value);
    }
  });
  say("biz-state", state.configured ? t("biz.configured", { n: state.revision }) : t("biz.notConfigured"));
  updateDirty();
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

// Callbacks are registered from the saved configuration, so only with no unsaved change.
export function updateDirty() {
  $("cb-register").disabled = !(state.configured && !isDirty());
}

function warningLines(warnings) {
  return (warnings || []).map(function (w) {
    return t("biz.warning", { component: w.component, step: w.step, detail: w.detail });
  });
}

async function saveBusiness(event) {
  event.preventDefault();
  ["biz-error", "biz-msg", "preflight-result"].forEach(function (id) { say(id, ""); });
  $("biz-warnings").replaceChildren();
  $("preflight-issues").replaceChildren();
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
  try {
    const result = await api("PUT", "/api/business-config", body, true);
    await loadBusiness();
    if (result.runtime_applied) {
      say("biz-msg", t("biz.saved", { n: result.revision }), "ok");
    } else {
      say("biz-msg", t("biz.savedNotApplied", { n: result.revision }), "error");
      fillList("biz-warnings", warningLines(result.warnings));
    }
  } catch (err) {
    if (!session.token) return;
    if (err.status === 409) {
      await loadBusiness();
      say("biz-error", t("biz.conflict"), "error");
    } else if (err.status === 422) {
      say("biz-error", err.configError ? t("biz.rejected", { reason: err.configError })
        : t("biz.rejectedGeneric"), "error");
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

async function testConnection() {
  ["biz-error", "biz-msg"].forEach(function (id) { say(id, ""); });
  $("preflight-issues").replaceChildren();
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
  say("preflight-result", t("biz.testing"));
  $("biz-test").disabled = true;
  try {
    const result = await api("POST", "/api/business-config/preflight", body, true);
    const lines = [];
    if (!result.validation || !result.validation.ok) {
      say("preflight-result", t("biz.testInvalid"), "error");
      fillList("preflight-issues", (result.validation && result.validation.errors) || []);
      return;
    }
    let allOk = true;
    ["jmap", "llm"].forEach(function (name) {
      const component = result.components && result.components[name];
      if (!component) {
        lines.push(t("biz.componentSkipped", { component: name }));
      } else if (component.ok) {
        lines.push(t("biz.componentOk", { component: name }));
      } else {
        allOk = false;
        lines.push(t("biz.componentFailed", { component: name }));
        lines.push.apply(lines, warningLines(component.errors));
      }
    });
    say("preflight-result", t("biz.testOk"), allOk ? "ok" : "error");
    fillList("preflight-issues", lines);
  } catch (err) {
    if (session.token) say("preflight-result", t("biz.failed", { reason: reasonOf(err) }), "error");
  } finally {
    $("biz-test").disabled = false;
  }
}

export function load() {
  loadBusiness();
}

export function reset() {
  TOKEN_FIELDS.forEach(function (name) { $("f-" + name).type = "password"; });
  state.configured = false;
  state.revision = 0;
  state.baseline = null;
  ["biz-msg", "biz-error", "preflight-result", "biz-state"].forEach(function (id) { say(id, ""); });
  ["biz-warnings", "preflight-issues"].forEach(function (id) { $(id).replaceChildren(); });
}

export function wire() {
  $("biz-form").addEventListener("submit", saveBusiness);
  $("biz-form").addEventListener("input", updateDirty);
  $("biz-form").addEventListener("change", updateDirty);
  $("biz-test").addEventListener("click", testConnection);
  document.querySelectorAll("[data-generate]").forEach(function (button) {
    const name = button.dataset.generate;
    button.setAttribute("aria-label", t("biz.generateFor", { field: label(name) }));
    button.addEventListener("click", function () { generateSecret(name); });
  });
  $("biz-reload").addEventListener("click", function () {
    ["biz-error", "biz-msg", "preflight-result"].forEach(function (id) { say(id, ""); });
    loadBusiness();
  });
}
