// The business form's "Find my chat" (issue #22): the chats that wrote to the bot, asked of
// Telegram (`POST /api/telegram/discover-chats`) with the token typed in, or the saved one,
// before anything needs saving; one click fills the chat id and, when it is empty, the allowed
// chat ids.
import { api, reasonOf, session } from "./api.js";
import { businessLabelKey, withLabels } from "./business-form.js";
import { hasSavedSecret, updateDirty } from "./business.js";
import { $, el, say } from "./dom.js";
import { known, t } from "./i18n.js";

function clearChats() {
  $("discover-list").replaceChildren();
  say("discover-msg", "");
}

function useChat(chat) {
  $("f-telegram_chat_id").value = String(chat.chat_id);
  $("f-telegram_chat_id").removeAttribute("aria-invalid");
  const allow = $("f-chat_allowlist");
  const added = allow.value.trim() === "";
  if (added) {
    allow.value = String(chat.chat_id);
    allow.removeAttribute("aria-invalid");
  }
  $("discover-list").replaceChildren();
  say("discover-msg", t(added ? "discover.filledBoth" : "discover.filled", { id: chat.chat_id }), "ok");
  updateDirty();
}

function chatText(chat) {
  const type = chat.type && known("discover.type." + chat.type) ? t("discover.type." + chat.type) : null;
  const name = chat.name || t("discover.noName");
  return type ? t("discover.chatTyped", { name: name, id: chat.chat_id, type: type })
    : t("discover.chat", { name: name, id: chat.chat_id });
}

function showChats(data) {
  const chats = data.chats || [];
  const list = $("discover-list");
  list.replaceChildren(...chats.map(function (chat) {
    const button = el("button", { type: "button", textContent: chatText(chat) });
    button.dataset.chatId = String(chat.chat_id);
    button.setAttribute("aria-label", t("discover.useFor", { id: chat.chat_id }));
    button.addEventListener("click", function () { useChat(chat); });
    const li = el("li");
    li.appendChild(button);
    return li;
  }));
  let key;
  if (data.conflict) key = chats.length ? "discover.conflict" : "discover.conflictNone";
  else key = chats.length ? "discover.pick" : "discover.none";
  say("discover-msg", t(key), chats.length || data.conflict ? "" : "error");
}

async function findChats() {
  clearChats();
  const token = $("f-bot_token").value.trim();
  if (!token && !hasSavedSecret("bot_token")) {
    say("discover-msg", t("discover.needToken"), "error");
    $("f-bot_token").setAttribute("aria-invalid", "true");
    $("f-bot_token").focus();
    return;
  }
  const body = {};
  if (token) body.bot_token = token;
  const base = $("f-telegram_api_base_url").value.trim();
  if (base) body.telegram_api_base_url = base;
  $("discover-chats").disabled = true;
  say("discover-msg", t("discover.finding"));
  try {
    showChats(await api("POST", "/api/telegram/discover-chats", body, true));
  } catch (err) {
    if (!session.token) return;
    if (err.status === 422 && err.configError) {
      say("discover-msg", withLabels(err.configError, businessLabelKey), "error");
    } else if (err.status === 502) {
      say("discover-msg", t("discover.failed", { reason: err.telegramError || reasonOf(err) }), "error");
    } else {
      say("discover-msg", t("biz.failed", { reason: reasonOf(err) }), "error");
    }
  } finally {
    $("discover-chats").disabled = false;
  }
}

export function load() {
  // Nothing to read: the list is asked for by the button.
}

export function reset() {
  clearChats();
}

export function wire() {
  $("h-telegram_chat_id").after($("discover-msg"), $("discover-list"));  // the help first
  $("discover-chats").addEventListener("click", findChats);
  // Saved: "save the configuration to keep it" is no longer true.
  document.addEventListener("mw:saved", clearChats);
}
