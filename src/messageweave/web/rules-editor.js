// The rules editor of the notification rules card: one row per rule (add, remove, move up and
// down), read into the wire of `notify_rules` (config/features.py), and an error shown next to
// the rule and the field it names.
import { $, el } from "./dom.js";
import { t } from "./i18n.js";

export const MAX_RULES = 50;
const TOPIC_MAX = 2 ** 31 - 1;
const MATCH = ["from", "subject", "mailbox_role"];
const TEXT_LIMITS = { name: 64, from: 320, subject: 200, mailbox_role: 64 };

// The rows in editor order. A row's `uid` never changes, so its element ids stay unique and
// stable while rules move; the chats are the saved configuration's (64-bit ids as strings).
const rows = [];
let nextUid = 0;
const chats = { main: null, allowed: [] };

// A rule the page's own check refused: `index` is the rule's place, `field` its input.
export class RuleError extends Error {
  constructor(index, field, reason) {
    super(t("rules.ruleError", { n: index + 1, reason: reason }));
    this.index = index;
    this.field = field;
    this.reason = reason;
  }
}

function isSet(value) {
  return value !== undefined && value !== null;
}

// One rule in the shape the server reads it back, so editor and readback compare equal: match
// fields only when set, and a mute rule without the sending fields it ignores.
export function canonicalRule(rule) {
  const out = { name: rule.name };
  MATCH.forEach(function (key) {
    if (isSet(rule[key]) && rule[key] !== "") out[key] = rule[key];
  });
  out.action = rule.action === "mute" ? "mute" : "notify";
  if (out.action === "notify") {
    if (isSet(rule.chat_id)) out.chat_id = BigInt(rule.chat_id);
    if (isSet(rule.thread_id)) out.thread_id = Number(rule.thread_id);
    out.silent = rule.silent === true;
  }
  return out;
}

// A label and its input in the row's grid, with the field's help line under the input.
function addField(grid, row, field, input) {
  input.id = "rule" + row.uid + "-" + field;
  const lab = el("label", { htmlFor: input.id, textContent: t("field.rule_" + field) });
  const help = el("span", { className: "hint help", id: "h-" + input.id,
    textContent: t("help.rule_" + field) });
  help.dataset.i18n = "help.rule_" + field;
  input.setAttribute("aria-describedby", help.id + " " + row.errorId);
  const box = el("div", { className: input.type === "checkbox" ? "field check" : "field" });
  box.append(input, help);
  grid.append(lab, box);
  row.inputs[field] = input;
}

function option(value, text) {
  return el("option", { value: value, textContent: text });
}

// The chat choices: the main chat (no chat_id), every other allowed chat, and the rule's own
// chat when it is neither (so a saved value is never silently replaced).
function fillChats(row, wanted) {
  const select = row.inputs.chat_id;
  const main = chats.main === null ? "—" : chats.main;
  const ids = chats.allowed.filter(function (id) { return id !== chats.main; });
  if (wanted && ids.indexOf(wanted) < 0) ids.push(wanted);
  select.replaceChildren(option("", t("rules.mainChat", { id: main })),
    ...ids.map(function (id) { return option(id, id); }));
  select.value = wanted || "";
}

// The sending fields mean nothing to a mute rule: they are greyed out and not sent.
function syncAction(row) {
  const mute = row.inputs.action.value === "mute";
  ["chat_id", "thread_id", "silent"].forEach(function (f) { row.inputs[f].disabled = mute; });
}

function toolButton(row, kind, onClick) {
  const button = el("button", { type: "button", className: "small" });
  button.dataset.tool = kind;
  button.addEventListener("click", function () { onClick(row, button); });
  return button;
}

function makeRow(rule) {
  const row = { uid: nextUid++, inputs: {} };
  row.errorId = "rule" + row.uid + "-error";
  row.li = el("li", { className: "rule" });
  row.li.dataset.uid = String(row.uid);
  row.title = el("h4");
  const tools = el("div", { className: "rule-tools" });
  tools.append(toolButton(row, "up", move(-1)), toolButton(row, "down", move(1)),
    toolButton(row, "remove", remove));
  const head = el("div", { className: "rule-head" });
  head.append(row.title, tools);
  const grid = el("div", { className: "grid" });
  ["name", "from", "subject", "mailbox_role"].forEach(function (f) {
    const input = el("input", { type: "text", maxLength: TEXT_LIMITS[f], spellcheck: false,
      value: rule[f] || "" });
    if (f === "from") input.placeholder = t("rules.fromPlaceholder");
    if (f === "subject" || f === "mailbox_role") input.placeholder = t("rules.anyPlaceholder");
    addField(grid, row, f, input);
  });
  const action = el("select");
  action.append(option("notify", t("rules.actionNotify")), option("mute", t("rules.actionMute")));
  action.value = rule.action === "mute" ? "mute" : "notify";
  action.addEventListener("change", function () { syncAction(row); });
  addField(grid, row, "action", action);
  addField(grid, row, "chat_id", el("select"));
  fillChats(row, isSet(rule.chat_id) ? String(rule.chat_id) : "");
  addField(grid, row, "thread_id", el("input", { type: "text", inputMode: "numeric",
    spellcheck: false, value: isSet(rule.thread_id) ? String(rule.thread_id) : "" }));
  addField(grid, row, "silent", el("input", { type: "checkbox", checked: rule.silent === true }));
  const error = el("p", { className: "msg error", id: row.errorId });
  error.setAttribute("role", "alert");
  row.li.append(head, grid, error);
  syncAction(row);
  return row;
}

