// The allowlist: the only paths the gateway forwards, each with the one set of methods the
// backend serves there. Everything else is answered by the gateway itself (404 or 405).
//
// One line per route: [path, "METHODS", timeout variable]. A third column marks a long-running
// route: it gets exactly one attempt (no failover) and the named timeout instead of
// LB_REQUEST_TIMEOUT_MS. Paths match exactly (no prefixes, no trailing-slash variants); the
// one pattern is the page's ES modules (ASSET_MODULE, below).
// HEAD is deliberately not implied by GET: the backend answers HEAD with 405 as well.
const ROUTE_TABLE = [
  ["/", "GET"],
  ["/assets/styles.css", "GET"],
  ["/api/status", "GET"],
  ["/api/config", "GET PUT"],
  ["/api/business-config", "GET PUT"],
  ["/api/business-config/preflight", "POST"],
  ["/api/admin/session", "POST"],
  ["/api/admin/session/revoke", "POST"],
  ["/api/enabled", "GET PUT"],
  ["/webhook/tg", "POST"],
  ["/push/jmap", "POST"],
  ["/api/push/register", "POST"],
  ["/api/telegram/register-webhook", "POST"],
  ["/api/telegram/delete-webhook", "POST"],
  ["/api/push/disable", "POST"],
  ["/reconcile", "POST", "LB_RECONCILE_TIMEOUT_MS"],
  ["/worker", "POST", "LB_WORKER_TIMEOUT_MS"],
  ["/ready", "GET"],
  ["/healthz", "GET"],
  // The admin page's operator API, added by this project (config_authorized on the backend).
  ["/api/delivery", "GET"],
  ["/api/dlq", "GET"],
  ["/api/dlq/replay", "POST"],
  ["/api/logs/send", "GET"],
  ["/api/logs/audit", "GET"],
  // The callbacks card: push lifecycle state, last StateChange, subscription expiry.
  ["/api/push/status", "GET"],
  // The gap audit: its last result, and a run now. Failover may run a slow audit twice; the
  // audit is idempotent (one atomic check-and-claim per mail), so that is harmless.
  ["/api/audit", "GET POST"],
  // The chats the webhook refused lately, for the admin page to offer "add to allowlist".
  ["/api/telegram/refused-chats", "GET"],
  // Who wrote to the bot, from its token alone (getUpdates, nothing confirmed): the chat id.
  ["/api/telegram/discover-chats", "POST"],
  // "Where is my mail?": the trace card's read-only search (?q= passed on unchanged).
  ["/api/trace", "GET"],
  // The rules card's dry run: reads the mailbox, sends and writes nothing.
  ["/api/rules/dry-run", "POST"],
  // Several mailboxes (issue #35): the accounts card, and an owner's sign-in and sign-out.
  ["/api/accounts", "GET POST"],
  ["/api/owner/session", "POST"],
  ["/api/owner/session/revoke", "POST"],
];

// One account's routes, `/api/accounts/<id>[/<what>]`: <id> as the backend accepts one
// (`^[a-z0-9][a-z0-9_-]{0,31}$`, SPEC G.1), so a path can name nothing else. A pattern, not a
// line per account: an account added on the page needs no gateway release.
const ACCOUNT_ID = "[a-z0-9][a-z0-9_-]{0,31}";
const ACCOUNT_TABLE = [
  ["", "GET PUT DELETE"],
  ["/status", "GET"],
  ["/enabled", "PUT"],
  ["/owner-key", "POST"],
];
const ACCOUNT_PATH = new RegExp(`^/api/accounts/${ACCOUNT_ID}(/[a-z-]+)?$`);

// Answered by the gateway itself, never forwarded.
const LOCAL_TABLE = [["/healthz-worker", "GET"]];

// The admin page's ES modules, GET /assets/<name>.js (main.js imports the others). <name> is
// lowercase letters, digits and "-": no dot, slash or percent sign, so a path can name no other
// directory or file type. The backend serves a fixed list of these names, 404 for the rest;
// a pattern keeps a new module of the page from needing a gateway release.
export const ASSET_MODULE = /^\/assets\/[a-z][a-z0-9-]{0,63}\.js$/;

function route(path, methods, timeoutVar, local) {
  const list = methods.split(" ");
  return { path, methods: new Set(list), allow: list.join(", "), timeoutVar: timeoutVar ?? null, local };
}

function compile(table, local) {
  const out = new Map();
  for (const [path, methods, timeoutVar] of table) {
    if (out.has(path)) throw new Error(`duplicate route ${path}`);
    out.set(path, route(path, methods, timeoutVar, local));
  }
  return out;
}

export const ROUTES = compile(ROUTE_TABLE, false);
export const LOCAL_ROUTES = compile(LOCAL_TABLE, true);
export const ASSET_ROUTE = route("/assets/<name>.js", "GET", null, false);
export const ACCOUNT_ROUTES = new Map(ACCOUNT_TABLE.map(
  ([tail, methods]) => [tail, route(`/api/accounts/<id>${tail}`, methods, null, false)]));

function accountRoute(path) {
  const m = ACCOUNT_PATH.exec(path);
  return m ? ACCOUNT_ROUTES.get(m[1] ?? "") : undefined;
}

// Paths that must never reach a backend, whatever the table says: the one-time bootstrap
// (it takes the master key) and the debug surface.
export function neverForwarded(path) {
  return path === "/api/bootstrap" || path === "/debug" || path.startsWith("/debug/");
}

// -> {status: "ok", route} | {status: 404} | {status: 405, allow}
export function matchRoute(method, path) {
  if (neverForwarded(path)) return { status: 404 };
  const found = LOCAL_ROUTES.get(path) ?? ROUTES.get(path) ??
    (ASSET_MODULE.test(path) ? ASSET_ROUTE : undefined) ?? accountRoute(path);
  if (!found) return { status: 404 };
  if (!found.methods.has(method)) return { status: 405, allow: found.allow };
  return { status: "ok", route: found };
}
