// Card 3, business configuration: the readback prefilled (secrets only marked as set), save
// (first full, then changes with the revision), test connection, and the generate buttons.
import { api, reasonOf, session } from "./api.js";
import {
  addFieldHelp, baselineFrom, businessLabelKey, changedFields, checkLlm, checkTokens, FIELDS,
  FormError, fullWire, isSecret, label, randomToken, readForm, revealTokens, showGenerated,
  TOKEN_FIELDS, withLabels,
} from "./business-form.js";
import { imapLines, showSource, wireSource } from "./business-imap.js";
import { $, say } from "./dom.js";
import { known, lang, t } from "./i18n.js";
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
    } else if (kind === "bool") {
      el.checked = value === true;
    } else if (kind === "intlist" || kind === "strlist" || kind === "names") {
      el.value = value.map(String).join(", ");
    } else if (name === "timezone") {
      // A first setup proposes the browser's zone (when the server has it), not the
      // contract's default; a saved zone is shown as saved.
      selectZone((!state.configured && browserZone()) || value || "Asia/Shanghai");
    } else if (name === "bot_language" && !state.configured) {
      el.value = lang === "zh" ? "zh" : "en";  // the page's language, not the contract's zh
    } else {
      el.value = value === null ? "" : String(value);
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

// `host:port` of the session URL in the form, for the openssl command of the hint.
function serverAddress() {
  try {
    const url = new URL($("f-jmap_session_url").value.trim());
    return url.hostname + ":" + (url.port || "443");
  } catch (err) {
    return "mail.example.com:443";
  }
}

// A JMAP warning whose TLS verification failed (OpenSSL's reason code), in words; or null.
function certificateHint(warnings) {
  const failed = (warnings || []).find(function (w) {
    return w.component === "jmap" && /CERTIFICATE_VERIFY_FAILED/.test(w.detail || "");
  });
  if (!failed) return null;
  return /self[- ]signed|local issuer/i.test(failed.detail)
    ? t("biz.certSelfSigned", { host: serverAddress() }) : t("biz.certUntrusted");
}

// The warnings as red lines; a certificate failure adds its hint, which links to the field
// and is repeated under it.
function failureLines(warnings) {
  const lines = (warnings || []).map(function (w) {
    const key = "biz.component." + w.component;
    return { text: t("biz.warning", { component: known(key) ? t(key) : w.component,
      step: w.step, detail: w.detail }), kind: "error" };
  });
  const hint = certificateHint(warnings);
  if (hint) {
    lines.push({ text: hint, kind: "error", field: "jmap_ca_pem" });
    say("cert-hint", hint, "error");
  }
  return lines;
}

// One item per line, each coloured by its own outcome ("ok", "error" or none), so a success
// never shows in red beside a failure, nor a failure in green.
function report(id, lines) {
  const list = $(id);
  list.replaceChildren();
  lines.forEach(function (line) {
    const li = document.createElement("li");
    if (line.kind) li.classList.add(line.kind);
    if (line.field) {
      const link = document.createElement("a");
      link.href = "#f-" + line.field;
      link.textContent = line.text;
      link.addEventListener("click", function (event) {
        event.preventDefault();
        $("f-" + line.field).focus();
      });
      li.appendChild(link);
    } else {
      li.textContent = line.text;
    }
    list.appendChild(li);
  });
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
      report("biz-warnings", [{ text: t("biz.notApplied"), kind: "error" }]
        .concat(failureLines(result.warnings)));
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

// A preflight's Telegram failure in the page's words (the token, or the address), linked to
// the field to fix; then the server's own detail.
function telegramLines(errors) {
  const detail = String((errors && errors[0] && errors[0].detail) || "");
  const lines = [];
  if (/^Telegram refused the bot token/.test(detail)) {
    lines.push({ text: t("biz.telegramRefused"), kind: "error", field: "bot_token" });
  } else if (/^the Bot API could not be reached/.test(detail)) {
    lines.push({ text: t("biz.telegramUnreachable"), kind: "error", field: "telegram_api_base_url" });
  }
  return lines.concat(failureLines(errors));
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
  say("preflight-result", t("biz.testing"));
  $("biz-test").disabled = true;
  try {
    const result = await api("POST", "/api/business-config/preflight", body, true);
    const lines = [];
    if (!result.validation || !result.validation.ok) {
      say("preflight-result", t("biz.testInvalid"), "error");
      report("preflight-issues", ((result.validation && result.validation.errors) || [])
        .map(function (text) { return { text: serverText(text), kind: "error" }; }));
      return;
    }
    let allOk = true;
    // Telegram is tested too (issue #22): getMe for the token at the Bot API address. A
    // server that does not report it yet shows no line for it.
    // An IMAP wire (issue #33) has `mail` and `smtp` (null while no SMTP server is set) and
    // no `jmap`; a JMAP wire neither of the two.
    ["jmap", "mail", "smtp", "telegram", "llm"].forEach(function (name) {
      const component = result.components && result.components[name];
      const label = t("biz.component." + name);
      if (component === undefined && name === "telegram") return;
      if (!component && name !== "llm") return;
      if (!component) {
        lines.push({ text: t("biz.componentSkipped", { component: label }) });
      } else if (component.ok) {
        lines.push({ text: t(name === "telegram" ? "biz.telegramOk" : "biz.componentOk",
          { component: label }), kind: "ok" });
      } else {
        allOk = false;
        lines.push({ text: t("biz.componentFailed", { component: label }), kind: "error" });
        if (name === "mail" || name === "smtp") {
          lines.push.apply(lines, imapLines(name, component.errors));
        }
        lines.push.apply(lines, name === "telegram" ? telegramLines(component.errors)
          : failureLines(component.errors));
      }
    });
    // Replies from the chat need JMAP submission (issue #25): said, not counted as a failure.
    const replies = result.components && result.components.replies;
    if (replies && !replies.ok) {
      const smtpOff = replies.errors && replies.errors[0] && replies.errors[0].step === "smtp";
      lines.push(smtpOff ? { text: t("biz.repliesOffSmtp"), kind: "error", field: "smtp_host" }
        : { text: t("biz.repliesOff"), kind: "error" });
    }
    // The headline is the outcome: "passed" only when every probed peer answered.
    say("preflight-result", t(allOk ? "biz.testOk" : "biz.testFailed"), allOk ? "ok" : "error");
    report("preflight-issues", lines);
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
