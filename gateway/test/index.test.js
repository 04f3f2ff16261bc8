// The whole request path of the Worker (handle()), with an injected fetch.
import assert from "node:assert/strict";
import { test } from "node:test";
import worker, { handle } from "../src/index.js";
import { createHealthCache } from "../src/health.js";
import { assertEnvelope, fakeFetch, ok, refused, status } from "./helpers.js";

const A = "https://a.example.net";
const B = "https://b.example.net";
const ENV = { BACKEND_ORIGINS_JSON: JSON.stringify([A, B]), LB_VERSION: "1.2.3" };
const LB = "https://lb.example.net";

function deps(fetchFn, extra = {}) {
  return { fetch: fetchFn, random: () => 0, healthCache: createHealthCache(), ...extra };
}

test("the module exports a Worker with a fetch handler", () => {
  assert.equal(typeof worker.fetch, "function");
});

test("plain http is a 308 to the same URL on https, before anything else", async () => {
  const f = fakeFetch(() => ok());
  for (const path of ["/api/status?a=1&b=2", "/nope", "/api/bootstrap", "/webhook/tg"]) {
    const res = await handle(new Request(`http://lb.example.net${path}`, { method: "GET" }), ENV,
      deps(f));
    assert.equal(res.status, 308);
    assert.equal(res.headers.get("location"), `https://lb.example.net${path}`);
  }
  const port = await handle(new Request("http://lb.example.net:8080/x"), ENV, deps(f));
  assert.equal(port.headers.get("location"), "https://lb.example.net/x");
  assert.equal(f.calls.length, 0);
});

test("unknown paths are a 404 envelope and are not forwarded", async () => {
  const f = fakeFetch(() => ok());
  for (const path of ["/nope", "/api/bootstrap", "/debug/ping", "/debug", "/api/status/"]) {
    for (const method of ["GET", "POST"]) {
      const res = await handle(new Request(LB + path, { method }), ENV, deps(f));
      await assertEnvelope(res, "not_found", 404);
    }
  }
  assert.equal(f.calls.length, 0);
});

test("a wrong method is a 405 envelope with Allow", async () => {
  const f = fakeFetch(() => ok());
  let res = await handle(new Request(`${LB}/api/config`, { method: "DELETE" }), ENV, deps(f));
  await assertEnvelope(res, "method_not_allowed", 405);
  assert.equal(res.headers.get("allow"), "GET, PUT");
  res = await handle(new Request(`${LB}/webhook/tg`), ENV, deps(f));
  assert.equal(res.headers.get("allow"), "POST");
  res = await handle(new Request(`${LB}/healthz`, { method: "HEAD" }), ENV, deps(f));
  assert.equal(res.status, 405);
  assert.equal(res.headers.get("allow"), "GET");
  assert.equal(f.calls.length, 0);
});

test("a missing, empty or invalid pool is a 503 envelope with Retry-After", async () => {
  const f = fakeFetch(() => ok());
  for (const raw of [undefined, "", "[]", "nope", JSON.stringify(["http://a.example.net"]),
    JSON.stringify(["http://127.0.0.1:1"])]) {
    const res = await handle(new Request(`${LB}/api/status`), { BACKEND_ORIGINS_JSON: raw },
      deps(f));
    await assertEnvelope(res, "service_unavailable", 503);
    assert.equal(res.headers.get("retry-after"), "30");
  }
  assert.equal(f.calls.length, 0);
});

test("loopback http backends work only with LB_ALLOW_INSECURE_LOOPBACK=1", async () => {
  const f = fakeFetch(() => ok());
  const env = { BACKEND_ORIGINS_JSON: JSON.stringify(["http://127.0.0.1:9"]) };
  let res = await handle(new Request(`${LB}/healthz`), env, deps(f));
  assert.equal(res.status, 503);
  res = await handle(new Request(`${LB}/healthz`), { ...env, LB_ALLOW_INSECURE_LOOPBACK: "1" },
    deps(f));
  assert.equal(res.status, 200);
  assert.deepEqual(f.calls.map((c) => c.origin), ["http://127.0.0.1:9"]);
});

test("forwarding uses the random start and fails over to the next backend", async () => {
  const f = fakeFetch((origin) => (origin === B ? refused() : ok("from a")));
  const res = await handle(new Request(`${LB}/api/status`), ENV, deps(f, { random: () => 0.7 }));
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "from a");
  assert.deepEqual(f.calls.map((c) => c.origin), [B, A]);
});

test("LB_MAX_ATTEMPTS bounds the attempts", async () => {
  const f = fakeFetch(() => refused());
  const res = await handle(new Request(`${LB}/healthz`), { ...ENV, LB_MAX_ATTEMPTS: "1" }, deps(f));
  assert.equal(res.status, 503);
  assert.equal(f.calls.length, 1);
});

