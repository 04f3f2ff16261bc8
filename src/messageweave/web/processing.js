// Card "Service": the business-processing switch (`/api/enabled`) and the four runtime
// parameters (`/api/config`).
import { api, reasonOf, session } from "./api.js";
import { addHelp, withLabels } from "./business-form.js";
import { $, say } from "./dom.js";
import { t } from "./i18n.js";

function showEnabled(on) {
  $("enabled").checked = on;
  $("enabled-state").textContent = t(on ? "service.on" : "service.off");
}

async function loadEnabled() {
  try {
    const data = await api("GET", "/api/enabled", undefined, true);
    showEnabled(data.enabled === true);
  } catch (err) {
    say("enabled-msg", t("service.enabledFailed", { reason: reasonOf(err) }), "error");
  }
}

async function toggleEnabled() {
  const wanted = $("enabled").checked;
  $("enabled").disabled = true;
  try {
    const data = await api("PUT", "/api/enabled", { enabled: wanted }, true);
    showEnabled(data.enabled === true);
    say("enabled-msg", t("service.enabledSaved", { state: t(data.enabled ? "service.on" : "service.off") }), "ok");
    document.dispatchEvent(new CustomEvent("mw:enabled", { detail: data.enabled === true }));
  } catch (err) {
    if (session.token) {
      showEnabled(!wanted);
      say("enabled-msg", t("service.enabledFailed", { reason: reasonOf(err) }), "error");
    }
  } finally {
    $("enabled").disabled = false;
  }
}

const RUNTIME_FIELDS = ["jmap_timeout_ms", "telegram_timeout_ms", "llm_timeout_ms", "max_retries"];
// The label of each parameter, for the server's messages (`max_retries must be at most 5`).
const RUNTIME_LABELS = { jmap_timeout_ms: "runtime.jmapTimeout",
  telegram_timeout_ms: "runtime.telegramTimeout", llm_timeout_ms: "runtime.llmTimeout",
  max_retries: "runtime.maxRetries" };
const RUNTIME_DEFAULTS = { jmap_timeout_ms: 15000, telegram_timeout_ms: 10000, llm_timeout_ms: 30000, max_retries: 3 };

function fillRuntime(values) {
  RUNTIME_FIELDS.forEach(function (name) { $("rt-" + name).value = String(values[name]); });
}

async function loadRuntime() {
  $("runtime-save").disabled = true;
  try {
    fillRuntime(await api("GET", "/api/config", undefined, true));
    $("runtime-save").disabled = false;
    say("runtime-msg", t("runtime.loaded"));
  } catch (err) {
    if (session.token) say("runtime-msg", t("runtime.failed", { reason: reasonOf(err) }), "error");
  }
}

async function saveRuntime(event) {
  event.preventDefault();
  const body = {};
  for (const name of RUNTIME_FIELDS) {
    const input = $("rt-" + name);
    const value = Number(input.value);
    if (input.value.trim() === "" || !Number.isInteger(value) ||
        value < Number(input.min) || value > Number(input.max)) {
      say("runtime-msg", t("runtime.outOfRange"), "error");
      input.focus();
      return;
    }
    body[name] = value;
  }
  try {
    fillRuntime(await api("PUT", "/api/config", body, true));
    say("runtime-msg", t("runtime.saved"), "ok");
  } catch (err) {
    if (!session.token) return;
    if (err.status >= 500) $("runtime-save").disabled = true;
    const reason = err.configError && withLabels(err.configError, function (word) {
      return RUNTIME_LABELS[word];
    });
    say("runtime-msg", reason ? t("biz.rejected", { reason: reason })
      : t("runtime.failed", { reason: reasonOf(err) }), "error");
  }
}

export function load() {
  loadEnabled();
  loadRuntime();
}

export function reset() {
  say("runtime-msg", "");
  say("enabled-msg", "");
}

export function wire() {
  RUNTIME_FIELDS.forEach(function (name) { addHelp($("rt-" + name), name); });
  // Max retries' help says what it does not count: a peer out of reach waits for the retry
  // window (issue #34: the trace showed 7 retries under "Max retries 3", unexplained).
  const retries = $("h-max_retries");
  retries.dataset.i18n = "runtime.retryWindow";
  retries.textContent = t("runtime.retryWindow");
  $("enabled").addEventListener("change", toggleEnabled);
  // Switched elsewhere on the page (the status card, the first save): show it here too.
  document.addEventListener("mw:enabled", function (event) {
    if (event.detail === true || event.detail === false) showEnabled(event.detail);
  });
  $("runtime-form").addEventListener("submit", saveRuntime);
  $("runtime-reload").addEventListener("click", loadRuntime);
  $("runtime-defaults").addEventListener("click", function () {
    fillRuntime(RUNTIME_DEFAULTS);
    say("runtime-msg", t("runtime.defaultsShown"));
  });
}