// Numbers, titles and the names of the tool buttons follow the rule's place.
function renumber() {
  rows.forEach(function (row, i) {
    row.title.textContent = t("rules.ruleTitle", { n: i + 1 });
    row.li.querySelectorAll("[data-tool]").forEach(function (button) {
      const kind = button.dataset.tool;
      button.textContent = t("rules." + kind);
      button.setAttribute("aria-label", t("rules." + kind + "For", { n: i + 1 }));
      button.disabled = (kind === "up" && i === 0) || (kind === "down" && i === rows.length - 1);
    });
  });
  $("rules-empty").hidden = rows.length > 0;
  $("rules-add").disabled = rows.length >= MAX_RULES;
}

function redraw() {
  $("rules-list").replaceChildren(...rows.map(function (row) { return row.li; }));
  renumber();
}

function move(step) {
  return function (row, button) {
    const from = rows.indexOf(row), to = from + step;
    if (to < 0 || to >= rows.length) return;
    rows.splice(from, 1);
    rows.splice(to, 0, row);
    redraw();
    // Keep the keyboard on the moved rule: the same button, or its other one at an end.
    (button.disabled ? row.li.querySelector("[data-tool='" + (step < 0 ? "down" : "up") + "']")
      : button).focus();
  };
}

function remove(row) {
  const at = rows.indexOf(row);
  rows.splice(at, 1);
  redraw();
  const next = rows[Math.min(at, rows.length - 1)];
  (next ? next.inputs.name : $("rules-add")).focus();
}

// Shows `rules` (canonical or wire form) as the editor's rows.
export function render(rules) {
  rows.length = 0;
  (rules || []).forEach(function (rule) { rows.push(makeRow(rule)); });
  redraw();
}

export function addRule() {
  if (rows.length >= MAX_RULES) return;
  const row = makeRow({});
  rows.push(row);
  redraw();
  row.inputs.name.focus();
}

// The saved configuration's chats: the main chat and the allowlist (as strings).
export function setChats(main, allowed) {
  chats.main = main === null || main === undefined ? null : String(main);
  chats.allowed = (allowed || []).map(String);
  rows.forEach(function (row) { fillChats(row, row.inputs.chat_id.value); });
}

function readRow(row, index, names) {
  const value = function (f) { return row.inputs[f].value.trim(); };
  const name = value("name");
  if (name === "") throw new RuleError(index, "name", t("rules.nameRequired"));
  const earlier = names.indexOf(name.toLowerCase());
  if (earlier >= 0) throw new RuleError(index, "name", t("rules.nameRepeats", { m: earlier + 1 }));
  names.push(name.toLowerCase());
  const rule = { name: name, action: row.inputs.action.value };
  MATCH.forEach(function (f) { rule[f] = value(f); });
  if (rule.action === "notify") {
    const topic = value("thread_id");
    if (topic !== "" && (!/^\d+$/.test(topic) || Number(topic) < 1 || Number(topic) > TOPIC_MAX)) {
      throw new RuleError(index, "thread_id", t("rules.badTopic"));
    }
    rule.chat_id = value("chat_id") === "" ? null : value("chat_id");
    rule.thread_id = topic === "" ? null : topic;
    rule.silent = row.inputs.silent.checked;
  }
  return canonicalRule(rule);
}

// The editor as `notify_rules`; a `RuleError` for the first rule the page itself refuses.
export function readRules() {
  const names = [];
  return rows.map(function (row, i) { return readRow(row, i, names); });
}

export function clearErrors() {
  rows.forEach(function (row) {
    $(row.errorId).textContent = "";
    Object.values(row.inputs).forEach(function (input) { input.removeAttribute("aria-invalid"); });
  });
}

// `text` under rule `index`; its `field` (when named and known) marked and focused.
export function showError(index, field, text) {
  const row = rows[index];
  if (!row) return false;
  $(row.errorId).textContent = text;
  const input = (field && row.inputs[field]) || row.inputs.name;
  input.setAttribute("aria-invalid", "true");
  input.focus();
  return true;
}
