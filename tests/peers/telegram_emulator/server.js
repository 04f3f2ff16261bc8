#!/usr/bin/env node
// MessageWeave's Telegram test peer: the npm Bot API emulator `telegram-test-api` (pinned 4.2.1,
// unmodified on disk) plus a compatibility layer that swaps a few of its routes at start-up.
//
// Env: TTA_PORT (default 0 = any free port), TTA_HOST (loopback only, default 127.0.0.1),
//      TTA_STORE_TIMEOUT seconds before stored messages and updates are purged (default 3600),
//      TTA_WEBHOOK_RETRY_MS the first delay before a failed webhook delivery is resent
//      (default 1000; it doubles on each failure, up to 60 s).
// When listening it prints one line to stdout: `TTA_READY {"port":N,"pid":P,"version":"4.2.1"}`.
//
// What the layer changes, and why (measured against python-telegram-bot 22.8):
//   * getMe answers with is_bot:true (PTB rejects a User without it).
//   * sendMessage answers a proper Message: `date` in seconds (the package sends ms: PTB "year
//     58884 is out of range"), `from`, no echoed request parameters; it validates like Telegram: empty text, text over 4096 UTF-16 units
//     ("message is too long"), missing or non-numeric chat_id.
//   * editMessageText answers the edited Message (the package answers null).
//   * sendMessage and editMessageReplyMarkup refuse a button whose callback_data is not 1-64
//     bytes (BUTTON_DATA_INVALID); a Message sent to a forum topic carries message_thread_id
//     and is_topic_message.
//   * answerCallbackQuery answers true (the package: null) for a query id the emulator issued
//     and not answered yet, else 400 "query is too old ... or query ID is invalid"; answers are
//     recorded. editMessageReplyMarkup replaces (or, without reply_markup, removes) the stored
//     keyboard and answers the edited Message (the package: null, and ignores a removal); 400
//     "message to edit not found", 400 "message is not modified" for the same keyboard.
//   * setWebhook answers true, checks secret_token's alphabet ("Webhook is already set", and
//     nothing changes, for the same url and secret without drop_pending_updates, as the Bot API
//     server does); getWebhookInfo, setMyCommands, getMyCommands, deleteMyCommands are
//     implemented.
//   * getUpdates as the Bot API documents it (https://core.telegram.org/bots/api#getupdates;
//     the package ignores every parameter and marks an update read as soon as it returns it,
//     so a bot that crashes before handling it loses it):
//       - an update stays queued, and is returned again, until a getUpdates with an `offset`
//         greater than its update_id confirms it; confirmed updates are forgotten. A negative
//         offset -N returns the last N queued updates and forgets the earlier ones.
//       - `limit` 1-100 (default 100), `timeout` in seconds (default 0); out-of-range values
//         are clamped, as the Bot API server does (its timeout maximum is 50 s).
//       - long poll: with nothing to return and timeout > 0 the call waits, and answers as soon
//         as an update arrives (updates arriving in the same event-loop turn come together),
//         or with [] at the deadline.
//       - `allowed_updates` (a JSON array, form, query or JSON body) is remembered for later
//         calls until another list is given; [] means every type (the default). It is one
//         setting per bot, shared with setWebhook's allowed_updates, as in Telegram: a call
//         without the parameter keeps the previous list (setWebhook used to reset it). An
//         update of a type not in the list is dropped when it arrives (never queued, never
//         delivered; the control routes report it as `skipped`); updates queued before the
//         list changed are still returned, as the documentation warns. Kinds here: message,
//         callback_query. A value that is not a JSON array: 400 "can't parse allowed updates
//         list" (the emulator's choice; Telegram's answer to it is not documented).
//       - 409 "Conflict: can't use getUpdates method while webhook is active; use
//         deleteWebhook to delete the webhook first" while a webhook is set.
//       - a second getUpdates that starts to long-poll while another long poll of the same
//         token is open ends the EARLIER one with 409 "Conflict: terminated by other getUpdates
//         request; make sure that only one bot instance is running". Chosen from the Bot API
//         server's source (tdlib/telegram-bot-api, Client::do_get_updates): the earlier poll is
//         aborted only when the new call itself waits; a call that answers at once (timeout=0)
//         leaves the open poll alone, and so does the emulator.
//       - setWebhook ends an open long poll with 409 "Conflict: terminated by setWebhook
//         request" (the Bot API server's abort_long_poll), not with what it has.
//     Not followed: the Bot API server delays a 409 by 3 s when it answered another 409 less
//     than 3 s before (fail_query_conflict), and stretches a short poll repeated with the same
//     offset within 3 s to a 3 s long poll; neither is documented, and the emulator answers at
//     once so that /control/calls shows a client that hot-loops on 409. It does not refuse a
//     second setWebhook within 1 s (429) either. Queued updates are kept TTA_STORE_TIMEOUT
//     (Telegram: 24 hours).
//   * deleteWebhook (and setWebhook with an empty url) removes the webhook; queued updates
//     stay for getUpdates unless drop_pending_updates is true ("Webhook was deleted", or
//     "Webhook is already deleted" when none was set). setWebhook with drop_pending_updates
//     drops them as well.
//   * webhook deliveries, one update at a time per bot, in update_id order: updates that were
//     queued for getUpdates and not confirmed go to a newly set webhook (Telegram delivers
//     them), then new ones. A delivery that fails (non-2xx answer or no connection) is kept and
//     resent after TTA_WEBHOOK_RETRY_MS, then 2x, 4x ... up to 60 s, for as long as the webhook
//     stays set; a deleted webhook puts it back in the getUpdates queue, a new webhook gets it
//     at once. getWebhookInfo.pending_update_count counts every update not yet confirmed or
//     delivered. Not followed: Telegram resends the first failure at once (then 2 s, 4 s ...
//     up to about a minute, or the webhook's Retry-After) and holds later updates of the same
//     chat behind a failing one; the emulator waits the first delay (so one failed attempt can
//     be observed alone) and lets newer updates through meanwhile (so /control/userMessage
//     still answers with the webhook's answer to that update). Telegram delivers several chats
//     in parallel (max_connections); the emulator one update at a time.
//   * webhook deliveries carry X-Telegram-Bot-Api-Secret-Token, lose the internal `botToken`
//     field, and a non-2xx answer is recorded instead of killing node (the package's unhandled
//     promise rejection ends the process).
//   * sendDocument and sendPhoto (issue #25) as the Bot API documents them: multipart/form-data
//     with the file in `document` / `photo` (its filename and Content-Type as sent), chat_id,
//     message_thread_id, caption; a file over 50 MB (sendDocument) or 10 MB (sendPhoto): 413
//     "Request Entity Too Large"; no file and no file_id string: 400 "there is no document in
//     the request". The answer is a Message with `document` {file_id, file_name, mime_type,
//     file_size} or `photo` [{...}]. The bytes are kept for /control/sentFiles (parsed by a
//     small multipart reader of our own: the package has none).
//   * unknown methods get a Telegram-shaped 404 instead of a bare HTTP 500.
//   * every Bot API call is counted (method, time) for /control/calls, failed ones included.
//
// Control API for tests (POST, JSON, no /bot prefix):
//   /control/userMessage   {token, chat_id, text, from_id?, first_name?, username?,
//                           chat_type?, title?, reply_to_message_id?}  plays the human: builds
//                           the Update (`from` = the user from_id, default chat_id: a group
//                           message without from_id is 400, Telegram's sender is a user),
//                           delivers it to the webhook (waits for the answer to its
//                           first attempt) or queues it for getUpdates. With
//                           reply_to_message_id (a message the bot sent to that chat) the
//                           Message carries `reply_to_message`: that message as stored now,
//                           its keyboard (`reply_markup`) included, as the Bot API sends it
//                           (issue #25); an unknown id: 400.
//                           -> {update_id, message_id, delivery: {status}|{error}|{skipped}|null}
//                           (null: queued for getUpdates, or the webhook was deleted before the
//                           update's turn; skipped: its type is not in allowed_updates)
//   /control/callback      {token, chat_id, message_id?, data, from_id?, first_name?, username?} plays
//                           the human pressing a button under the bot's message `message_id`:
//                           a callback_query Update {id, from, message (as stored now, keyboard
//                           included), chat_instance, data} delivered like /control/userMessage.
//                           `data` is not checked against the keyboard (a modified client can
//                           send any). -> {update_id, callback_id, delivery}
//   /control/callbackAnswers {token} -> [{callback_query_id, text, show_alert}], oldest first
//   /control/sentMessages  {token, chat_id?} -> messages the bot sent, oldest first, each with
//                           `stored_ms`: when the emulator stored it (Unix ms; a harness field)
//   /control/sentFiles     {token, chat_id?} -> files the bot sent (sendDocument, sendPhoto),
//                           oldest first: [{message_id, chat_id, method, field, filename,
//                           mime_type, size, sha256, data_b64, message_thread_id, stored_ms}]
//   /control/failures      {token?, method?, chat_id?, error_code?, description?, retry_after?,
//                           migrate_to_chat_id?, delay_ms?, close?, raw_body?, result_override?,
//                           skip?, times?}
//                           -> {id}. Makes matching Bot API calls (getUpdates included) fail like
//                           Telegram would, before the call does anything (a refused getUpdates
//                           confirms nothing); `skip` lets that many matching calls through first.
//                           `result_override` (alone) is a fault Telegram never produces: the
//                           call is carried out, but its `ok: true` answer has these fields of
//                           `result` replaced (the package once echoed fields as strings).
//   /control/failures/clear {token?}  removes the rules (of one token, or all)
//   /control/webhookDeliveries {token?} -> [{update_id, url, attempt, status|error,
//                           secret_sent}], every attempt, oldest first
//   /control/updates       {token, until_polling?, timeout_ms?} -> {pending: [update_id...],
//                           confirmed_offset: N, allowed_updates: [...]|null, polling: bool}:
//                           the updates not yet confirmed or delivered (oldest first), the
//                           offset below which every update is confirmed (0: none yet), the
//                           remembered allowed_updates (null: every type), whether a getUpdates
//                           long poll is open now. With until_polling (true/false) it answers
//                           once `polling` has that value, or after timeout_ms (default 5000)
//                           with whatever it is then: a test waits for a long poll without
//                           sleeping.
//   /control/calls         {token, method?} -> {count, times_ms: [...]}: the Bot API calls of
//                           that token (of that method, case-insensitive, as Telegram's method
//                           names are) the emulator has seen, refused ones included; times_ms
//                           are arrival times (Unix ms), oldest first
//   /control/reset         {} forgets messages, updates, webhooks (and pending resends),
//                           allowed_updates, commands, failure rules, deliveries and call counts;
//                           an open long poll is answered with []
'use strict';

