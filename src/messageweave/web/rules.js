// Card "Notification rules" (issue #16): the rules editor, quiet hours and the backlog digest
// threshold (the bot's language moved to the business form's Telegram fields, issue #22, so a
// first setup can choose it). They are fields of the business configuration: the card
// fills from the business card's readback and saves only what changed, as a patch against the
// revision that card holds, so the two never overwrite each other. The dry run tries the
// editor's rules, unsaved, on the last 20 mails. An account's owner (issue #35) gets this card
// beside the accounts card, for their own account: read and saved through
// `GET`/`PUT /api/accounts/{id}` against that account's revision, without the dry run (an
// admin route).
import { ACCOUNT_REVISION, announceRevision, api, reasonOf, session } from "./api.js";
import { addHelp, businessLabelKey, withLabels } from "./business-form.js";
import { adoptRevision, load as reloadBusiness, onReadback, savedState } from "./business.js";
import { $, say } from "./dom.js";
import * as dryRun from "./dry-run.js";
import { known, lang, t } from "./i18n.js";
import * as editor from "./rules-editor.js";

const NAMES = ["notify_rules", "quiet_hours", "digest_threshold"];
const DIGEST_SUGGESTED = 10;
const DIGEST_MAX = 1000;
const CLOCK = /^([01]\d|2[0-3]):[0-5]\d$/;
const QUIET_DEFAULTS = { start: "22:00", end: "07:00" };
// The server names this card's settings as the original's environment did; the page shows its
// labels, and marks the input a message is about.
const LABELS = { NOTIFY_RULES: "field.notify_rules", QUIET_HOURS: "rules.sectionQuiet",
  DIGEST_THRESHOLD: "field.digest_threshold" };
const INPUTS = [["QUIET_HOURS.end", "r-quiet_end"], ["QUIET_HOURS", "r-quiet_start"],
  ["DIGEST_THRESHOLD", "r-digest_threshold"]];
const RULE_MESSAGE = /^NOTIFY_RULES\[(\d+)\](?:\.([a-z_]+))?\s*([\s\S]*)$/;
const QUIET_FIELD = /\bQUIET_HOURS\.(start|end)\b/g;

// `baseline`: the saved values in the card's shapes; `refill`: the next readback replaces
// what the card shows even if it was edited (after a conflict or this card's own save).
const state = { baseline: null, refill: false };
// An owner's own account: its revision as last read.
const owned = { revision: 0 };
// What the button preview shows: the last readback's values, and whether they were saved.
const preview = { values: {}, configured: false };

// A value of the card's own inputs that the page refuses; `id` is the input.
class FieldError extends Error {
  constructor(message, id) {
    super(message);
    this.id = id;
  }
}

function serverText(message) {
  const named = String(message).replace(QUIET_FIELD, function (_whole, end) {
    return t("rules.sectionQuiet") + " · " + t("field.quiet_" + end);
  });
  return withLabels(named, function (word) { return LABELS[word] || businessLabelKey(word); });
}

// JSON with 64-bit ids as strings: equal values compare equal whatever their number type.
function same(a, b) {
  const text = function (value) {
    return JSON.stringify(value, function (_key, v) { return typeof v === "bigint" ? v.toString() : v; });
  };
  return text(a) === text(b);
}

// The notification's buttons as the bot sends them (`pipeline.buttons.notification_keyboard`,
// the labels of `chat.texts` in `bot_language`): the Read row only while `read_in_chat` is on.
const BUTTONS = {
  zh: [["摘要", "标为已读", "归档"], ["阅读全文"]],
  en: [["Summary", "Mark read", "Archive"], ["Read"]],
};

// The language the bot will speak: the saved `bot_language`; before the first save the
// business form's choice, which starts as the page's own language (the contract's default, zh,
// is not what an English page is about to save).
function previewLanguage() {
  if (preview.configured) return preview.values.bot_language;
  const chosen = $("f-bot_language").value;
  return BUTTONS[chosen] ? chosen : lang;
}

function showPreview() {
  const rows = BUTTONS[previewLanguage()] || BUTTONS[lang];
  const values = preview.values;
  $("preview-buttons").replaceChildren(...rows.slice(0, values.read_in_chat === false ? 1 : 2)
    .map(function (labels) {
      const row = document.createElement("div");
      row.className = "preview-row";
      labels.forEach(function (text) {
        const button = document.createElement("span");
        button.className = "preview-button";
        button.textContent = text;
        row.appendChild(button);
      });
      return row;
    }));
}

function baselineFrom(values) {
  const quiet = values.quiet_hours;
  return {
    notify_rules: (values.notify_rules || []).map(editor.canonicalRule),
    quiet_hours: quiet ? { start: quiet.start, end: quiet.end } : null,
    digest_threshold: Number(values.digest_threshold || 0),
  };
}

