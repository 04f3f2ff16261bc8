// The accounts card's form (issue #35): a new account, or one account's settings (the admin's
// "Edit", or the owner's own account). Its inputs are copies of the business form's own
// account fields — the mail source with its JMAP and IMAP fields and presets, the chats with
// "Find my chat", the language and time zone — made once under the id prefix `a-`, so they
// read, check and show values exactly as the business form does (business-form.js). A new
// account is `POST /api/accounts`; a change `PUT /api/accounts/{id}` with only what changed
// and the revision read. "Test connection" is the business card's (`preflight.js`): the
// account's fields over the stored deployment fields (the bot, the AI service).
import { ACCOUNT_REVISION, announceRevision, api, reasonOf, session } from "./api.js";
import {
  baselineFrom, businessLabelKey, changedFields, FormError, isSecret, kindOf, readFields,
  showValue, withLabels,
} from "./business-form.js";
import { showSource, wireSource } from "./business-imap.js";
import { clearFinder, wireFinder } from "./discover.js";
import { $, say } from "./dom.js";
import { lang, t } from "./i18n.js";
import * as preflight from "./preflight.js";
import { browserZone } from "./zones.js";

const P = "a-";  // the id prefix of the copies
const FP = P + "f-";
// config.accounts.ACCOUNT_ID_PATTERN and NAME_MAX_CHARS (tests/unit/test_page_limits.py)
const ID_PATTERN = /^[a-z0-9][a-z0-9_-]{0,31}$/;
const NAME_MAX_CHARS = 64;
// The chat and display fields copied from the business form, label and input each.
const CHAT_FIELDS = ["telegram_chat_id", "chat_allowlist", "owner_user_ids", "bot_language",
  "timezone"];

// `id`: the account edited (null: a new one); `owner`: the owner's own account (no id to
// choose, no test, no cancel).
const state = { id: null, revision: 0, name: "", baseline: null, owner: false, names: [],
  onSaved: function () {} };

// A copy of `node` whose ids, and the ids it refers to, carry the prefix.
function copied(node) {
  const copy = node.cloneNode(true);
  [copy].concat(Array.from(copy.querySelectorAll("*"))).forEach(function (el) {
    ["id", "for", "aria-describedby"].forEach(function (attr) {
      const value = el.getAttribute(attr);
      if (value) el.setAttribute(attr, value.split(" ").map(function (id) { return P + id; }).join(" "));
    });
  });
  return copy;
}

function copyFields() {
  const mail = $("f-mail_source").closest(".grid");
  $("acct-mail").append(copied(mail), copied($("jmap-fields")), copied($("imap-fields")));
  const grid = document.createElement("div");
  grid.className = "grid";
  CHAT_FIELDS.forEach(function (name) {
    const label = document.querySelector('#biz-form label[for="f-' + name + '"]');
    grid.append(copied(label), copied(label.nextElementSibling));
  });
  const read = $("f-read_in_chat").closest(".switch-row");
  $("acct-chats").append(grid, copied(read));
  if ($("h-read_in_chat")) $("acct-chats").append(copied($("h-read_in_chat")));
  state.names = Array.from($("acct-form").querySelectorAll("[id^='" + FP + "']"))
    .map(function (el) { return el.id.slice(FP.length); })
    .filter(function (name) { return kindOf(name) !== undefined; });
}

// The fields that count: those of the mail source chosen, and the chats.
function shownNames() {
  return state.names.filter(function (name) { return !$(FP + name).closest("[hidden]"); });
}

function serverText(message) {
  return withLabels(message, businessLabelKey);
}

function clearResults() {
  ["acct-error", "acct-form-msg", "acct-preflight-result"].forEach(function (id) { say(id, ""); });
  ["acct-warnings", "acct-preflight-issues"].forEach(function (id) { $(id).replaceChildren(); });
  $("acct-form").querySelectorAll("[aria-invalid]").forEach(function (el) {
    el.removeAttribute("aria-invalid");
  });
}

function formError(err) {
  if (!(err instanceof FormError)) throw err;
  say("acct-error", err.message, "error");
  err.fields.forEach(function (name) {
    const el = $(name.startsWith("acct-") ? name : FP + name);
    el.setAttribute("aria-invalid", "true");
  });
  if (err.fields.length > 0) {
    const first = err.fields[0];
    $(first.startsWith("acct-") ? first : FP + first).focus();
  }
}

function fill(values, secretsPresent) {
  state.baseline = baselineFrom(values);
  state.names.forEach(function (name) {
    const el = $(FP + name), kind = kindOf(name);
    if (isSecret(kind)) {
      el.value = "";
      const marker = $(P + "m-" + name);
      if (marker) marker.textContent = t(secretsPresent[name] ? "marker.set" : "marker.notSet");
      return;
    }
    const value = state.baseline[name];
    if (kind === "choice" && (value === undefined || value === null)) {
      el.selectedIndex = 0;  // a new account: the choice the business form offers first
    } else {
      showValue(el, kind, value);
    }
  });
  showSource(P);
}

// The form for a new account: the business form's defaults, the page's language and zone.
export function openNew(onSaved) {
  open(null, false, onSaved);
  $("acct-id").value = "";
  $("acct-name").value = "";
  fill({ mail_source: "jmap", bot_language: lang === "zh" ? "zh" : "en",
    timezone: browserZone() || "Asia/Shanghai", read_in_chat: true }, {});
  $("acct-id").focus();
}