const crypto = require('crypto');
const http = require('http');
const axios = require('axios');
const TelegramServer = require('telegram-test-api');
const { routes } = require('telegram-test-api/lib/routes/index');
const { handle } = require('telegram-test-api/lib/routes/bot/utils');
const { version } = require('telegram-test-api/package.json');

const port = Number(process.env.TTA_PORT || 0);
const host = process.env.TTA_HOST || '127.0.0.1';
const storeTimeout = Number(process.env.TTA_STORE_TIMEOUT || 3600);
const webhookRetryMs = Number(process.env.TTA_WEBHOOK_RETRY_MS || 1000);
const WEBHOOK_RETRY_MAX_MS = 60000;

if (!['127.0.0.1', 'localhost', '::1'].includes(host)) {
  console.error(`refusing to bind to ${host}: loopback only`);
  process.exit(2);
}

const BOT_USER = { id: 666, is_bot: true, first_name: 'Test First name', username: 'TestNameBot' };
const MAX_TEXT_UTF16 = 4096; // JS string length counts UTF-16 code units, as Telegram does
const SECRET_TOKEN = /^[A-Za-z0-9_-]{1,256}$/;
const MAX_CALLBACK_DATA_BYTES = 64;
const QUERY_INVALID = 'Bad Request: query is too old and response timeout expired or query ID is invalid';
const NOT_MODIFIED = 'Bad Request: message is not modified: specified new message content and reply'
  + ' markup are exactly the same as a current content and reply markup of the message';
const COMMAND = /^[a-z0-9_]{1,32}$/;
const LONG_POLL_MAX_TIMEOUT_S = 50; // the Bot API server's maximum; larger values are clamped
const WEBHOOK_ACTIVE = "Conflict: can't use getUpdates method while webhook is active;"
  + ' use deleteWebhook to delete the webhook first';
const OTHER_GET_UPDATES = 'Conflict: terminated by other getUpdates request;'
  + ' make sure that only one bot instance is running';
const BY_SET_WEBHOOK = 'Conflict: terminated by setWebhook request';
const BAD_ALLOWED_UPDATES = "Bad Request: can't parse allowed updates list";
const DEFAULT_DESCRIPTIONS = {
  400: 'Bad Request: chat not found',
  401: 'Unauthorized',
  403: 'Forbidden: bot was blocked by the user',
  404: 'Not Found',
  409: OTHER_GET_UPDATES,
  500: 'Internal Server Error',
  502: 'Bad Gateway',
};

const nowSeconds = () => Math.floor(Date.now() / 1000);
const fail = (res, code, description, parameters) => {
  const body = { ok: false, error_code: code, description };
  if (parameters) body.parameters = parameters;
  res.status(code).json(body);
};
const param = (req, name) => {
  if (req.body && req.body[name] !== undefined) return req.body[name];
  return req.query[name];
};
// Form-encoded clients (PTB) send arrays and objects as JSON strings.
const jsonParam = (req, name) => {
  const value = param(req, name);
  if (typeof value !== 'string') return value;
  try { return JSON.parse(value); } catch (_e) { return undefined; }
};

