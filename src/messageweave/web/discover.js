// The business form's "Find my chat" (issues #22, #32): the chats where the page's one-time
// code was sent to the bot as `/start <code>`, asked of Telegram
// (`POST /api/telegram/discover-chats`) with the token typed in, or the saved one, before
// anything needs saving; one click fills the chat id, the owner (the user who sent the code)
// and, when it is empty, the allowed chat ids. A group as the chat with no owner listed is
// warned of: every member of it could read mail and send. The accounts card's form has the
// same finder under the id prefix `a-` (`wireFinder`), with the saved bot token.
import { api, reasonOf, session } from "./api.js";
import { businessLabelKey, withLabels } from "./business-form.js";
import { hasSavedSecret, onReadback, updateDirty } from "./business.js";
import { $, el, say } from "./dom.js";
import { known, t } from "./i18n.js";

function clearChats(p) {
  $(p + "discover-list").replaceChildren();
  say(p + "discover-msg", "");
}

function ids(text) {
  return text.split(/[\s,]+/).filter(Boolean);
}

function useChat(chat, p, onFilled) {
  $(p + "f-telegram_chat_id").value = String(chat.chat_id);
  $(p + "f-telegram_chat_id").removeAttribute("aria-invalid");
  const owners = $(p + "f-owner_user_ids");
  const listed = ids(owners.value);
  if (!listed.includes(String(chat.user_id))) owners.value = listed.concat(String(chat.user_id)).join(", ");
  const allow = $(p + "f-chat_allowlist");
  const added = allow.value.trim() === "";
  if (added) {
    allow.value = String(chat.chat_id);
    allow.removeAttribute("aria-invalid");
  }
  $(p + "discover-list").replaceChildren();
  say(p + "discover-msg", t(added ? "discover.filledBoth" : "discover.filled",
    { id: chat.chat_id, user: chat.user_id }), "ok");
  warnUnguarded(p);
  onFilled();
}

function chatText(chat) {
  const type = chat.type && known("discover.type." + chat.type) ? t("discover.type." + chat.type) : null;
  const name = chat.name || t("discover.noName");
  const values = { name: name, id: chat.chat_id, type: type, user: chat.user_id };
  return t(type ? "discover.chatTyped" : "discover.chat", values);
}

// No chat sent the code yet: say what to send, and the link that sends it.
function showCode(data, p) {
  if (data.conflict) {
    say(p + "discover-msg", t("discover.conflict"), "error");
    return;
  }
  const command = "/start " + data.code;
  const parts = [el("span", { textContent: t("discover.send") + " " })];
  parts.push(el("code", { id: p + "discover-command", textContent: command }));
  if (data.link) {
    parts.push(el("span", { textContent: " " + t("discover.orOpen") + " " }));
    parts.push(el("a", { id: p + "discover-link", href: data.link, target: "_blank", rel: "noopener noreferrer",
      textContent: data.link }));
  }
  parts.push(el("span", { textContent: " " + t("discover.then", { minutes: Math.ceil(data.expires_in_s / 60) }) }));
  const msg = $(p + "discover-msg");
  msg.replaceChildren(...parts);
  msg.className = "msg";
}

function showChats(data, p, onFilled) {
  const chats = data.chats || [];
  const list = $(p + "discover-list");
  list.replaceChildren(...chats.map(function (chat) {
    const button = el("button", { type: "button", textContent: chatText(chat) });
    button.dataset.chatId = String(chat.chat_id);
    button.dataset.userId = String(chat.user_id);
    button.setAttribute("aria-label", t("discover.useFor", { id: chat.chat_id, user: chat.user_id }));
    button.addEventListener("click", function () { useChat(chat, p, onFilled); });
    const li = el("li");
    li.appendChild(button);
    return li;
  }));
  if (chats.length) say(p + "discover-msg", t("discover.pick"));
  else showCode(data, p);
}

// A group (a negative id) as the notification chat and no owner: every member may read.
function warnUnguarded(p) {
  const chat = $(p + "f-telegram_chat_id").value.trim();
  const unguarded = /^-\d+$/.test(chat) && ids($(p + "f-owner_user_ids").value).length === 0;
  say(p + "owners-warning", unguarded ? t("owners.unguarded") : "", unguarded ? "error" : "");
}

// The business form's token and Bot API address as typed; the accounts card has neither (the
// deployment's saved ones serve every account).
async function findChats(p, onFilled) {
  clearChats(p);
  if (p) {
    await askTelegram({}, p, onFilled);
    return;
  }
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
  await askTelegram(body, p, onFilled);
}

async function askTelegram(body, p, onFilled) {
  $(p + "discover-chats").disabled = true;
  say(p + "discover-msg", t("discover.finding"));
  try {
    showChats(await api("POST", "/api/telegram/discover-chats", body, true), p, onFilled);
  } catch (err) {
    if (!session.token) return;
    if (err.status === 422 && err.configError) {
      say(p + "discover-msg", withLabels(err.configError, businessLabelKey), "error");
    } else if (err.status === 502) {
      say(p + "discover-msg", t("discover.failed", { reason: err.telegramError || reasonOf(err) }), "error");
    } else {
      say(p + "discover-msg", t("biz.failed", { reason: reasonOf(err) }), "error");
    }
  } finally {
    $(p + "discover-chats").disabled = false;
  }
}

// The finder of the form whose ids start with `p`; `onFilled` runs once a chat filled it.
export function wireFinder(p, onFilled) {
  $(p + "f-telegram_chat_id").addEventListener("input", function () { warnUnguarded(p); });
  $(p + "f-owner_user_ids").addEventListener("input", function () { warnUnguarded(p); });
  $(p + "discover-chats").addEventListener("click", function () { findChats(p, onFilled); });
}

export function clearFinder(p) {
  clearChats(p);
}

export function load() {
  // Nothing to read: the list is asked for by the button.
}

export function reset() {
  clearChats("");
}

export function wire() {
  $("h-telegram_chat_id").after($("discover-msg"), $("discover-list"));  // the help first
  $("h-owner_user_ids").after($("owners-warning"));
  wireFinder("", updateDirty);
  onReadback(function () { warnUnguarded(""); });
  // Saved: "save the configuration to keep it" is no longer true.
  document.addEventListener("mw:saved", function () { clearChats(""); });
}
