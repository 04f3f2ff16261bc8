#!/usr/bin/env node
// MessageWeave's Telegram test peer: the npm Bot API emulator `telegram-test-api` (pinned 4.2.1,
// unmodified on disk) plus a compatibility layer that swaps a few of its routes at start-up.
//
// Env: TTA_PORT (default 0 = any free port), TTA_HOST (loopback only, default 127.0.0.1),
//      TTA_STORE_TIMEOUT seconds before stored messages are purged (default 3600).
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
//   * setWebhook answers true, checks secret_token's alphabet, keeps allowed_updates.
//   * getWebhookInfo, setMyCommands, getMyCommands, deleteMyCommands are implemented;
//     getUpdates answers 409 while a webhook is set (as Telegram does).
//   * webhook deliveries carry X-Telegram-Bot-Api-Secret-Token, lose the internal `botToken`
//     field, honour allowed_updates, and a non-2xx answer is recorded instead of killing node
//     (the package's unhandled promise rejection ends the process).
//   * unknown methods get a Telegram-shaped 404 instead of a bare HTTP 500.
//
// Control API for tests (POST, JSON, no /bot prefix):
//   /control/userMessage   {token, chat_id, text, from_id?, first_name?, username?,
//                           chat_type?, title?}  plays the human: builds the Update, delivers it
//                           to the webhook (waits for the answer) or queues it for getUpdates.
//                           -> {update_id, message_id, delivery: {status}|{error}|null}
//   /control/callback      {token, chat_id, message_id?, data, from_id?, first_name?} plays
//                           the human pressing a button under the bot's message `message_id`:
//                           a callback_query Update {id, from, message (as stored now, keyboard
//                           included), chat_instance, data} delivered like /control/userMessage.
//                           `data` is not checked against the keyboard (a modified client can
//                           send any). -> {update_id, callback_id, delivery}
//   /control/callbackAnswers {token} -> [{callback_query_id, text, show_alert}], oldest first
//   /control/sentMessages  {token, chat_id?} -> messages the bot sent, oldest first, each with
//                           `stored_ms`: when the emulator stored it (Unix ms; a harness field)
//   /control/failures      {token?, method?, chat_id?, error_code?, description?, retry_after?,
//                           migrate_to_chat_id?, delay_ms?, close?, raw_body?, result_override?,
//                           skip?, times?}
//                           -> {id}. Makes matching Bot API calls fail like Telegram would;
//                           `skip` lets that many matching calls through first.
//                           `result_override` (alone) is a fault Telegram never produces: the
//                           call is carried out, but its `ok: true` answer has these fields of
//                           `result` replaced (the package once echoed fields as strings).
//   /control/failures/clear {token?}  removes the rules (of one token, or all)
//   /control/webhookDeliveries {token?} -> [{update_id, url, status|error, secret_sent}]
//   /control/reset         {} forgets messages, webhooks, commands, failure rules, deliveries
'use strict';

const axios = require('axios');
const TelegramServer = require('telegram-test-api');
const { routes } = require('telegram-test-api/lib/routes/index');
const { handle } = require('telegram-test-api/lib/routes/bot/utils');
const { version } = require('telegram-test-api/package.json');