// The inline keyboard of a reply_markup parameter (JSON text from form-encoded clients), or
// null; `invalid` when a button's callback_data is not 1-64 bytes, as Telegram refuses it.
const inlineKeyboard = (req) => {
  const markup = jsonParam(req, 'reply_markup');
  if (!markup || !Array.isArray(markup.inline_keyboard)) return { keyboard: null };
  const buttons = markup.inline_keyboard.flat();
  const invalid = buttons.some((b) => b && b.callback_data !== undefined
    && !(Buffer.byteLength(String(b.callback_data)) >= 1
      && Buffer.byteLength(String(b.callback_data)) <= MAX_CALLBACK_DATA_BYTES));
  return { keyboard: markup.inline_keyboard, invalid };
};

const replaceRoute = (file, name, fn) => {
  const orig = require(`telegram-test-api/lib/routes/bot/${file}`)[name];
  const i = routes.indexOf(orig);
  if (i < 0) throw new Error(`telegram-test-api route ${name} not found`);
  routes[i] = fn;
};

// --- call log: every Bot API call, before anything can refuse it ----------------------------

const callLog = (app, srv) => {
  app.all('/bot:token/:method', (req, _res, next) => {
    const { token, method } = req.params;
    if (!srv.calls[token]) srv.calls[token] = [];
    srv.calls[token].push({ method: method.toLowerCase(), time: Date.now() });
    next();
  });
};

// --- failure injection: runs before every Bot API route -------------------------------------

const ruleMatches = (rule, req) => {
  if (rule.token !== undefined && rule.token !== req.params.token) return false;
  if (rule.method !== undefined && rule.method.toLowerCase() !== req.params.method.toLowerCase()) {
    return false;
  }
  if (rule.chat_id !== undefined && String(rule.chat_id) !== String(param(req, 'chat_id'))) {
    return false;
  }
  return true;
};

const overrideResult = (res, fields) => {
  const json = res.json.bind(res);
  res.json = (body) => json(body && body.ok === true && body.result && typeof body.result === 'object'
    ? { ...body, result: { ...body.result, ...fields } }
    : body);
};

const answerWithRule = (rule, req, res, next) => {
  if (rule.close) {
    req.socket.destroy();
    return;
  }
  if (rule.error_code === undefined) {
    if (rule.result_override) overrideResult(res, rule.result_override);
    next();
    return;
  }
  const code = rule.error_code;
  if (rule.raw_body !== undefined) {
    res.status(code).type('text/html').send(String(rule.raw_body));
    return;
  }
  const parameters = {};
  let retryAfter = rule.retry_after;
  if (code === 429 && retryAfter === undefined) retryAfter = 1;
  if (retryAfter !== undefined) parameters.retry_after = retryAfter;
  if (rule.migrate_to_chat_id !== undefined) parameters.migrate_to_chat_id = rule.migrate_to_chat_id;
  const description = rule.description
    || (code === 429 ? `Too Many Requests: retry after ${retryAfter}` : DEFAULT_DESCRIPTIONS[code])
    || `Error ${code}`;
  fail(res, code, description, Object.keys(parameters).length ? parameters : undefined);
};

const failureInjection = (app, srv) => {
  app.all('/bot:token/:method', (req, res, next) => {
    const rule = srv.failureRules.find((r) => ruleMatches(r, req));
    if (!rule) {
      next();
      return;
    }
    if (rule.skip > 0) { // let the first `skip` matching calls through
      rule.skip -= 1;
      next();
      return;
    }
    if (rule.times !== undefined) {
      rule.times -= 1;
      if (rule.times <= 0) srv.failureRules = srv.failureRules.filter((r) => r !== rule);
    }
    if (rule.delay_ms) setTimeout(() => answerWithRule(rule, req, res, next), rule.delay_ms);
    else answerWithRule(rule, req, res, next);
  });
};

const validRule = (rule) => {
  if (!rule || typeof rule !== 'object') return 'body must be an object';
  if (rule.error_code !== undefined
      && !(Number.isInteger(rule.error_code) && rule.error_code >= 300 && rule.error_code <= 599)) {
    return 'error_code must be an integer 300..599';
  }
  if (rule.result_override !== undefined
      && (rule.result_override === null || typeof rule.result_override !== 'object'
        || Array.isArray(rule.result_override))) {
    return 'result_override must be an object';
  }
  if (rule.error_code === undefined && !rule.close && !rule.delay_ms && !rule.result_override) {
    return 'a rule needs error_code, close, delay_ms or result_override';
  }
  if (rule.times !== undefined && !(Number.isInteger(rule.times) && rule.times > 0)) {
    return 'times must be a positive integer';
  }
  if (rule.skip !== undefined && !(Number.isInteger(rule.skip) && rule.skip >= 0)) {
    return 'skip must be a non-negative integer';
  }
  return null;
};

// --- Bot API routes -------------------------------------------------------------------------

replaceRoute('getMe', 'getMe', (app) => {
  handle(app, '/bot:token/getMe', (_req, res) => res.json({ ok: true, result: BOT_USER }));
});

replaceRoute('sendMessage', 'sendMessage', (app, srv) => {
  handle(app, '/bot:token/sendMessage', (req, res) => {
    const body = { ...req.query, ...(req.body || {}) };
    if (body.chat_id === undefined || String(body.chat_id) === '') {
      return fail(res, 400, 'Bad Request: chat_id is empty');
    }
    if (!Number.isFinite(Number(body.chat_id))) return fail(res, 400, 'Bad Request: chat not found');
    const text = body.text === undefined ? '' : String(body.text);
    if (text.trim() === '') return fail(res, 400, 'Bad Request: message text is empty');
    if (text.length > MAX_TEXT_UTF16) return fail(res, 400, 'Bad Request: message is too long');
    if (inlineKeyboard(req).invalid) return fail(res, 400, 'Bad Request: BUTTON_DATA_INVALID');
    return res.json({ ok: true, result: srv.addBotMessage(body, req.params.token) });
  });
});

replaceRoute('editMessageText', 'editMessageText', (app, srv) => {
  handle(app, '/bot:token/editMessageText', (req, res) => {
    const body = { ...req.query, ...(req.body || {}) };
    const stored = srv.storage.botMessages.find((m) => m.botToken === req.params.token
      && String(m.messageId) === String(body.message_id)
      && String(m.message.chat_id) === String(body.chat_id));
    if (!stored) return fail(res, 400, 'Bad Request: message to edit not found');
    const text = body.text === undefined ? '' : String(body.text);
    if (text.trim() === '') return fail(res, 400, 'Bad Request: message text is empty');
    if (text.length > MAX_TEXT_UTF16) return fail(res, 400, 'Bad Request: message is too long');
    srv.editMessageText(body);
    const result = asMessage(stored.messageId, stored.message.chat_id, stored.time, stored.message);
    return res.json({ ok: true, result: { ...result, edit_date: nowSeconds() } });
  });
});

const storedBotMessage = (srv, token, chatId, messageId) => srv.storage.botMessages.find(
  (m) => m.botToken === token && String(m.messageId) === String(messageId)
    && String(m.message.chat_id) === String(chatId),
);

