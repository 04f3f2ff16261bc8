// The business configuration form as data: its fields, how each is read and checked, and the
// wire a save sends (the full configuration first, then only what changed); the shared secrets
// the first save generates, and where the page shows them once.
import { $ } from "./dom.js";
import { t } from "./i18n.js";

// kind: text | nullable (blank = null) | pem (nullable, line ends as a textarea keeps them) |
// secret | nullsecret (blank = null on a first save) | int | intlist | strlist | names (split
// at commas only: a mailbox name may hold spaces) | bool | choice
export const FIELDS = [
  ["jmap_session_url", "text"], ["jmap_username", "text"], ["jmap_password", "secret"],
  ["account_id", "nullable"], ["jmap_ca_pem", "pem"], ["notify_mailbox_roles", "strlist"],
  ["reconcile_interval_s", "int"], ["bot_token", "secret"], ["telegram_chat_id", "int"],
  ["chat_allowlist", "intlist"], ["owner_user_ids", "intlist"], ["telegram_webhook_secret", "secret"],
  ["reconcile_token", "secret"], ["worker_token", "secret"],
  ["telegram_api_base_url", "text"], ["delivery_policy", "choice"],
  ["llm_enabled", "bool"], ["llm_allow_net", "bool"], ["llm_base_url", "nullable"],
  ["llm_model", "nullable"], ["llm_api_key", "secret"], ["timezone", "choice"],
  ["degraded_reconcile_interval_s", "int"], ["audit_interval_s", "int"],
  ["audit_window_s", "int"], ["push_mode", "choice"], ["bot_language", "choice"],
  ["telegram_updates", "choice"], ["read_in_chat", "bool"],
  // Issue #33: the mail source and its IMAP and SMTP fields (SPEC F.1).
  ["mail_source", "choice"], ["imap_host", "text"], ["imap_port", "int"],
  ["imap_security", "choice"], ["imap_username", "text"], ["imap_password", "secret"],
  ["imap_ca_pem", "pem"], ["imap_notify_mailboxes", "names"], ["smtp_host", "nullable"],
  ["smtp_port", "int"], ["smtp_security", "choice"], ["smtp_username", "nullable"],
  ["smtp_password", "nullsecret"], ["smtp_from", "nullable"],
];
// The shared secrets (`TOKEN_FIELDS`) are not among them: left empty, the first save leaves
// them out and the server generates them (issue #34).
const REQUIRED = ["bot_token", "telegram_chat_id", "chat_allowlist", "timezone", "llm_enabled",
  "llm_allow_net"];
// What else a first save needs, by the mail source chosen.
const REQUIRED_BY_SOURCE = {
  jmap: ["jmap_session_url", "jmap_username", "jmap_password"],
  imap: ["imap_host", "imap_username", "imap_password"],
};
const SECRET_KINDS = ["secret", "nullsecret"];
export function isSecret(kind) { return SECRET_KINDS.indexOf(kind) >= 0; }

// `fields`: every field the message names (the first gets the focus).
export class FormError extends Error {
  constructor(message, fields) {
    super(message);
    this.fields = [].concat(fields || []);
  }
}

export function label(name) { return t("field." + name); }