function syncQuiet() {
  const on = $("r-quiet_hours").checked;
  ["start", "end"].forEach(function (end) {
    const input = $("r-quiet_" + end);
    input.disabled = !on;
    if (on && input.value === "") input.value = QUIET_DEFAULTS[end];
  });
}

function fill(base) {
  editor.render(base.notify_rules);
  $("r-quiet_hours").checked = base.quiet_hours !== null;
  $("r-quiet_start").value = base.quiet_hours ? base.quiet_hours.start : "";
  $("r-quiet_end").value = base.quiet_hours ? base.quiet_hours.end : "";
  syncQuiet();
  $("r-digest_threshold").value = String(base.digest_threshold);
}

function readQuiet() {
  if (!$("r-quiet_hours").checked) return null;
  const start = $("r-quiet_start").value, end = $("r-quiet_end").value;
  if (!CLOCK.test(start)) throw new FieldError(t("rules.quietBoth"), "r-quiet_start");
  if (!CLOCK.test(end) || end === start) throw new FieldError(t("rules.quietBoth"), "r-quiet_end");
  return { start: start, end: end };
}

function readDigest() {
  const raw = $("r-digest_threshold").value.trim();
  const value = raw === "" ? 0 : Number(raw);
  if (!/^\d*$/.test(raw) || !(value === 0 || (value >= 2 && value <= DIGEST_MAX))) {
    throw new FieldError(t("rules.badDigest"), "r-digest_threshold");
  }
  return value;
}

function readCard() {
  return { notify_rules: editor.readRules(), quiet_hours: readQuiet(),
    digest_threshold: readDigest() };
}

function isDirty() {
  try {
    const values = readCard();
    return NAMES.some(function (name) { return !same(values[name], state.baseline[name]); });
  } catch (err) {
    return true;
  }
}

function clearErrors() {
  editor.clearErrors();
  ["rules-error", "rules-msg"].forEach(function (id) { say(id, ""); });
  document.querySelectorAll("#rules-form [aria-invalid]").forEach(function (el) {
    el.removeAttribute("aria-invalid");
  });
}

function markInput(id) {
  $(id).setAttribute("aria-invalid", "true");
  $(id).focus();
}

// The page's own check failed: the message, next to the rule or on the input it is about.
function pageError(err) {
  if (err instanceof editor.RuleError) {
    editor.showError(err.index, err.field, err.reason);
  } else if (err instanceof FieldError) {
    markInput(err.id);
  } else {
    throw err;
  }
  say("rules-error", err.message, "error");
}

// The label of a rule's field the server names (`chat_id` → "Chat "), or "" for none.
function ruleFieldLabel(field) {
  if (field === null) return "";
  return (known("field.rule_" + field) ? t("field.rule_" + field) : field) + " ";
}

// A 422 of the server: a rule's error is shown under that rule and its field, in page labels.
function rejected(message) {
  if (!message) {
    say("rules-error", t("biz.rejectedGeneric"), "error");
    return;
  }
  const rule = RULE_MESSAGE.exec(message);
  let text = serverText(message);
  if (rule) {
    const index = Number(rule[1]), field = rule[2] || null;
    const reason = ruleFieldLabel(field) + serverText(rule[3]);
    editor.showError(index, field, reason);
    text = t("rules.ruleError", { n: index + 1, reason: reason });
  } else {
    const input = INPUTS.find(function (pair) { return message.startsWith(pair[0]); });
    if (input) markInput(input[1]);
  }
  say("rules-error", t("biz.rejected", { reason: text }), "error");
}

function showState(configured, revision) {
  $("rules-save").disabled = !configured;
  $("dry-run").disabled = !configured;
  const saved = session.account ? t("rules.accountState", { id: session.account, n: revision })
    : t("rules.state", { n: revision });
  say("rules-state", configured ? saved : t("rules.needsConfig"));
}

// Every readback of the business card: the chats to choose from and the saved values. An edit
// in progress is kept (its baseline moves), unless a refill was asked for.
function onBody(body) {
  const values = body.values || {};
  editor.setChats(values.telegram_chat_id, values.chat_allowlist);
  preview.values = values;
  preview.configured = body.configured === true;
  showPreview();
  const keep = state.baseline !== null && !state.refill && isDirty();
  state.baseline = baselineFrom(values);
  state.refill = false;
  if (!keep) fill(state.baseline);
  showState(body.configured === true, body.revision || 0);
}

// The card's values read back, replacing what it shows. When the revision is still the one the
// business card holds (`expected`, or this card's own save) that form keeps its edits; else it
// reloads too, and both cards show the newer configuration.
async function reread(expected) {
  state.refill = true;
  try {
    const body = await api("GET", "/api/business-config", undefined, true);
    if (body.revision === expected) {
      if (body.configured) adoptRevision(expected);
      onBody(body);
      return;
    }
  } catch (err) {
    // the business card's reload below says why it could not read
  }
  await reloadBusiness();
}

