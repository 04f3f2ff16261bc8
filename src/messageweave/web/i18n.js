// The page's strings and the functions that show them. Every user-visible string of the page, in
// both languages, lives in the strings-*.js modules and nowhere else: strings-common.js (header,
// status, readiness, sign-in, session, shared texts), strings-config.js (service, runtime, the
// business form and its fields), strings-rules.js (notification rules, quiet hours, digest, bot
// language, dry run), strings-ops.js (callbacks, chats, delivery, gap audit, logs, trace),
// strings-accounts.js (the accounts card, the owner's sign-in).
// Each entry is `key: [English, Chinese]`, so a key cannot exist in one language only.
// index.html names its static texts by key (`data-i18n`, `data-i18n-placeholder`,
// `data-i18n-aria`); the modules call `t(key, vars)` from here and never import a strings module.
import { TEXTS as ACCOUNTS } from "./strings-accounts.js";
import { TEXTS as COMMON } from "./strings-common.js";
import { TEXTS as CONFIG } from "./strings-config.js";
import { TEXTS as OPS } from "./strings-ops.js";
import { TEXTS as RULES } from "./strings-rules.js";

// The two tables by language, as the page exposes them to its tests (`window.__mw.messages`).
// A key in two strings modules stops the page from loading rather than one text silently
// replacing the other.
export const MESSAGES = { en: {}, zh: {} };
for (const table of [COMMON, CONFIG, RULES, OPS, ACCOUNTS]) {
  for (const [key, [en, zh]] of Object.entries(table)) {
    if (Object.prototype.hasOwnProperty.call(MESSAGES.en, key)) {
      throw new Error(`i18n: the key "${key}" is defined in two strings-*.js modules`);
    }
    MESSAGES.en[key] = en;
    MESSAGES.zh[key] = zh;
  }
}

export const lang = (function () {
  const first = (navigator.languages && navigator.languages[0]) || navigator.language || "en";
  return first.toLowerCase().startsWith("zh") ? "zh" : "en";
})();

// Keys asked for but absent from the table (a test expects none).
export const missing = [];

export function t(key, vars) {
  let text = MESSAGES[lang][key];
  if (text === undefined) {
    missing.push(key);
    text = MESSAGES.en[key] !== undefined ? MESSAGES.en[key] : key;
  }
  if (vars) {
    text = text.replace(/\{(\w+)\}/g, function (whole, name) {
      return Object.prototype.hasOwnProperty.call(vars, name) ? String(vars[name]) : whole;
    });
  }
  return text;
}

// Whether the table has `key`: for keys built from a server value (a reason, a trigger).
export function known(key) {
  return MESSAGES.en[key] !== undefined;
}

// A time the page shows, always in UTC and labelled so (docs/reference.md §3.1):
// "2026-05-01 14:05:03 UTC", with `ms` "2026-05-01 14:05:03.123 UTC". `at` is an ISO string,
// or a Unix time in seconds (in milliseconds when above 1e12); "—" for none.
export function utcTime(at, ms) {
  if (at === null || at === undefined || at === "") return "—";
  const number = Number(at);
  const date = Number.isFinite(number) ? new Date(number > 1e12 ? number : number * 1000)
    : new Date(String(at));
  if (Number.isNaN(date.getTime())) return String(at);
  const text = date.toISOString().replace("T", " ").replace(/Z$/, "");
  return t("time.utc", { time: ms ? text : text.replace(/\.\d{3}$/, "") });
}

// A stream's name in words ("mail queue", "chat queue"); the key itself for one the table
// does not know. The keys keep their names (`stalwart:jmap`), shown only as a tooltip.
export function queueName(stream) {
  return known("queue." + stream) ? t("queue." + stream) : String(stream);
}

export function applyI18n() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  document.querySelectorAll("[data-i18n]").forEach(function (el) {
    el.textContent = t(el.dataset.i18n);
  });
  document.querySelectorAll("[data-i18n-placeholder]").forEach(function (el) {
    el.placeholder = t(el.dataset.i18nPlaceholder);
  });
  document.querySelectorAll("[data-i18n-aria]").forEach(function (el) {
    el.setAttribute("aria-label", t(el.dataset.i18nAria));
  });
}