replaceRoute('editMessageReplyMarkup', 'editMessageReplyMarkup', (app, srv) => {
  handle(app, '/bot:token/editMessageReplyMarkup', (req, res) => {
    if (param(req, 'inline_message_id') !== undefined) {
      return fail(res, 400, 'Bad Request: inline messages are not emulated');
    }
    const stored = storedBotMessage(srv, req.params.token, param(req, 'chat_id'),
      param(req, 'message_id'));
    if (!stored) return fail(res, 400, 'Bad Request: message to edit not found');
    const { keyboard, invalid } = inlineKeyboard(req);
    if (invalid) return fail(res, 400, 'Bad Request: BUTTON_DATA_INVALID');
    const current = stored.message.reply_markup && stored.message.reply_markup.inline_keyboard;
    if (JSON.stringify(current || null) === JSON.stringify(keyboard)) {
      return fail(res, 400, NOT_MODIFIED);
    }
    const message = { ...stored.message };
    if (keyboard) message.reply_markup = { inline_keyboard: keyboard };
    else delete message.reply_markup;
    stored.message = message;
    srv.emit('EditedMessageReplyMarkup');
    const result = asMessage(stored.messageId, message.chat_id, stored.time, message);
    return res.json({ ok: true, result: { ...result, edit_date: nowSeconds() } });
  });
});

replaceRoute('answerCallbackQuery', 'answerCallbackQuery', (app, srv) => {
  handle(app, '/bot:token/answerCallbackQuery', (req, res) => {
    const id = String(param(req, 'callback_query_id') || '');
    const query = srv.callbackQueries[id];
    if (!query || query.token !== req.params.token || query.answered) {
      return fail(res, 400, QUERY_INVALID);
    }
    query.answered = true;
    const text = param(req, 'text');
    srv.callbackAnswers.push({
      botToken: req.params.token,
      callback_query_id: id,
      text: text === undefined ? null : String(text),
      show_alert: String(param(req, 'show_alert')) === 'true',
    });
    return res.json({ ok: true, result: true });
  });
});

// allowed_updates of a call: {absent} when not given (the previous list stays), {list} (null
// for [] = every type), or {invalid}. Form-encoded clients send it as JSON text.
const allowedUpdatesParam = (req) => {
  const raw = param(req, 'allowed_updates');
  if (raw === undefined || raw === '') return { absent: true };
  const value = jsonParam(req, 'allowed_updates');
  if (!Array.isArray(value)) return { invalid: true };
  return { list: value.length ? value.map(String) : null };
};

// An integer parameter as the Bot API server reads one: absent -> default, else clamped.
const intParam = (req, name, dflt, min, max) => {
  const raw = param(req, name);
  if (raw === undefined || raw === '') return dflt;
  const n = Number.parseInt(String(raw), 10);
  const value = Number.isFinite(n) ? n : 0;
  return Math.min(max, Math.max(min, value));
};

const isTrue = (req, name) => ['true', '1'].includes(String(param(req, name)).toLowerCase());

replaceRoute('setWebhook', 'setWebhook', (app, srv) => {
  handle(app, '/bot:token/setWebhook', (req, res) => {
    const { token } = req.params;
    const url = param(req, 'url');
    const drop = isTrue(req, 'drop_pending_updates');
    if (!url) { // Telegram: an empty url removes the webhook
      const had = Boolean(srv.webhooks[token]);
      srv.removeWebhook(token, drop);
      return res.json({ ok: true, result: true,
        description: had ? 'Webhook was deleted' : 'Webhook is already deleted' });
    }
    if (!/^https?:\/\/[^/]+/.test(String(url))) {
      return fail(res, 400, 'Bad Request: bad webhook: An HTTPS URL must be provided for webhook');
    }
    const secret = param(req, 'secret_token');
    if (secret !== undefined && !SECRET_TOKEN.test(String(secret))) {
      return fail(res, 400, 'Bad Request: secret token contains unallowed characters');
    }
    const allowed = allowedUpdatesParam(req);
    if (allowed.invalid) return fail(res, 400, BAD_ALLOWED_UPDATES);
    if (!allowed.absent) srv.botState(token).allowed = allowed.list;
    const webhook = {
      url: String(url), secret_token: secret === undefined ? undefined : String(secret),
    };
    const current = srv.webhooks[token];
    if (current && current.url === webhook.url && current.secret_token === webhook.secret_token
        && !drop) { // the Bot API server changes nothing (resends keep their schedule)
      return res.json({ ok: true, result: true, description: 'Webhook is already set' });
    }
    srv.installWebhook(token, webhook, drop);
    return res.json({ ok: true, result: true, description: 'Webhook was set' });
  });
});

replaceRoute('deleteWebhook', 'deleteWebhook', (app, srv) => {
  handle(app, '/bot:token/deleteWebhook', (req, res) => {
    const { token } = req.params;
    const had = Boolean(srv.webhooks[token]);
    srv.removeWebhook(token, isTrue(req, 'drop_pending_updates'));
    res.json({ ok: true, result: true,
      description: had ? 'Webhook was deleted' : 'Webhook is already deleted' });
  });
});

replaceRoute('getUpdates', 'getUpdates', (app, srv) => {
  handle(app, '/bot:token/getUpdates', (req, res) => {
    const { token } = req.params;
    if (srv.webhooks[token]) return fail(res, 409, WEBHOOK_ACTIVE);
    const allowed = allowedUpdatesParam(req);
    if (allowed.invalid) return fail(res, 400, BAD_ALLOWED_UPDATES);
    const offset = intParam(req, 'offset', 0, -(2 ** 31), 2 ** 31 - 1);
    const limit = intParam(req, 'limit', 100, 1, 100);
    const timeoutS = intParam(req, 'timeout', 0, 0, LONG_POLL_MAX_TIMEOUT_S);
    const st = srv.botState(token);
    if (!allowed.absent) st.allowed = allowed.list;
    srv.confirmUpdates(token, offset);
    if (timeoutS === 0 || srv.takeUpdates(token, limit).length) {
      return res.json({ ok: true, result: srv.takeUpdates(token, limit) });
    }
    if (st.poll) srv.endPoll(token, 'conflict'); // the EARLIER poll gives way
    const poll = { res, limit, timer: null, waking: false };
    poll.timer = setTimeout(() => srv.endPoll(token, 'answer', poll), timeoutS * 1000);
    // the response's close, not the request's: Node emits a request's 'close' once its body is
    // read; a client that gave up leaves no open poll behind
    res.on('close', () => {
      if (st.poll === poll) srv.endPoll(token, 'gone', poll);
    });
    srv.setPoll(token, poll);
    return undefined;
  });
});

const commandsKey = (req) => {
  const scope = jsonParam(req, 'scope') || { type: 'default' };
  return `${req.params.token}|${JSON.stringify(scope)}|${param(req, 'language_code') || ''}`;
};

// --- files (sendDocument, sendPhoto; issue #25) ------------------------------------------------

const FILE_LIMITS = { document: 50 * 1024 * 1024, photo: 10 * 1024 * 1024 };
const MULTIPART_MAX = FILE_LIMITS.document + 1024 * 1024; // the largest body read at all

