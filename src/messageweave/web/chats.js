// Card "Chats that wrote to the bot": the chats the webhook refused lately, because they are not
// on the allowlist (`GET /api/telegram/refused-chats`), each with "Add to allowlist", which
// patches `chat_allowlist` through `PUT /api/business-config` with the stored revision.
import { api, isMissingRoute, reasonOf, session } from "./api.js";
import { load as reloadBusiness } from "./business.js";
import { $, cell, say } from "./dom.js";
import { t } from "./i18n.js";

function seenAt(unix) {
  return new Date(Number(unix) * 1000).toISOString().slice(0, 16).replace("T", " ");
}

function row(chat) {
  const tr = document.createElement("tr");
  tr.dataset.chatId = String(chat.chat_id);
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = t("chats.add");
  button.setAttribute("aria-label", t("chats.addFor", { id: chat.chat_id }));
  button.addEventListener("click", function () { addToAllowlist(chat.chat_id, button); });
  const action = document.createElement("td");
  action.appendChild(button);
  tr.append(cell(String(chat.chat_id)), cell(chat.name || "—"), cell(seenAt(chat.last_seen)),
    cell(String(chat.count)), action);
  return tr;
}

function show(chats) {
  $("chats-rows").replaceChildren(...chats.map(row));
  $("chats-table").hidden = chats.length === 0;
  say("chats-state", chats.length === 0 ? t("chats.empty") : "");
}

async function loadChats() {
  try {
    const data = await api("GET", "/api/telegram/refused-chats", undefined, true);
    show(data.chats || []);
  } catch (err) {
    if (!session.token) return;
    $("chats-table").hidden = true;
    say("chats-state", isMissingRoute(err) ? t("common.notAvailable", { feature: t("chats.title") })
      : t("chats.failed", { reason: reasonOf(err) }), "error");
  }
}

// The stored allowlist plus `chatId`, saved as a patch against the revision just read: a
// change made meanwhile elsewhere is a 409, never overwritten.
async function addToAllowlist(chatId, button) {
  button.disabled = true;
  say("chats-msg", "");
  try {
    const current = await api("GET", "/api/business-config", undefined, true);
    if (!current.configured) {
      say("chats-msg", t("chats.notConfigured"), "error");
      return;
    }
    const ids = (current.values.chat_allowlist || []).map(String);
    if (ids.indexOf(String(chatId)) < 0) ids.push(String(chatId));
    const result = await api("PUT", "/api/business-config",
      { chat_allowlist: ids.map(function (id) { return BigInt(id); }), revision: current.revision }, true);
    say("chats-msg", t("chats.added", { id: chatId, n: result.revision }), "ok");
    reloadBusiness();  // the form shows the new allowlist and revision
    await loadChats();
  } catch (err) {
    if (!session.token) return;
    if (err.status === 409) say("chats-msg", t("chats.conflict"), "error");
    else if (err.status === 422 && err.configError) say("chats-msg", t("chats.rejected", { reason: err.configError }), "error");
    else say("chats-msg", t("chats.addFailed", { reason: reasonOf(err) }), "error");
  } finally {
    button.disabled = false;
  }
}

export function load() {
  loadChats();
}

export function reset() {
  $("chats-rows").replaceChildren();
  $("chats-table").hidden = true;
  say("chats-state", "");
  say("chats-msg", "");
}

export function wire() {
  $("chats-refresh").addEventListener("click", function () {
    say("chats-msg", "");
    loadChats();
  });
}
