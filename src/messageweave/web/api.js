// Calls to the service: one `api()` for every route, the error envelope read into an
// `ApiFailure`, and the session's token (kept only in this page's memory): the admin's, or an
// account owner's (`account` names the account; null for the admin's).
import { t } from "./i18n.js";

export const session = { token: null, account: null };

// Set by session.js: what to do when the server says the session is no longer valid.
let sessionLost = function () {};
export function onSessionLost(handler) {
  sessionLost = handler;
}

const FETCH = {
  credentials: "omit",
  cache: "no-store",
  redirect: "error",
  referrerPolicy: "no-referrer",
};

// `configError`: the rule a configuration broke (`x-config-error`); `telegramError`:
// Telegram's own words for a refused call (`x-telegram-error`).
export class ApiFailure extends Error {
  constructor(status, code, configError, telegramError) {
    super(code || (status ? "HTTP " + status : t("common.network")));
    this.status = status;
    this.code = code;
    this.configError = configError;
    this.telegramError = telegramError || null;
  }
}

// Integers are kept as strings and written as bare JSON numbers (64-bit ids exceed 2^53).
const INT_MARK = "\u0000int:";
function jsonBody(obj) {
  return JSON.stringify(obj, function (_key, value) {
    return typeof value === "bigint" ? INT_MARK + value.toString() : value;
  }).replace(/"\\u0000int:(-?\d+)"/g, "$1");
}

// `auth`: a bearer token, or true for the session. Answers the parsed body (null for 204);
// a 401 on a session call ends the session.
export async function api(method, path, body, auth) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const token = auth === true ? session.token : auth;
  if (token) headers.Authorization = "Bearer " + token;
  let response;
  try {
    response = await fetch(path, Object.assign({}, FETCH, {
      method: method,
      headers: headers,
      body: body === undefined ? undefined : jsonBody(body),
    }));
  } catch (err) {
    throw new ApiFailure(0, null, null);
  }
  let data = null;
  if (response.status !== 204) {
    try { data = await response.json(); } catch (err) { data = null; }
  }
  if (!response.ok) {
    const code = data && typeof data.error === "string" ? data.error : null;
    const failure = new ApiFailure(response.status, code, response.headers.get("x-config-error"),
      response.headers.get("x-telegram-error"));
    failure.retryAfter = response.headers.get("retry-after");  // seconds, when the server says
    if (response.status === 401 && auth === true && session.token) {
      sessionLost();
    }
    throw failure;
  }
  return data;
}

export function reasonOf(err) {
  if (!(err instanceof ApiFailure)) return String(err && err.message ? err.message : err);
  if (err.status === 0) return t("common.network");
  return err.code ? err.code + ", " + err.status : "HTTP " + err.status;
}

// An operator route this server version does not have (the card says so instead of failing).
export function isMissingRoute(err) {
  return err instanceof ApiFailure && err.status === 404 && (err.code === "not_found" || !err.code);
}

// `?account=` (after `sep`) of the routes that act on one mailbox; nothing for `default`.
export function accountQuery(sep, account) {
  return account && account !== "default" ? sep + "account=" + encodeURIComponent(account) : "";
}

// The 409 of such a route that needs the mail server, for a paused account, in words.
export function accountPaused(account) {
  return t("acct.pausedRoute", { id: account });
}

// Two cards edit one account (its form and, for its owner, the notification rules), each only
// its own fields: a save tells the other the account's new revision, to patch against.
export const ACCOUNT_REVISION = "mw:account-revision";
export function announceRevision(id, revision) {
  document.dispatchEvent(new CustomEvent(ACCOUNT_REVISION, { detail: { id: id, revision: revision } }));
}