// The parts of a multipart/form-data body: [{name, filename?, type?, data: Buffer}].
const multipartParts = (body, boundary) => {
  const delimiter = Buffer.from(`--${boundary}`);
  const parts = [];
  let at = body.indexOf(delimiter);
  while (at >= 0) {
    const start = at + delimiter.length;
    if (body.slice(start, start + 2).toString() === '--') break;
    const next = body.indexOf(delimiter, start);
    if (next < 0) break;
    const part = body.slice(start + 2, next - 2); // CRLF after the delimiter, CRLF before the next
    const split = part.indexOf('\r\n\r\n');
    if (split >= 0) {
      const head = part.slice(0, split).toString('utf8');
      const disposition = /content-disposition:([^\r\n]*)/i.exec(head);
      const type = /content-type:\s*([^\r\n]*)/i.exec(head);
      const name = disposition && /\bname="([^"]*)"/i.exec(disposition[1]);
      const filename = disposition && /\bfilename="([^"]*)"/i.exec(disposition[1]);
      parts.push({ name: name ? name[1] : '', filename: filename ? filename[1] : undefined,
        type: type ? type[1].trim() : undefined, data: part.slice(split + 4) });
    }
    at = next;
  }
  return parts;
};

const readBody = (req, limit) => new Promise((resolve, reject) => {
  const chunks = [];
  let size = 0;
  req.on('data', (chunk) => {
    size += chunk.length;
    if (size <= limit) chunks.push(chunk);
  });
  req.on('end', () => resolve(size > limit ? null : Buffer.concat(chunks)));
  req.on('error', reject);
});

const fileRoute = (method, field) => (app, srv) => {
  handle(app, `/bot:token/${method}`, (req, res) => sendFile(srv, method, field, req, res)
    .catch((e) => fail(res, 400, `Bad Request: ${e.message}`)));
};

const sendFile = async (srv, method, field, req, res) => {
  {
    const { token } = req.params;
    const fields = { ...req.query, ...(req.body && typeof req.body === 'object' ? req.body : {}) };
    let file = null;
    const ctype = String(req.headers['content-type'] || '');
    const boundary = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(ctype);
    if (ctype.startsWith('multipart/form-data') && boundary) {
      const body = await readBody(req, MULTIPART_MAX);
      if (body === null) return fail(res, 413, 'Request Entity Too Large');
      for (const part of multipartParts(body, boundary[1] || boundary[2].trim())) {
        if (part.filename !== undefined && part.name === field) file = part;
        else if (part.filename === undefined) fields[part.name] = part.data.toString('utf8');
      }
    }
    if (fields.chat_id === undefined || String(fields.chat_id) === '') {
      return fail(res, 400, 'Bad Request: chat_id is empty');
    }
    if (!file && typeof fields[field] !== 'string') {
      return fail(res, 400, `Bad Request: there is no ${field} in the request`);
    }
    if (file && file.data.length > FILE_LIMITS[field]) return fail(res, 413, 'Request Entity Too Large');
    const messageId = srv.messageId;
    srv.messageId += 1;
    const time = Date.now();
    const fileId = crypto.randomBytes(8).toString('hex');
    const record = {
      botToken: token, message_id: messageId, chat_id: Number(fields.chat_id), method, field,
      filename: file ? file.filename : null, mime_type: file ? (file.type || null) : null,
      size: file ? file.data.length : 0,
      sha256: file ? crypto.createHash('sha256').update(file.data).digest('hex') : null,
      data_b64: file ? file.data.toString('base64') : null,
      message_thread_id: fields.message_thread_id === undefined ? null
        : Number(fields.message_thread_id),
      stored_ms: time,
    };
    srv.sentFiles.push(record);
    const result = { message_id: messageId, from: BOT_USER,
      chat: { id: Number(fields.chat_id), type: 'private' }, date: Math.floor(time / 1000) };
    if (fields.caption) result.caption = String(fields.caption);
    if (record.message_thread_id !== null) {
      result.message_thread_id = record.message_thread_id;
      result.is_topic_message = true;
    }
    const described = { file_id: fileId, file_unique_id: fileId, file_size: record.size };
    if (field === 'photo') result.photo = [{ ...described, width: 1, height: 1 }];
    else result.document = { ...described, file_name: record.filename, mime_type: record.mime_type };
    return res.json({ ok: true, result });
  }
};

const extraBotRoutes = [
  fileRoute('sendDocument', 'document'),
  fileRoute('sendPhoto', 'photo'),
  (app, srv) => {
    handle(app, '/bot:token/getWebhookInfo', (req, res) => {
      const { token } = req.params;
      const wh = srv.webhooks[token];
      const result = { url: wh ? wh.url : '', has_custom_certificate: false,
        pending_update_count: srv.pendingUpdates(token).length };
      const { allowed } = srv.botState(token);
      if (allowed) result.allowed_updates = allowed;
      const lastError = srv.lastWebhookError[token];
      if (wh && lastError) {
        result.last_error_date = lastError.date;
        result.last_error_message = lastError.message;
      }
      res.json({ ok: true, result });
    });
  },
  (app, srv) => {
    handle(app, '/bot:token/setMyCommands', (req, res) => {
      const commands = jsonParam(req, 'commands');
      if (!Array.isArray(commands) || commands.length > 100) {
        return fail(res, 400, "Bad Request: can't parse commands JSON object");
      }
      for (const c of commands) {
        if (!c || !COMMAND.test(String(c.command))) {
          return fail(res, 400, 'Bad Request: BOT_COMMAND_INVALID');
        }
        const description = String(c.description || '');
        if (description.length < 1 || description.length > 256) {
          return fail(res, 400, 'Bad Request: command description is empty');
        }
      }
      srv.commands[commandsKey(req)] = commands.map((c) => ({
        command: String(c.command), description: String(c.description),
      }));
      return res.json({ ok: true, result: true });
    });
  },
  (app, srv) => {
    handle(app, '/bot:token/getMyCommands', (req, res) => {
      res.json({ ok: true, result: srv.commands[commandsKey(req)] || [] });
    });
  },
  (app, srv) => {
    handle(app, '/bot:token/deleteMyCommands', (req, res) => {
      delete srv.commands[commandsKey(req)];
      res.json({ ok: true, result: true });
    });
  },
];

const unknownMethodRoute = (app) => {
  handle(app, '/bot:token/:method', (_req, res) => fail(res, 404, 'Not Found'));
};

// --- control routes -------------------------------------------------------------------------