// The server's messages name settings as the original's environment did (`JMAP_SESSION_URL
// must be…`, `jmap_timeout_ms must be…`); the page shows its own label instead, in its own
// language. `labelKey(name)` is the i18n key of that label, or undefined for another word.
const SETTING_NAME = /\b(?:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b/g;
const SERVER_NAMES = { TG_WEBHOOK_SECRET: "telegram_webhook_secret" };
export function withLabels(message, labelKey) {
  return String(message).replace(SETTING_NAME, function (word) {
    const key = labelKey(word);
    return key ? t(key) : word;
  });
}

// The label key of a business setting named as the server's messages do.
export function businessLabelKey(word) {
  if (word !== word.toUpperCase()) return undefined;
  const name = SERVER_NAMES[word] || word.toLowerCase();
  return FIELDS.some(function (pair) { return pair[0] === name; }) ? "field." + name : undefined;
}

// A one-line help (`help.<name>`) under the field `el`, which names it in aria-describedby.
// A field alone in its grid cell is wrapped so that the line sits under it.
export function addHelp(el, name) {
  const help = document.createElement("span");
  help.className = "hint help";
  help.id = "h-" + name;
  help.dataset.i18n = "help." + name;
  help.textContent = t(help.dataset.i18n);
  const row = el.closest(".secret, .switch-row");
  if (row && row.classList.contains("switch-row")) {
    row.after(help);
  } else if (row) {
    row.appendChild(help);
  } else {
    const box = document.createElement("div");
    box.className = "field";
    el.replaceWith(box);
    box.append(el, help);
  }
  const described = el.getAttribute("aria-describedby");
  el.setAttribute("aria-describedby", described ? described + " " + help.id : help.id);
}

// Every business field gets its help line, but one that has its own in the page.
export function addFieldHelp() {
  FIELDS.forEach(function (pair) {
    if (!$("h-" + pair[0])) addHelp($("f-" + pair[0]), pair[0]);
  });
}

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;
function parseI64(raw) {
  const text = String(raw).trim();
  if (!/^-?\d+$/.test(text)) return null;
  const value = BigInt(text);
  return value < I64_MIN || value > I64_MAX ? null : value;
}

// A pasted certificate as the textarea holds it (LF line ends, no surrounding blank), or null.
function pemValue(raw) {
  const text = (raw || "").replace(/\r\n?/g, "\n").trim();
  return text === "" ? null : text;
}

// The form as canonical values: strings for text, BigInt for integers, arrays for lists. The
// accounts card holds the same inputs under its own id prefix (`a-f-`).
function readField(name, kind, prefix) {
  const el = $((prefix || "f-") + name);
  if (kind === "bool") return el.checked;
  const raw = el.value;
  switch (kind) {
    case "int": {
      if (raw.trim() === "") return null;
      const value = parseI64(raw);
      if (value === null) throw new FormError(t("biz.badInt", { field: label(name) }), name);
      return value;
    }
    case "intlist": {
      const parts = raw.split(/[\s,]+/).filter(Boolean);
      const values = parts.map(parseI64);
      const unique = new Set(values.map(String));
      if (values.some(function (v) { return v === null; }) || unique.size !== values.length) {
        throw new FormError(t("biz.badList", { field: label(name) }), name);
      }
      return values;
    }
    case "strlist":
      return raw.split(/[\s,]+/).filter(Boolean);
    case "names":
      return raw.split(/[,\n]/).map(function (name) { return name.trim(); }).filter(Boolean);
    case "nullable":
      return raw.trim() === "" ? null : raw.trim();
    case "pem":
      return pemValue(raw);
    case "secret":
    case "nullsecret":
      return raw;
    default:
      return raw.trim();
  }
}

export function readForm() {
  const values = {};
  FIELDS.forEach(function (pair) { values[pair[0]] = readField(pair[0], pair[1]); });
  return values;
}

// The fields `names` only, from the inputs `prefix + name`.
export function readFields(prefix, names) {
  const values = {};
  FIELDS.forEach(function (pair) {
    if (names.indexOf(pair[0]) >= 0) values[pair[0]] = readField(pair[0], pair[1], prefix);
  });
  return values;
}

export function kindOf(name) {
  const pair = FIELDS.find(function (p) { return p[0] === name; });
  return pair ? pair[1] : undefined;
}

function comparable(kind, value) {
  if (kind === "intlist") return value.map(String).sort().join(",");
  if (kind === "strlist" || kind === "names") return value.join("\n");
  return value === null ? "\u0000null" : String(value);
}

// The full wire for a first save: every required field must be filled, and every one left
// empty is named at once (the server's own message names only the first).
export function fullWire(values) {
  const wire = {};
  const missing = [];
  const required = REQUIRED.concat(REQUIRED_BY_SOURCE[values.mail_source] || []);
  FIELDS.forEach(function (pair) {
    const name = pair[0], kind = pair[1];
    let value = values[name];
    if (kind === "secret" && value.trim() === "") {
      if (TOKEN_FIELDS.indexOf(name) >= 0) return;  // left out: the server generates it
      value = name === "llm_api_key" ? null : "";
    }
    if (kind === "nullsecret" && value.trim() === "") value = null;
    if (required.indexOf(name) >= 0 &&
        (value === null || value === "" || (kind === "intlist" && value.length === 0))) {
      missing.push(name);
    }
    if (value === null && kind === "int") return;  // optional: the server default applies
    wire[name] = value;
  });
  if (missing.length > 0) {
    throw new FormError(t("biz.required", { field: missing.map(label).join(t("biz.listSep")) }),
      missing);
  }
  return wire;
}

// Only what differs from the readback (`baseline`); secrets only when typed. Only the fields
// `values` holds are compared.
export function changedFields(values, baseline) {
  const patch = {};
  FIELDS.forEach(function (pair) {
    const name = pair[0], kind = pair[1];
    if (!(name in values)) return;
    const value = values[name];
    if (isSecret(kind)) {
      if (value.trim() !== "") patch[name] = value;
      return;
    }
    if (value === null && kind === "int") return;  // a blank number cannot clear a field
    if (comparable(kind, value) !== comparable(kind, baseline[name])) patch[name] = value;
  });
  return patch;
}

// Shows a readback value (in `baselineFrom`'s shapes) in the input `el` of a field of `kind`
// that is not a secret.
export function showValue(el, kind, value) {
  if (kind === "bool") {
    el.checked = value === true;
  } else if (kind === "intlist" || kind === "strlist" || kind === "names") {
    el.value = value.map(String).join(", ");
  } else {
    el.value = value === null || value === undefined ? "" : String(value);
  }
}

// The readback's values in the form's canonical shapes (secrets are never read back).
export function baselineFrom(values) {
  const base = {};
  FIELDS.forEach(function (pair) {
    const name = pair[0], kind = pair[1];
    let value = values[name];
    if (isSecret(kind)) return;
    if (kind === "int") value = value === null || value === undefined ? null : BigInt(value);
    if (kind === "intlist") value = (value || []).map(function (v) { return BigInt(v); });
    if (kind === "strlist" || kind === "names") value = value || [];
    if (kind === "text") value = value || "";
    if (kind === "nullable") value = value === undefined || value === "" ? null : value;
    if (kind === "pem") value = pemValue(value);
    base[name] = value;
  });
  return base;
}

// The shared secrets that guard routes (reference §5.2): at least 16 characters, and the
// webhook secret only what Telegram's setWebhook accepts as secret_token.
export const TOKEN_FIELDS = ["telegram_webhook_secret", "reconcile_token", "worker_token"];
const MIN_TOKEN_CHARS = 16;
const URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// 32 url-safe characters; 256 is a multiple of 64, so `b & 63` keeps every one equally likely.
export function randomToken() {
  const bytes = new Uint8Array(32);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, function (b) { return URLSAFE[b & 63]; }).join("");
}