const port = Number(process.env.TTA_PORT || 0);
const host = process.env.TTA_HOST || '127.0.0.1';
const storeTimeout = Number(process.env.TTA_STORE_TIMEOUT || 3600);

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
const DEFAULT_DESCRIPTIONS = {
  400: 'Bad Request: chat not found',
  401: 'Unauthorized',
  403: 'Forbidden: bot was blocked by the user',
  404: 'Not Found',
  409: 'Conflict: terminated by other getUpdates request; make sure that only one bot instance is running',
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

replaceRoute('setWebhook', 'setWebhook', (app, srv) => {
  handle(app, '/bot:token/setWebhook', (req, res) => {
    const { token } = req.params;
    const url = param(req, 'url');
    if (!url) { // Telegram: an empty url removes the webhook
      srv.deleteWebhook(token);
      return res.json({ ok: true, result: true, description: 'Webhook was deleted' });
    }
    if (!/^https?:\/\/[^/]+/.test(String(url))) {
      return fail(res, 400, 'Bad Request: bad webhook: An HTTPS URL must be provided for webhook');
    }
    const secret = param(req, 'secret_token');
    if (secret !== undefined && !SECRET_TOKEN.test(String(secret))) {
      return fail(res, 400, 'Bad Request: secret token contains unallowed characters');
    }
    const allowed = jsonParam(req, 'allowed_updates');
    if (allowed !== undefined && !Array.isArray(allowed)) {
      return fail(res, 400, "Bad Request: can't parse allowed updates list");
    }
    const drop = String(param(req, 'drop_pending_updates')) === 'true';
    if (drop) {
      srv.storage.userMessages.forEach((u) => { if (u.botToken === token) u.isRead = true; });
    }
    srv.setWebhook({
      url: String(url),
      secret_token: secret === undefined ? undefined : String(secret),
      allowed_updates: allowed,
    }, token);
    return res.json({ ok: true, result: true, description: 'Webhook was set' });
  });
});

replaceRoute('getUpdates', 'getUpdates', (app, srv) => {
  handle(app, '/bot:token/getUpdates', (req, res) => {
    if (srv.webhooks[req.params.token]) {
      return fail(res, 409, "Conflict: can't use getUpdates method while webhook is active;"
        + ' use deleteWebhook to delete the webhook first');
    }
    return res.json({ ok: true, result: srv.getUpdates(req.params.token) });
  });
});

const commandsKey = (req) => {
  const scope = jsonParam(req, 'scope') || { type: 'default' };
  return `${req.params.token}|${JSON.stringify(scope)}|${param(req, 'language_code') || ''}`;
};

const extraBotRoutes = [
  (app, srv) => {
    handle(app, '/bot:token/getWebhookInfo', (req, res) => {
      const { token } = req.params;
      const wh = srv.webhooks[token];
      const pending = srv.storage.userMessages.filter((u) => u.botToken === token && !u.isRead);
      const result = { url: wh ? wh.url : '', has_custom_certificate: false,
        pending_update_count: pending.length };
      if (wh && wh.allowed_updates) result.allowed_updates = wh.allowed_updates;
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
      const fromId = Number(b.from_id !== undefined ? b.from_id : b.chat_id);
      const from = { id: fromId, is_bot: false, first_name: b.first_name || 'Test' };
      if (b.username) from.username = b.username;
      const chat = chatType === 'private'
        ? { ...from, id: Number(b.chat_id), type: 'private' }
        : { id: Number(b.chat_id), type: chatType, title: b.title || 'Test group' };
      delete chat.is_bot;
      const message = { from, chat, date: nowSeconds(), text: b.text };
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
    app.post('/control/reset', (_req, res) => {
      srv.storage.userMessages = [];
      srv.storage.botMessages = [];
      srv.webhooks = {};
      srv.resetCompatState();
      res.json({ ok: true, result: true });
    });
  },
];

// Order matters: failure injection first, the catch-all 404 last.
const unknownIdx = routes.indexOf(require('telegram-test-api/lib/routes/bot/unknownMethod').unknownMethod);
routes.splice(unknownIdx, 1, ...extraBotRoutes, unknownMethodRoute);
routes.unshift(failureInjection, ...controlRoutes);

// --- server behaviour -----------------------------------------------------------------------

TelegramServer.prototype.resetCompatState = function resetCompatState() {
  this.failureRules = [];
  this.ruleId = this.ruleId || 0;
  this.webhookDeliveries = [];
  this.lastWebhookError = {};
  this.commands = {};
  this.callbackQueries = {};
  this.callbackAnswers = [];
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

// Returns the delivery record, or undefined when the update was queued for getUpdates.
TelegramServer.prototype.addUserUpdate = async function addUserUpdate(update) {
  if (!update.botToken) throw new Error('The update must contain a `botToken` field.');
  const webhook = this.webhooks[update.botToken];
  update.updateId = this.updateId;
  this.updateId += 1;
  if (!webhook) {
    this.storage.userMessages.push(update);
    return undefined;
  }
  const kind = 'callbackQuery' in update ? 'callback_query' : 'message';
  if (Array.isArray(webhook.allowed_updates) && webhook.allowed_updates.length
      && !webhook.allowed_updates.includes(kind)) {
    return { update_id: update.updateId, url: webhook.url, skipped: 'not in allowed_updates' };
  }
  const headers = { 'content-type': 'application/json' };
  if (webhook.secret_token) headers['X-Telegram-Bot-Api-Secret-Token'] = webhook.secret_token;
  const rec = {
    botToken: update.botToken, update_id: update.updateId, url: webhook.url,
    secret_sent: Boolean(webhook.secret_token), time: Date.now(),
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
    this.lastWebhookError[update.botToken] = {
      date: nowSeconds(),
      message: rec.error ? `Connection failed: ${rec.error}` : `Wrong response from the webhook: ${rec.status}`,
    };
    console.error(`webhook delivery failed: update ${rec.update_id} -> ${rec.status || rec.error}`);
  }
  const { botToken: _t, ...result } = rec;
  return result;
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
const stop = () => server.stop().then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