const controlRoutes = [
  (app, srv) => {
    app.post('/control/userMessage', async (req, res) => {
      const b = req.body || {};
      if (!b.token || b.chat_id === undefined || typeof b.text !== 'string') {
        return fail(res, 400, 'token, chat_id and text are required');
      }
      const chatType = b.chat_type || 'private';
      // Telegram's `from` is the user who wrote (a positive id), in a group too: a group's
      // own (negative) id is never a sender's, so a group message must name its user.
      if (chatType !== 'private' && b.from_id === undefined) {
        return fail(res, 400, 'from_id is required for a message in a group');
      }
      const fromId = Number(b.from_id !== undefined ? b.from_id : b.chat_id);
      const from = { id: fromId, is_bot: false, first_name: b.first_name || 'Test' };
      if (b.username) from.username = b.username;
      const chat = chatType === 'private'
        ? { ...from, id: Number(b.chat_id), type: 'private' }
        : { id: Number(b.chat_id), type: chatType, title: b.title || 'Test group' };
      delete chat.is_bot;
      const message = { from, chat, date: nowSeconds(), text: b.text };
      if (b.reply_to_message_id !== undefined) {  // the human answers one of the bot's messages
        const stored = storedBotMessage(srv, b.token, b.chat_id, b.reply_to_message_id);
        if (!stored) return fail(res, 400, 'Bad Request: message to be replied not found');
        message.reply_to_message = asMessage(stored.messageId, stored.message.chat_id,
          stored.time, stored.message);
      }
      const command = /^\/[A-Za-z0-9_]+(@[A-Za-z0-9_]+)?/.exec(b.text);
      if (command) message.entities = [{ type: 'bot_command', offset: 0, length: command[0].length }];
      const messageId = srv.messageId;
      srv.messageId += 1;
      const update = { time: Date.now(), botToken: b.token, messageId, isRead: false, message };
      const delivery = await srv.addUserUpdate(update);
      return res.json({
        ok: true,
        result: { update_id: update.updateId, message_id: messageId, delivery: delivery || null },
      });
    });
  },
  (app, srv) => {
    app.post('/control/callback', async (req, res) => {
      const b = req.body || {};
      if (!b.token || b.chat_id === undefined || typeof b.data !== 'string') {
        return fail(res, 400, 'token, chat_id and data are required');
      }
      let message;
      if (b.message_id !== undefined) {
        const stored = storedBotMessage(srv, b.token, b.chat_id, b.message_id);
        if (!stored) return fail(res, 400, 'no such message of the bot in that chat');
        message = asMessage(stored.messageId, stored.message.chat_id, stored.time, stored.message);
      }
      const from = { id: Number(b.from_id !== undefined ? b.from_id : b.chat_id), is_bot: false,
        first_name: b.first_name || 'Test' };
      if (b.username) from.username = b.username;
      const callbackId = `${srv.callbackId}`;
      srv.callbackId += 1;
      srv.callbackQueries[callbackId] = { token: b.token, answered: false };
      const callbackQuery = { from, message, data: b.data, chat_instance: `ci${b.chat_id}` };
      const update = { time: Date.now(), botToken: b.token, messageId: srv.messageId,
        isRead: false, callbackQuery, callbackId };
      const delivery = await srv.addUserUpdate(update);
      return res.json({
        ok: true,
        result: { update_id: update.updateId, callback_id: callbackId, delivery: delivery || null },
      });
    });
  },
  (app, srv) => {
    app.post('/control/callbackAnswers', (req, res) => {
      const token = req.body && req.body.token;
      const result = srv.callbackAnswers
        .filter((a) => a.botToken === token)
        .map(({ botToken: _t, ...a }) => a);
      res.json({ ok: true, result });
    });
  },
  (app, srv) => {
    app.post('/control/sentMessages', (req, res) => {
      const b = req.body || {};
      const result = srv.storage.botMessages
        .filter((m) => m.botToken === b.token
          && (b.chat_id === undefined || String(m.message.chat_id) === String(b.chat_id)))
        .map((m) => ({
          message_id: m.messageId,
          chat_id: Number(m.message.chat_id),
          text: m.message.text,
          parse_mode: m.message.parse_mode || null,
          date: Math.floor(m.time / 1000),
          stored_ms: m.time,
          params: m.message,
        }));
      res.json({ ok: true, result });
    });
  },
  (app, srv) => {
    app.post('/control/sentFiles', (req, res) => {
      const b = req.body || {};
      const result = srv.sentFiles
        .filter((f) => f.botToken === b.token
          && (b.chat_id === undefined || String(f.chat_id) === String(b.chat_id)))
        .map(({ botToken: _t, ...f }) => f);
      res.json({ ok: true, result });
    });
  },
  (app, srv) => {
    app.post('/control/failures', (req, res) => {
      const problem = validRule(req.body);
      if (problem) return fail(res, 400, problem);
      srv.ruleId += 1;
      srv.failureRules.push({ ...req.body, id: srv.ruleId });
      return res.json({ ok: true, result: { id: srv.ruleId } });
    });
  },
  (app, srv) => {
    app.post('/control/failures/clear', (req, res) => {
      const token = req.body && req.body.token;
      srv.failureRules = token ? srv.failureRules.filter((r) => r.token !== token) : [];
      res.json({ ok: true, result: true });
    });
  },
  (app, srv) => {
    app.post('/control/webhookDeliveries', (req, res) => {
      const token = req.body && req.body.token;
      const result = srv.webhookDeliveries
        .filter((d) => !token || d.botToken === token)
        .map(({ botToken: _t, ...d }) => d);
      res.json({ ok: true, result });
    });
  },
  (app, srv) => {
    app.post('/control/updates', (req, res) => {
      const b = req.body || {};
      if (!b.token) return fail(res, 400, 'token is required');
      const answer = () => res.json({ ok: true, result: srv.updatesView(b.token) });
      if (typeof b.until_polling !== 'boolean' || srv.isPolling(b.token) === b.until_polling) {
        return answer();
      }
      const waiter = { until: b.until_polling, done: null, timer: null };
      const st = srv.botState(b.token);
      waiter.done = () => {
        clearTimeout(waiter.timer);
        st.pollWaiters = st.pollWaiters.filter((w) => w !== waiter);
        answer();
      };
      const waitMs = Number(b.timeout_ms) > 0 ? Number(b.timeout_ms) : 5000;
      waiter.timer = setTimeout(waiter.done, waitMs);
      st.pollWaiters.push(waiter);
      return undefined;
    });
  },
  (app, srv) => {
    app.post('/control/calls', (req, res) => {
      const b = req.body || {};
      if (!b.token) return fail(res, 400, 'token is required');
      const method = b.method === undefined ? undefined : String(b.method).toLowerCase();
      const times = (srv.calls[b.token] || [])
        .filter((c) => method === undefined || c.method === method)
        .map((c) => c.time);
      return res.json({ ok: true, result: { count: times.length, times_ms: times } });
    });
  },
  (app, srv) => {
    app.post('/control/reset', (_req, res) => {
      srv.resetUpdates();
      srv.storage.userMessages = [];
      srv.storage.botMessages = [];
      srv.webhooks = {};
      srv.resetCompatState();
      res.json({ ok: true, result: true });
    });
  },
];

// Order matters: the call log, then failure injection first, the catch-all 404 last.
const unknownIdx = routes.indexOf(require('telegram-test-api/lib/routes/bot/unknownMethod').unknownMethod);
routes.splice(unknownIdx, 1, ...extraBotRoutes, unknownMethodRoute);
routes.unshift(callLog, failureInjection, ...controlRoutes);