export function checkTokens(values) {
  TOKEN_FIELDS.forEach(function (name) {
    const value = values[name];
    if (value.trim() === "") return;  // blank: the saved value stays, or "required" says so
    if (value.trim().length < MIN_TOKEN_CHARS) {
      throw new FormError(t("biz.tooShort", { field: label(name), n: MIN_TOKEN_CHARS }), name);
    }
    if (name === "telegram_webhook_secret" && !/^[A-Za-z0-9_-]+$/.test(value)) {
      throw new FormError(t("biz.badSecretChars", { field: label(name) }), name);
    }
  });
}

// The shared secrets a first save generated (issue #34), shown once under the tokens: the
// next save, reload or sign-out forgets them, and the markers then say only "Set".
export function showGenerated(generated) {
  const box = $("tokens-generated");
  box.replaceChildren();
  const names = TOKEN_FIELDS.filter(function (name) { return generated && generated[name]; });
  if (names.length === 0) return;
  const intro = document.createElement("p");
  intro.className = "msg ok";
  intro.textContent = t("biz.tokensGenerated");
  const list = document.createElement("dl");
  names.forEach(function (name) {
    const term = document.createElement("dt");
    term.textContent = label(name);
    const value = document.createElement("dd");
    const code = document.createElement("code");
    code.id = "generated-" + name;
    code.textContent = generated[name];
    value.appendChild(code);
    list.append(term, value);
  });
  box.append(intro, list);
  $("biz-tokens").open = true;
}

// The collapsed tokens part is opened when the page's check names one of them: a field to fix
// is never hidden.
export function revealTokens(fields) {
  if (fields.some(function (name) { return TOKEN_FIELDS.indexOf(name) >= 0; })) {
    $("biz-tokens").open = true;
  }
}

// `hasSavedKey`: the server already holds an AI API key, so a blank one keeps it.
export function checkLlm(values, hasSavedKey) {
  if (!values.llm_enabled) return;
  const hasKey = values.llm_api_key.trim() !== "" || hasSavedKey;
  if (values.llm_base_url === null || values.llm_model === null || !hasKey) {
    throw new FormError(t("biz.llmRequired"), values.llm_base_url === null ? "llm_base_url" : "llm_model");
  }
}