test("a POST body is buffered once and re-sent on failover", async () => {
  const body = '{"update_id": 1, "message": {"text": "h\u00e9llo \u{1F600}"}}  ';
  const f = fakeFetch((origin) => (origin === A ? refused() : ok()));
  const res = await handle(new Request(`${LB}/webhook/tg`, {
    method: "POST",
    body,
    headers: { "x-telegram-bot-api-secret-token": "tok", "content-type": "application/json" },
  }), ENV, deps(f));
  assert.equal(res.status, 200);
  const expected = new TextEncoder().encode(body);
  assert.deepEqual(f.calls.map((c) => c.body), [expected, expected]);
  assert.deepEqual(f.calls.map((c) => c.headers.get("x-telegram-bot-api-secret-token")),
    ["tok", "tok"]);
});

test("POST /api/audit is forwarded with its empty body and fails over like ordinary routes", async () => {
  const f = fakeFetch((origin) => (origin === A ? status(503) : ok('{"checked":0}')));
  const res = await handle(new Request(`${LB}/api/audit`, {
    method: "POST", headers: { authorization: "Bearer s3ss10n" },
  }), ENV, deps(f));
  assert.equal(res.status, 200);
  assert.deepEqual(f.calls.map((c) => [c.origin, c.method, c.body?.byteLength ?? 0,
    c.headers.get("authorization")]), [[A, "POST", 0, "Bearer s3ss10n"],
    [B, "POST", 0, "Bearer s3ss10n"]]);
  const get = await handle(new Request(`${LB}/api/audit`), ENV, deps(fakeFetch(() => ok())));
  assert.equal(get.status, 200);
});

test("/reconcile and /worker get one attempt and their own timeouts", async () => {
  for (const [path, variable] of [["/reconcile", "LB_RECONCILE_TIMEOUT_MS"],
    ["/worker", "LB_WORKER_TIMEOUT_MS"]]) {
    const f = fakeFetch(() => "hang");
    const started = Date.now();
    const res = await handle(new Request(LB + path, { method: "POST", body: "" }),
      { ...ENV, LB_REQUEST_TIMEOUT_MS: "1", [variable]: "60" }, deps(f));
    const took = Date.now() - started;
    await assertEnvelope(res, "service_unavailable", 503);
    assert.equal(f.calls.length, 1, path);
    assert.ok(took >= 50 && took < 2000, `${path} took ${took} ms`);
  }
});

test("ordinary routes use LB_REQUEST_TIMEOUT_MS", async () => {
  const f = fakeFetch(() => "hang");
  const started = Date.now();
  const res = await handle(new Request(`${LB}/api/status`), { ...ENV, LB_REQUEST_TIMEOUT_MS: "40" },
    deps(f));
  assert.equal(res.status, 503);
  assert.equal(f.calls.length, 2);
  assert.ok(Date.now() - started < 2000);
});

test("/healthz-worker probes every backend and reports LB_VERSION", async () => {
  const f = fakeFetch((origin) => (origin === A ? ok() : refused()));
  const token = "health-token-of-the-monitor-0123456789";
  const res = await handle(new Request(`${LB}/healthz-worker`, {
    headers: { authorization: `Bearer ${token}` },
  }), { ...ENV, LB_HEALTH_TOKEN: token }, deps(f));
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), {
    status: "ok", version: "1.2.3", available: 1, total: 2,
    backends: [{ origin: A, up: true, status: 200 }, { origin: B, up: false, status: null }],
  });
});

test("/healthz-worker: down (503) and no-backends (200)", async () => {
  const f = fakeFetch(() => refused());
  let res = await handle(new Request(`${LB}/healthz-worker`), ENV, deps(f));
  assert.equal(res.status, 503);
  assert.equal((await res.json()).status, "down");
  for (const raw of [undefined, "[]"]) {
    res = await handle(new Request(`${LB}/healthz-worker`), { BACKEND_ORIGINS_JSON: raw },
      deps(f));
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), {
      status: "no-backends", version: "unknown", available: 0, total: 0,
    });
  }
});

test("/healthz-worker answers from the cache within LB_HEALTH_TTL_MS", async () => {
  const f = fakeFetch(() => ok());
  const d = deps(f);
  await handle(new Request(`${LB}/healthz-worker`), ENV, d);
  await handle(new Request(`${LB}/healthz-worker`), ENV, d);
  assert.equal(f.calls.length, 2);
  await handle(new Request(`${LB}/healthz-worker`), { ...ENV, LB_HEALTH_TTL_MS: "0" }, d);
  assert.equal(f.calls.length, 4);
});