// --- server behaviour -----------------------------------------------------------------------

TelegramServer.prototype.resetCompatState = function resetCompatState() {
  this.failureRules = [];
  this.ruleId = this.ruleId || 0;
  this.webhookDeliveries = [];
  this.lastWebhookError = {};
  this.commands = {};
  this.callbackQueries = {};
  this.callbackAnswers = [];
  this.botStates = {};
  this.calls = {};
  this.sentFiles = [];
};

// A Message as Telegram answers it. The package echoes the raw request parameters instead, so
// form-encoded fields (link_preview_options, …) come back as strings that clients cannot parse.
const asMessage = (messageId, chatId, time, stored) => {
  const out = {
    message_id: messageId,
    from: BOT_USER,
    chat: { id: Number(chatId), type: 'private' },
    date: Math.floor(time / 1000),
    text: stored.text,
  };
  if (Array.isArray(stored.entities)) out.entities = stored.entities;
  if (stored.reply_markup && stored.reply_markup.inline_keyboard) out.reply_markup = stored.reply_markup;
  if (stored.message_thread_id !== undefined) {
    out.message_thread_id = Number(stored.message_thread_id);
    out.is_topic_message = true;
  }
  return out;
};

const origAddBotMessage = TelegramServer.prototype.addBotMessage;
TelegramServer.prototype.addBotMessage = function addBotMessage(rawMessage, botToken) {
  const msg = origAddBotMessage.call(this, rawMessage, botToken);
  return asMessage(msg.message_id, rawMessage.chat_id, msg.date, rawMessage);
};

const origFormatUpdate = TelegramServer.formatUpdate;
TelegramServer.formatUpdate = function formatUpdate(update) {
  const body = origFormatUpdate.call(this, update);
  if (body.message) delete body.message.botToken;
  if (body.callback_query) {
    if (body.callback_query.message) delete body.callback_query.message.botToken;
    else delete body.callback_query.message;
    body.callback_query.chat_instance = update.callbackQuery.chat_instance;
  }
  return body;
};

// --- updates: the getUpdates queue, long polls, webhook deliveries ---------------------------
//
// A user update lives in storage.userMessages (the package's store, which also purges it after
// TTA_STORE_TIMEOUT) with isRead=false while it is pending: not yet confirmed by getUpdates,
// nor delivered to a webhook. Pending updates are the getUpdates queue when no webhook is set,
// and the webhook's backlog when one is. Per bot, botState(token) keeps the rest.

const kindOf = (update) => ('callbackQuery' in update ? 'callback_query' : 'message');

TelegramServer.prototype.botState = function botState(token) {
  if (!this.botStates[token]) {
    this.botStates[token] = {
      confirmedOffset: 0, // every update_id below it is confirmed (forgotten)
      allowed: null, // the remembered allowed_updates; null: every type
      poll: null, // the open getUpdates long poll {res, limit, timer, waking}
      pollWaiters: [], // /control/updates calls waiting for `polling` to change
      fifo: [], // updates due for a webhook attempt, update_id order
      pumping: false,
    };
  }
  return this.botStates[token];
};

TelegramServer.prototype.pendingUpdates = function pendingUpdates(token) {
  return this.storage.userMessages.filter((u) => u.botToken === token && !u.isRead);
};

const forget = (update) => {
  update.isRead = true;
  if (update.retryTimer) clearTimeout(update.retryTimer);
  update.retryTimer = null;
};

// getUpdates' offset: a positive one confirms (forgets) every update below it; -N keeps the
// last N pending updates and forgets the earlier ones; 0 changes nothing.
TelegramServer.prototype.confirmUpdates = function confirmUpdates(token, offset) {
  const st = this.botState(token);
  const pending = this.pendingUpdates(token);
  if (offset > 0) {
    pending.filter((u) => u.updateId < offset).forEach(forget);
    st.confirmedOffset = Math.max(st.confirmedOffset, offset);
  } else if (offset < 0 && pending.length) {
    const kept = pending.slice(Math.max(0, pending.length + offset));
    pending.slice(0, pending.length - kept.length).forEach(forget);
    st.confirmedOffset = Math.max(st.confirmedOffset, kept[0].updateId);
  }
};

// What getUpdates answers: the oldest `limit` pending updates (none in a webhook attempt).
TelegramServer.prototype.takeUpdates = function takeUpdates(token, limit) {
  return this.pendingUpdates(token).filter((u) => !u.inFlight).slice(0, limit)
    .map((u) => TelegramServer.formatUpdate(u));
};

TelegramServer.prototype.isPolling = function isPolling(token) {
  return Boolean(this.botStates[token] && this.botStates[token].poll);
};

const pollChanged = (st) => {
  const polling = Boolean(st.poll);
  st.pollWaiters.filter((w) => w.until === polling).forEach((w) => w.done());
};

TelegramServer.prototype.setPoll = function setPoll(token, poll) {
  const st = this.botState(token);
  st.poll = poll;
  pollChanged(st);
};

// Ends the open long poll (or `only` that one): 'answer' with the pending updates, 'conflict'
// (another getUpdates), 'setwebhook', 'empty' ([]), 'gone' (the client left: no answer).
TelegramServer.prototype.endPoll = function endPoll(token, how, only) {
  const st = this.botState(token);
  const { poll } = st;
  if (!poll || (only && poll !== only)) return;
  st.poll = null;
  clearTimeout(poll.timer);
  if (how === 'conflict') fail(poll.res, 409, OTHER_GET_UPDATES);
  else if (how === 'setwebhook') fail(poll.res, 409, BY_SET_WEBHOOK);
  else if (how === 'empty') poll.res.json({ ok: true, result: [] });
  else if (how === 'answer') {
    poll.res.json({ ok: true, result: this.takeUpdates(token, poll.limit) });
  }
  pollChanged(st);
};

// A new pending update for getUpdates: an open long poll answers, after this event-loop turn
// (updates added together come together, as the Bot API server waits a moment too).
TelegramServer.prototype.wakePoll = function wakePoll(token) {
  const st = this.botState(token);
  const { poll } = st;
  if (!poll || poll.waking || this.webhooks[token]) return;
  poll.waking = true;
  setImmediate(() => this.endPoll(token, 'answer', poll));
};

TelegramServer.prototype.updatesView = function updatesView(token) {
  const st = this.botState(token);
  return {
    pending: this.pendingUpdates(token).map((u) => u.updateId),
    confirmed_offset: st.confirmedOffset,
    allowed_updates: st.allowed,
    polling: Boolean(st.poll),
  };
};

// The first attempt of a fresh update settles what /control/userMessage waits for.
const settle = (update, value) => {
  const resolve = update.onFirstAttempt;
  update.onFirstAttempt = null;
  if (resolve) resolve(value);
};

const insertInOrder = (fifo, update) => {
  if (fifo.includes(update)) return;
  const at = fifo.findIndex((u) => u.updateId > update.updateId);
  if (at < 0) fifo.push(update);
  else fifo.splice(at, 0, update);
};

