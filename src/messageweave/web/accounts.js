// Card "Accounts" (issue #35): every account with its status (`GET /api/accounts`, then each
// one's `/status`), and for the admin: add, edit, pause or resume, a new owner key (shown once),
// remove (after a confirmation naming the id). An owner signed in with their owner key sees
// this card alone, with their own account's row and its settings to change. The trace and gap
// audit cards' account choices (`select[data-account-choice]`) are filled from the same list.
import * as form from "./account-form.js";
import { api, reasonOf, session } from "./api.js";
import { $, cell, el, say } from "./dom.js";
import { t, utcTime } from "./i18n.js";

const DEFAULT = "default";
const COLUMNS = 8;
let generation = 0;

function path(id, tail) {
  return "/api/accounts/" + encodeURIComponent(id) + (tail || "");
}

function mailText(status) {
  if (!status) return "—";
  if (status.mail === "ok") return t("acct.mailOk");
  if (status.mail === "fail: paused") return t("acct.mailPaused");
  return t("acct.mailFail", { kind: String(status.mail).replace(/^fail: /, "") });
}

function actionButton(key, labelKey, account, handler) {
  const button = el("button", { type: "button", textContent: t(key) });
  button.dataset.account = account.id;
  button.dataset.action = key.slice("acct.".length);
  button.setAttribute("aria-label", t(labelKey, { id: account.id }));
  button.addEventListener("click", function () { handler(account); });
  return button;
}

// The admin's buttons for one account, on a row of their own under it (the table stays narrow
// enough for a phone's width beside its eight columns).
function actions(account) {
  const td = document.createElement("td");
  td.colSpan = COLUMNS;
  td.className = "acct-actions";
  if (account.id === DEFAULT) {
    td.append(el("span", { className: "muted", textContent: t("acct.defaultRow") }), " ");
  } else {
    td.append(actionButton("acct.edit", "acct.editFor", account, edit), " ");
  }
  td.append(account.enabled ? actionButton("acct.pause", "acct.pauseFor", account, toggle)
    : actionButton("acct.resume", "acct.resumeFor", account, toggle), " ",
  actionButton("acct.ownerKey", "acct.ownerKeyFor", account, newOwnerKey));
  if (account.id !== DEFAULT) {
    td.append(" ", actionButton("acct.remove", "acct.removeFor", account, remove));
  }
  const tr = document.createElement("tr");
  tr.dataset.actionsOf = account.id;
  tr.appendChild(td);
  return tr;
}

function row(account, status) {
  const tr = document.createElement("tr");
  tr.dataset.account = account.id;
  const last = status && status.last_notified_at ? utcTime(status.last_notified_at) : t("acct.never");
  tr.append(cell(account.id), cell(account.name),
    cell(t(account.enabled ? "acct.enabled" : "acct.pausedState"), account.enabled ? "ok" : "error"),
    cell(mailText(status), status && status.mail === "ok" ? "ok" : ""),
    cell(status ? String(status.push) : "—"), cell(status ? String(status.waiting) : "—"),
    cell(status ? String(status.dlq) : "—"), cell(status ? last : "—"));
  return session.account ? [tr] : [tr, actions(account)];
}

async function statusOf(account) {
  try {
    return await api("GET", path(account.id, "/status"), undefined, true);
  } catch (err) {
    return null;  // the row says "—"; the list itself was read
  }
}

// The account choices of the trace and gap audit cards: every account, the choice kept.
function fillChoices(accounts) {
  document.querySelectorAll("select[data-account-choice]").forEach(function (select) {
    const chosen = select.value;
    select.replaceChildren(...accounts.map(function (account) {
      return el("option", { value: account.id, textContent: account.id + " · " + account.name });
    }));
    select.value = accounts.some(function (a) { return a.id === chosen; }) ? chosen : DEFAULT;
  });
}

