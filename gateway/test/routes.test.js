import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { test } from "node:test";
import { ACCOUNT_ROUTES, ASSET_MODULE, ASSET_ROUTE, LOCAL_ROUTES, matchRoute, neverForwarded, ROUTES } from "../src/routes.js";

const EXPECTED = {
  "/": "GET",
  "/assets/styles.css": "GET",
  "/api/status": "GET",
  "/api/config": "GET, PUT",
  "/api/business-config": "GET, PUT",
  "/api/business-config/preflight": "POST",
  "/api/admin/session": "POST",
  "/api/admin/session/revoke": "POST",
  "/api/enabled": "GET, PUT",
  "/webhook/tg": "POST",
  "/push/jmap": "POST",
  "/api/push/register": "POST",
  "/api/telegram/register-webhook": "POST",
  "/api/telegram/delete-webhook": "POST",
  "/api/push/disable": "POST",
  "/reconcile": "POST",
  "/worker": "POST",
  "/ready": "GET",
  "/healthz": "GET",
  "/api/delivery": "GET",
  "/api/dlq": "GET",
  "/api/dlq/replay": "POST",
  "/api/logs/send": "GET",
  "/api/logs/audit": "GET",
  "/api/push/status": "GET",
  "/api/audit": "GET, POST",
  "/api/telegram/refused-chats": "GET",
  "/api/telegram/discover-chats": "POST",
  "/api/trace": "GET",
  "/api/rules/dry-run": "POST",
  "/api/accounts": "GET, POST",
  "/api/owner/session": "POST",
  "/api/owner/session/revoke": "POST",
};

test("the table forwards the 18 exact contract routes, the 12 operator routes and the 3 of the accounts, nothing else", () => {
  assert.equal(ROUTES.size, 33);
  const actual = Object.fromEntries([...ROUTES].map(([path, r]) => [path, r.allow]));
  assert.deepEqual(actual, EXPECTED);
});

test("only /reconcile and /worker are long-running, each with its own timeout variable", () => {
  const long = [...ROUTES.values()].filter((r) => r.timeoutVar !== null);
  assert.deepEqual(
    long.map((r) => [r.path, r.timeoutVar]),
    [
      ["/reconcile", "LB_RECONCILE_TIMEOUT_MS"],
      ["/worker", "LB_WORKER_TIMEOUT_MS"],
    ],
  );
});

test("every allowed method matches; other methods are 405 with the Allow list", () => {
  for (const [path, allow] of Object.entries(EXPECTED)) {
    for (const method of allow.split(", ")) {
      assert.equal(matchRoute(method, path).status, "ok", `${method} ${path}`);
    }
    for (const method of ["DELETE", "PATCH", "OPTIONS", "HEAD", "POST", "PUT", "GET"]) {
      if (allow.split(", ").includes(method)) continue;
      assert.deepEqual(matchRoute(method, path), { status: 405, allow }, `${method} ${path}`);
    }
  }
});

test("HEAD is not implied by GET", () => {
  assert.deepEqual(matchRoute("HEAD", "/healthz"), { status: 405, allow: "GET" });
});

test("unknown paths, prefixes and trailing-slash variants are 404", () => {
  for (const path of ["/nope", "/api", "/api/status/", "/api/statusx", "//api/status",
    "/api/config/extra", "/healthz/", "/API/STATUS", "/api/%73tatus"]) {
    assert.deepEqual(matchRoute("GET", path), { status: 404 }, path);
  }
});

test("bootstrap and the debug surface are never forwarded", () => {
  for (const path of ["/api/bootstrap", "/debug", "/debug/ping", "/debug/anything/deeper"]) {
    assert.ok(neverForwarded(path));
    for (const method of ["GET", "POST", "PUT"]) {
      assert.deepEqual(matchRoute(method, path), { status: 404 }, `${method} ${path}`);
    }
  }
  for (const path of [...ROUTES.keys(), ...LOCAL_ROUTES.keys()]) {
    assert.ok(!neverForwarded(path), `${path} must not be in the table`);
  }
});

test("/healthz-worker is the gateway's own GET route", () => {
  const m = matchRoute("GET", "/healthz-worker");
  assert.equal(m.status, "ok");
  assert.equal(m.route.local, true);
  assert.deepEqual(matchRoute("POST", "/healthz-worker"), { status: 405, allow: "GET" });
  assert.ok(!ROUTES.has("/healthz-worker"));
});