// setWebhook: ends an open long poll, then hands every pending update, oldest first, to the
// new webhook (resends due later start again at once: a new webhook, as in Telegram).
TelegramServer.prototype.installWebhook = function installWebhook(token, webhook, drop) {
  const st = this.botState(token);
  this.endPoll(token, 'setwebhook');
  const previous = this.webhooks[token];
  if (!previous || previous.url !== webhook.url) delete this.lastWebhookError[token];
  if (drop) this.pendingUpdates(token).forEach(forget);
  this.setWebhook(webhook, token);
  this.pendingUpdates(token).forEach((u) => {
    if (u.retryTimer) clearTimeout(u.retryTimer);
    u.retryTimer = null;
    u.failures = 0;
    if (!u.inFlight) insertInOrder(st.fifo, u);
  });
  this.pumpWebhook(token);
};

// deleteWebhook: pending updates (those waiting for a resend too) go back to getUpdates.
TelegramServer.prototype.removeWebhook = function removeWebhook(token, drop) {
  const st = this.botState(token);
  this.deleteWebhook(token);
  const waiting = st.fifo;
  st.fifo = [];
  waiting.forEach((u) => settle(u, undefined));
  this.pendingUpdates(token).forEach((u) => {
    if (u.retryTimer) clearTimeout(u.retryTimer);
    u.retryTimer = null;
    u.failures = 0;
  });
  if (drop) this.pendingUpdates(token).forEach(forget);
};

// One webhook attempt; the delivery record (without botToken).
TelegramServer.prototype.deliverOnce = async function deliverOnce(update, webhook) {
  const headers = { 'content-type': 'application/json' };
  if (webhook.secret_token) headers['X-Telegram-Bot-Api-Secret-Token'] = webhook.secret_token;
  update.attempts = (update.attempts || 0) + 1;
  const rec = {
    botToken: update.botToken, update_id: update.updateId, url: webhook.url,
    attempt: update.attempts, secret_sent: Boolean(webhook.secret_token), time: Date.now(),
  };
  try {
    const resp = await axios({
      url: webhook.url, method: 'POST', data: TelegramServer.formatUpdate(update), headers,
      validateStatus: () => true, timeout: 10000, maxRedirects: 0, proxy: false,
    });
    rec.status = resp.status;
  } catch (e) {
    rec.error = String(e && e.message);
  }
  this.webhookDeliveries.push(rec);
  if (rec.error || rec.status > 299) {
    const reason = http.STATUS_CODES[rec.status] || '';
    this.lastWebhookError[update.botToken] = {
      date: nowSeconds(),
      message: rec.error ? `Connection failed: ${rec.error}`
        : `Wrong response from the webhook: ${rec.status} ${reason}`.trim(),
    };
    console.error(`webhook delivery failed: update ${rec.update_id} -> ${rec.status || rec.error}`);
  }
  const { botToken: _t, ...result } = rec;
  return result;
};

const expired = (update) => Date.now() - update.time > storeTimeout * 1000;

// Delivers the bot's due updates one at a time, oldest first, while a webhook is set.
TelegramServer.prototype.pumpWebhook = async function pumpWebhook(token) {
  const st = this.botState(token);
  if (st.pumping) return;
  st.pumping = true;
  try {
    while (st.fifo.length) {
      const webhook = this.webhooks[token];
      if (!webhook) break;
      const update = st.fifo.shift();
      if (update.isRead) {
        settle(update, undefined);
        continue;
      }
      update.inFlight = true;
      // eslint-disable-next-line no-await-in-loop
      const rec = await this.deliverOnce(update, webhook);
      update.inFlight = false;
      if (rec.error === undefined && rec.status <= 299) forget(update);
      else if (!update.isRead && this.webhooks[token] && this.webhooks[token] !== webhook) {
        insertInOrder(st.fifo, update); // a new webhook was set meanwhile: it gets it now
      } else if (!update.isRead) this.retryLater(update);
      settle(update, rec);
    }
  } finally {
    st.pumping = false;
  }
};

// A failed delivery stays pending: resent after a delay while a webhook is set, or back in the
// getUpdates queue when none is.
TelegramServer.prototype.retryLater = function retryLater(update) {
  const token = update.botToken;
  if (!this.webhooks[token]) {
    this.wakePoll(token);
    return;
  }
  update.failures = (update.failures || 0) + 1;
  const delay = Math.min(WEBHOOK_RETRY_MAX_MS, webhookRetryMs * 2 ** (update.failures - 1));
  update.retryTimer = setTimeout(() => {
    update.retryTimer = null;
    if (update.isRead || !this.webhooks[token]) return;
    if (expired(update)) {
      forget(update);
      return;
    }
    insertInOrder(this.botState(token).fifo, update);
    this.pumpWebhook(token);
  }, delay);
};

// A user update from the control routes. Returns the first delivery attempt's record, a
// {skipped} record when allowed_updates excludes its type, or undefined when it was queued for
// getUpdates (or the webhook went away before its turn).
TelegramServer.prototype.addUserUpdate = async function addUserUpdate(update) {
  if (!update.botToken) throw new Error('The update must contain a `botToken` field.');
  const token = update.botToken;
  const st = this.botState(token);
  const webhook = this.webhooks[token];
  update.updateId = this.updateId;
  this.updateId += 1;
  if (st.allowed && !st.allowed.includes(kindOf(update))) {
    const skipped = { update_id: update.updateId, skipped: 'not in allowed_updates' };
    if (webhook) skipped.url = webhook.url;
    return skipped;
  }
  update.isRead = false;
  this.storage.userMessages.push(update);
  if (!webhook) {
    this.wakePoll(token);
    return undefined;
  }
  const first = new Promise((resolve) => { update.onFirstAttempt = resolve; });
  insertInOrder(st.fifo, update);
  this.pumpWebhook(token);
  return first;
};

// /control/reset: open long polls answer [], resends and waiting control calls stop.
TelegramServer.prototype.resetUpdates = function resetUpdates() {
  Object.keys(this.botStates).forEach((token) => {
    const st = this.botStates[token];
    this.endPoll(token, 'empty');
    st.fifo.forEach((u) => settle(u, undefined));
    st.fifo = [];
    st.pollWaiters.slice().forEach((w) => w.done());
  });
  this.storage.userMessages.forEach(forget);
};

process.on('unhandledRejection', (e) => console.error('unhandledRejection:', e && e.message));

const server = new TelegramServer({ host, storeTimeout });
server.config.port = port; // the package turns 0 into 9000; 0 here means "any free port"
server.resetCompatState();
server.start().then(() => {
  const bound = server.server.address().port;
  console.log(`TTA_READY ${JSON.stringify({ port: bound, pid: process.pid, version })}`);
}, (e) => {
  console.error(`cannot listen on ${host}:${port}: ${e && e.message}`);
  process.exit(1);
});
const stop = () => {
  server.resetUpdates(); // an open long poll would hold the shutdown for up to 50 s
  server.stop().then(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