// The form for an account read back (`GET /api/accounts/{id}`).
export function openAccount(account, owner, onSaved) {
  open(account, owner, onSaved);
  $("acct-id").value = account.id;
  $("acct-name").value = account.name;
  fill(account.values || {}, account.secrets_present || {});
}

function open(account, owner, onSaved) {
  clearResults();
  clearFinder(P);
  state.id = account ? account.id : null;
  state.revision = account ? account.revision : 0;
  state.name = account ? account.name : "";
  state.owner = owner;
  state.onSaved = onSaved;
  $("acct-id").readOnly = account !== null;
  $("acct-form-title").textContent = account ? t("acct.editTitle", { id: account.id })
    : t("acct.newTitle");
  // An owner neither tests the deployment's peers nor asks the bot for chats (admin routes).
  [$("acct-test"), $("acct-cancel"), $(P + "discover-chats")].forEach(function (el) {
    el.hidden = owner;
  });
  $("acct-form").hidden = false;
}

export function close() {
  clearResults();
  state.id = null;
  state.baseline = null;
  $("acct-form").hidden = true;
}

function readName() {
  const name = $("acct-name").value;
  if (!name.trim() || name.length > NAME_MAX_CHARS) throw new FormError(t("acct.badName"), "acct-name");
  return name;
}

// Nothing typed: the server's declared default applies (or it says the field is missing).
function blank(kind, value) {
  if (isSecret(kind)) return value.trim() === "";
  return value === null || (Array.isArray(value) && value.length === 0);
}

// A new account's wire: its id, name and every shown field that is not blank.
function newWire() {
  const id = $("acct-id").value.trim();
  if (!ID_PATTERN.test(id)) throw new FormError(t("acct.badId"), "acct-id");
  const wire = { id: id, name: readName() };
  const values = readFields(FP, shownNames());
  Object.keys(values).forEach(function (name) {
    if (!blank(kindOf(name), values[name])) wire[name] = values[name];
  });
  return wire;
}

function changes() {
  const body = changedFields(readFields(FP, shownNames()), state.baseline);
  const name = readName();
  if (name !== state.name) body.name = name;
  return body;
}

async function saveFailed(err) {
  if (!session.token) return;
  if (err.status === 409 && state.id === null && err.retryAfter) {  // its id's sweep runs
    say("acct-error", t("acct.beingDeleted", { n: err.retryAfter }), "error");
  } else if (err.status === 409 && state.id === null) {
    say("acct-error", t("acct.exists"), "error");
  } else if (err.status === 409) {
    await state.onSaved(state.id);  // the saved values, then why
    say("acct-error", t("acct.conflict"), "error");
  } else if (err.status === 404) {
    say("acct-error", t("acct.gone"), "error");
  } else if (err.status === 422) {
    const reason = err.configError && serverText(err.configError);
    say("acct-error", reason ? t("biz.rejected", { reason: reason }) : t("biz.rejectedGeneric"), "error");
  } else {
    say("acct-error", t("acct.failed", { reason: reasonOf(err) }), "error");
  }
}

async function save(event) {
  event.preventDefault();
  clearResults();
  let body;
  try {
    body = state.id === null ? newWire() : changes();
  } catch (err) {
    formError(err);
    return;
  }
  if (state.id !== null && Object.keys(body).length === 0) {
    say("acct-form-msg", t("acct.nothing"));
    return;
  }
  $("acct-save").disabled = true;
  try {
    const result = state.id === null ? await api("POST", "/api/accounts", body, true)
      : await api("PUT", "/api/accounts/" + encodeURIComponent(state.id),
        Object.assign(body, { revision: state.revision }), true);
    const id = state.id === null ? result.id : state.id;
    announceRevision(id, result.revision);
    const headline = state.id === null ? t("acct.created", { id: id, n: result.revision })
      : t("acct.saved", { n: result.revision });
    const warnings = preflight.failureLines(result.warnings, FP);
    await state.onSaved(id);
    say("acct-form-msg", headline, "ok");
    preflight.report("acct-warnings", warnings, FP);
  } catch (err) {
    await saveFailed(err);
  } finally {
    $("acct-save").disabled = false;
  }
}

// The account's fields as shown, for the preflight: a saved password is never read back, so
// an account already saved is tested only with its password typed again.
function testBody() {
  const names = shownNames();
  const values = readFields(FP, names);
  const body = {};
  names.forEach(function (name) {
    const kind = kindOf(name), value = values[name];
    if (state.id !== null && kind === "secret" && /_password$/.test(name) && blank(kind, value)) {
      throw new FormError(t("acct.testNeedsSecret"), name);
    }
    if (!blank(kind, value)) body[name] = value;
  });
  return body;
}

async function testConnection() {
  clearResults();
  let body;
  try {
    body = testBody();
  } catch (err) {
    formError(err);
    return;
  }
  $("acct-test").disabled = true;
  try {
    await preflight.testConnection(body,
      { result: "acct-preflight-result", issues: "acct-preflight-issues" }, FP, serverText);
  } catch (err) {
    if (session.token) say("acct-preflight-result", t("biz.failed", { reason: reasonOf(err) }), "error");
  } finally {
    $("acct-test").disabled = false;
  }
}

// Once the business card has added its help lines (business.wire), which the copies keep.
export function wire() {
  copyFields();
  wireSource(P, "acct-form");
  wireFinder(P, function () {});
  $("acct-form").addEventListener("submit", save);
  $("acct-test").addEventListener("click", testConnection);
  $("acct-cancel").addEventListener("click", close);
  document.addEventListener(ACCOUNT_REVISION, function (event) {
    if (event.detail.id === state.id) state.revision = event.detail.revision;
  });
}