// The admin page's modules (src/messageweave/web/static.py, SCRIPTS), and the single script an
// older backend serves.
// Every module of the admin page, as the backend ships them (a new one needs no table line).
const PAGE_MODULES = readdirSync(new URL("../../src/messageweave/web/", import.meta.url))
  .filter((name) => name.endsWith(".js"));

test("every page module is forwarded as GET /assets/<name>.js, and only GET", () => {
  for (const name of PAGE_MODULES) {
    const path = `/assets/${name}`;
    const m = matchRoute("GET", path);
    assert.equal(m.status, "ok", path);
    assert.equal(m.route, ASSET_ROUTE);
    assert.equal(m.route.timeoutVar, null);
    assert.equal(m.route.local, false);
    for (const method of ["HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
      assert.deepEqual(matchRoute(method, path), { status: 405, allow: "GET" }, `${method} ${path}`);
    }
  }
  assert.equal(matchRoute("GET", "/assets/styles.css").route.path, "/assets/styles.css");
  assert.equal(matchRoute("GET", `/assets/${"a".repeat(64)}.js`).status, "ok");
});

test("the module pattern names no other directory, file type or encoded path", () => {
  for (const path of [
    "/assets/.js", "/assets/-a.js", "/assets/1a.js", "/assets/Main.js", "/assets/main.JS",
    "/assets/main.js/", "/assets/main.jsx", "/assets/main.js.map", "/assets/main..js",
    "/assets/.main.js", "/assets/a/b.js", "/assets//main.js", "/assets/../main.js",
    "/assets/..%2fstatic.py", "/assets/%2e%2e.js", "/assets/%6dain.js", "/assets/main%2ejs",
    "/assets/a b.js", "/assets/a_b.js", "/assets/main.js%00", "/assets/main.js;x",
    "/assets/", "/assets", "/assetsx/main.js", "/x/assets/main.js", "/assets/index.html",
    "/assets/static.py", "/assets/styles.css/", `/assets/${"a".repeat(65)}.js`,
  ]) {
    assert.deepEqual(matchRoute("GET", path), { status: 404 }, path);
  }
  assert.ok(!ASSET_MODULE.test("/debug/x.js") && !ASSET_MODULE.test("/api/bootstrap"));
});

// Catches: the accounts card, an owner's sign-in and every `/api/accounts/<id>…` route answered
// 404 by the gateway (issue #35 added them to the service only), so a deployment behind the
// gateway could not add, pause or remove an account, and no owner could sign in.
test("one account's routes are forwarded for any valid id, with the service's methods only", () => {
  const cases = [
    ["", ["GET", "PUT", "DELETE"]], ["/status", ["GET"]], ["/enabled", ["PUT"]],
    ["/owner-key", ["POST"]],
  ];
  for (const id of ["default", "mum", "work-2", "a_b", "0", "a".repeat(32)]) {
    for (const [tail, methods] of cases) {
      const path = `/api/accounts/${id}${tail}`;
      for (const method of methods) {
        const m = matchRoute(method, path);
        assert.equal(m.status, "ok", `${method} ${path}`);
        assert.equal(m.route, ACCOUNT_ROUTES.get(tail));
        assert.equal(m.route.timeoutVar, null);
      }
      for (const method of ["HEAD", "GET", "POST", "PUT", "DELETE", "PATCH"]) {
        if (methods.includes(method)) continue;
        assert.deepEqual(matchRoute(method, path),
          { status: 405, allow: methods.join(", ") }, `${method} ${path}`);
      }
    }
  }
  for (const [path, methods] of [["/api/accounts", "GET POST"], ["/api/owner/session", "POST"],
    ["/api/owner/session/revoke", "POST"]]) {
    for (const method of methods.split(" ")) {
      assert.equal(matchRoute(method, path).status, "ok", `${method} ${path}`);
    }
  }
});

test("the account pattern names no other path", () => {
  for (const path of [
    "/api/accounts/", "/api/accounts//status", "/api/accounts/Mum", "/api/accounts/-a",
    "/api/accounts/_a", `/api/accounts/${"a".repeat(33)}`, "/api/accounts/a/b",
    "/api/accounts/a/status/", "/api/accounts/a/other", "/api/accounts/a/../status",
    "/api/accounts/%61", "/api/accounts/a%2fstatus", "/api/accounts/a.b", "/api/accounts/a/",
    "/api/accountsx/a", "/x/api/accounts/a", "/api/accounts/a/owner-key/x",
  ]) {
    assert.deepEqual(matchRoute("GET", path), { status: 404 }, path);
    assert.deepEqual(matchRoute("POST", path), { status: 404 }, path);
  }
});