function accountPath() {
  return "/api/accounts/" + encodeURIComponent(session.account);
}

// The owner's account read back, replacing what the card shows.
async function rereadAccount() {
  state.refill = true;
  try {
    const account = await api("GET", accountPath(), undefined, true);
    owned.revision = account.revision;
    onBody({ values: account.values, configured: true, revision: account.revision });
  } catch (err) {
    if (session.token) say("rules-error", t("biz.failed", { reason: reasonOf(err) }), "error");
  }
}

function current() {
  return session.account ? { configured: true, revision: owned.revision } : savedState();
}

// Saved, but not served yet (a paused account, or one not loaded yet), or not connected.
function notApplied(result) {
  const runtime = (result.warnings || []).some(function (w) { return w.component === "accounts"; });
  say("rules-error", t(runtime ? "acct.notServed" : "biz.notApplied"), "error");
}

async function save(event) {
  event.preventDefault();
  clearErrors();
  const saved = current();
  if (!saved.configured || state.baseline === null) {
    say("rules-error", t("rules.needsConfig"), "error");
    return;
  }
  let values;
  try {
    values = readCard();
  } catch (err) {
    pageError(err);
    return;
  }
  const patch = {};
  NAMES.forEach(function (name) {
    if (!same(values[name], state.baseline[name])) patch[name] = values[name];
  });
  if (Object.keys(patch).length === 0) {
    say("rules-msg", t("biz.nothing"));
    return;
  }
  patch.revision = saved.revision;
  $("rules-save").disabled = true;
  try {
    const result = await api("PUT", session.account ? accountPath() : "/api/business-config",
      patch, true);
    await (session.account ? rereadAccount() : reread(result.revision));
    if (session.account) announceRevision(session.account, result.revision);
    say("rules-msg", t("rules.saved", { n: result.revision }), "ok");
    if (!result.runtime_applied) notApplied(result);
  } catch (err) {
    if (!session.token) return;
    if (err.status === 409) {
      state.refill = true;
      await (session.account ? rereadAccount() : reloadBusiness());
      say("rules-error", t("biz.conflict"), "error");
    } else if (err.status === 422) {
      rejected(err.configError);
    } else if (err.status === 503) {
      say("rules-error", t("biz.unavailable"), "error");
    } else {
      say("rules-error", t("biz.failed", { reason: reasonOf(err) }), "error");
    }
  } finally {
    $("rules-save").disabled = !current().configured;
  }
}

// What the dry run tries: the editor's rules and quiet hours; null when the page refused them.
function draft() {
  clearErrors();
  try {
    return { notify_rules: editor.readRules(), quiet_hours: readQuiet() };
  } catch (err) {
    pageError(err);
    return null;
  }
}

// The admin's card is filled by the business card's readback (`onReadback`), which load() of
// that card starts; an owner's is moved beside the accounts card (its place, `#admin`, stays
// hidden) and reads the owner's account.
export function load() {
  if (!session.account) return;
  $("accounts-card").after($("rules-card"));
  $("dry-box").hidden = true;
  rereadAccount();
}

export function reset() {
  $("callbacks-card").before($("rules-card"));  // back in its place among the admin cards
  $("dry-box").hidden = false;
  owned.revision = 0;
  state.baseline = null;
  state.refill = false;
  editor.setChats(null, []);
  editor.render([]);
  syncQuiet();
  clearErrors();
  dryRun.reset();
  say("rules-state", "");
}

export function wire() {
  [["r-quiet_hours", "quiet_hours"], ["r-quiet_start", "quiet_start"], ["r-quiet_end", "quiet_end"],
    ["r-digest_threshold", "digest_threshold"]]
    .forEach(function (pair) { addHelp($(pair[0]), pair[1]); });
  const suggest = $("r-digest-suggest");
  suggest.textContent = t("rules.useSuggested", { n: DIGEST_SUGGESTED });
  suggest.setAttribute("aria-label", t("rules.useSuggestedFor", { n: DIGEST_SUGGESTED }));
  suggest.addEventListener("click", function () {
    $("r-digest_threshold").value = String(DIGEST_SUGGESTED);
  });
  $("r-quiet_hours").addEventListener("change", syncQuiet);
  $("rules-add").addEventListener("click", editor.addRule);
  $("rules-form").addEventListener("submit", save);
  // The account form saved only its own fields of the owner's account: these still hold.
  document.addEventListener(ACCOUNT_REVISION, function (event) {
    if (!session.account || event.detail.id !== session.account) return;
    owned.revision = event.detail.revision;
    showState(true, owned.revision);
  });
  $("rules-reload").addEventListener("click", function () {
    clearErrors();
    if (session.account) rereadAccount();
    else reread(savedState().revision);
  });
  onReadback(onBody);
  $("f-bot_language").addEventListener("change", showPreview);
  dryRun.wire(draft, rejected);
  reset();
}