async function loadAccounts() {
  const mine = ++generation;
  try {
    const data = await api("GET", "/api/accounts", undefined, true);
    const statuses = await Promise.all(data.accounts.map(statusOf));
    if (mine !== generation) return data.accounts;
    $("acct-rows").replaceChildren(...data.accounts.flatMap(function (account, i) {
      return row(account, statuses[i]);
    }));
    $("acct-table").hidden = data.accounts.length === 0;
    $("acct-add").disabled = data.accounts.length === 0;  // nothing to extend before a first save
    say("acct-msg", data.accounts.length === 0 ? t("acct.none") : "");
    if (!session.account) fillChoices(data.accounts);
    return data.accounts;
  } catch (err) {
    if (session.token && mine === generation) {
      say("acct-msg", t("acct.loadFailed", { reason: reasonOf(err) }), "error");
    }
    return [];
  }
}

// After a save (or a conflict): the list again, and the form shows the account as saved.
async function saved(id) {
  await loadAccounts();
  const account = await api("GET", path(id), undefined, true);
  form.openAccount(account, Boolean(session.account), saved);
}

async function edit(account) {
  hideKey();
  try {
    form.openAccount(await api("GET", path(account.id), undefined, true), false, saved);
  } catch (err) {
    if (session.token) say("acct-msg", t("acct.failed", { reason: reasonOf(err) }), "error");
  }
}

// `run`, then the list again, then what happened (the list's own line would hide it).
async function act(run, message) {
  let failure = null;
  try {
    await run();
  } catch (err) {
    failure = err;
  }
  await loadAccounts();
  if (failure === null) say("acct-msg", message, "ok");
  else if (session.token) say("acct-msg", t("acct.failed", { reason: reasonOf(failure) }), "error");
}

function toggle(account) {
  hideKey();
  const enabled = !account.enabled;
  return act(function () {
    return api("PUT", path(account.id, "/enabled"), { enabled: enabled }, true);
  }, t(enabled ? "acct.resumedMsg" : "acct.pausedMsg", { id: account.id }));
}

function remove(account) {
  hideKey();
  if (!window.confirm(t("acct.confirmRemove", { id: account.id }))) return undefined;
  form.close();
  return act(function () { return api("DELETE", path(account.id), undefined, true); },
    t("acct.removed", { id: account.id }));
}

async function newOwnerKey(account) {
  hideKey();
  try {
    const data = await api("POST", path(account.id, "/owner-key"), undefined, true);
    say("acct-key-intro", t("acct.keyIntro", { id: account.id }), "ok");
    $("acct-key").textContent = data.owner_key;
    $("acct-key-box").hidden = false;
  } catch (err) {
    if (session.token) say("acct-msg", t("acct.failed", { reason: reasonOf(err) }), "error");
  }
}

function hideKey() {
  $("acct-key").textContent = "";
  say("acct-key-msg", "");
  $("acct-key-box").hidden = true;
}

async function copyKey() {
  try {
    await navigator.clipboard.writeText($("acct-key").textContent);
    say("acct-key-msg", t("acct.copied"), "ok");
  } catch (err) {
    window.getSelection().selectAllChildren($("acct-key"));  // the clipboard was refused
    say("acct-key-msg", t("acct.copyByHand"));
  }
}

// What an owner does not see: every admin control of the card.
function showFor(owner) {
  $("accounts-card").querySelectorAll(".admin-only").forEach(function (node) {
    node.hidden = owner;
  });
  $("acct-intro").textContent = t(owner ? "acct.ownerIntro" : "acct.intro");
}

export async function load() {
  const owner = Boolean(session.account);
  showFor(owner);
  $("accounts-card").hidden = false;
  await loadAccounts();
  if (owner && session.token) {
    try {
      form.openAccount(await api("GET", path(session.account), undefined, true), true, saved);
    } catch (err) {
      if (session.token) say("acct-msg", t("acct.failed", { reason: reasonOf(err) }), "error");
    }
  }
}

export function reset() {
  generation += 1;
  hideKey();
  form.close();
  $("acct-rows").replaceChildren();
  $("acct-table").hidden = true;
  say("acct-msg", "");
  $("accounts-card").hidden = true;
}

export function wire() {
  form.wire();
  $("acct-add").addEventListener("click", function () {
    hideKey();
    form.openNew(saved);
  });
  $("acct-refresh").addEventListener("click", loadAccounts);
  // The business card saved: the default account (its name, its chats) may be new.
  document.addEventListener("mw:saved", function () {
    if (session.token && !session.account) loadAccounts();
  });
  $("acct-key-copy").addEventListener("click", copyKey);
}
