import assert from "node:assert/strict";
import { test } from "node:test";
import { backendResponse, forward, requestHeaders, rotation, shouldFailover } from "../src/forward.js";
import { assertEnvelope, fakeFetch, ok, refused, status } from "./helpers.js";

const A = "https://a.example.net";
const B = "https://b.example.net";
const C = "https://c.example.net";

test("rotation starts at the random index and wraps around", () => {
  const origins = [A, B, C];
  assert.deepEqual(rotation(origins, () => 0), [A, B, C]);
  assert.deepEqual(rotation(origins, () => 0.34), [B, C, A]);
  assert.deepEqual(rotation(origins, () => 0.99), [C, A, B]);
  assert.deepEqual(rotation(origins, () => 1), [C, A, B]); // clamps a degenerate random()
  assert.deepEqual(rotation([], () => 0.5), []);
});

test("rotation spreads the first choice over the pool", () => {
  const seen = new Set();
  for (let i = 0; i < 200; i++) seen.add(rotation([A, B, C])[0]);
  assert.deepEqual([...seen].sort(), [A, B, C]);
});

test("failover only on network errors, timeouts and 5xx", () => {
  assert.equal(shouldFailover({ error: new TypeError("fetch failed") }), true);
  for (const s of [500, 502, 503, 504, 599]) assert.equal(shouldFailover({ status: s }), true, s);
  for (const s of [200, 204, 301, 308, 400, 401, 404, 405, 409, 413, 422, 429]) {
    assert.equal(shouldFailover({ status: s }), false, s);
  }
});

function req(method, path, init = {}) {
  return new Request(`https://lb.example.net${path}`, { method, ...init });
}

// These tests learn which backend answered from x-lb-backend, so they ask for it
// (LB_EXPOSE_BACKEND = "1" in the Worker); a public answer never carries it (below).
async function run(request, fetchFn, opts = {}) {
  const body = ["GET", "HEAD"].includes(request.method) ? null : await request.arrayBuffer();
  return forward({
    request, body, order: [A, B, C], maxAttempts: 2, timeoutMs: 1000, fetchFn,
    exposeBackend: true, ...opts,
  });
}

test("without exposeBackend no answer names its backend, even one the backend set itself", async () => {
  const f = fakeFetch(() => ok("x", { headers: { "x-lb-backend": "https://inner.example.net" } }));
  const res = await run(req("GET", "/api/status"), f, { exposeBackend: false });
  assert.equal(res.headers.get("x-lb-backend"), null);
  const exposed = backendResponse(ok(), A, true);
  assert.equal(exposed.headers.get("x-lb-backend"), A);
});

test("a healthy first backend answers alone, with x-lb-backend", async () => {
  const f = fakeFetch(() => ok("hello", { headers: { "x-request-id": "r1" } }));
  const res = await run(req("GET", "/api/status?x=1"), f);
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "hello");
  assert.equal(res.headers.get("x-lb-backend"), A);
  assert.equal(res.headers.get("x-request-id"), "r1");
  assert.deepEqual(f.calls.map((c) => c.url), [`${A}/api/status?x=1`]);
  assert.equal(f.calls[0].redirect, "manual");
});

test("network error, then the next backend", async () => {
  const f = fakeFetch((origin) => (origin === A ? refused() : ok()));
  const res = await run(req("GET", "/healthz"), f);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("x-lb-backend"), B);
  assert.deepEqual(f.calls.map((c) => c.origin), [A, B]);
});

test("5xx fails over; 4xx does not", async () => {
  let f = fakeFetch((origin) => (origin === A ? status(502) : ok()));
  let res = await run(req("GET", "/healthz"), f);
  assert.equal(res.headers.get("x-lb-backend"), B);
  assert.equal(f.calls.length, 2);

  f = fakeFetch(() => status(401));
  res = await run(req("GET", "/api/enabled"), f);
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("x-lb-backend"), A);
  assert.equal(f.calls.length, 1);
});

test("a timeout fails over", async () => {
  const f = fakeFetch((origin) => (origin === A ? "hang" : ok()));
  const started = Date.now();
  const res = await run(req("GET", "/healthz"), f, { timeoutMs: 30 });
  assert.equal(res.headers.get("x-lb-backend"), B);
  assert.ok(Date.now() - started < 1000);
});

test("at most maxAttempts backends are tried", async () => {
  const f = fakeFetch(() => refused());
  const res = await run(req("GET", "/healthz"), f);
  assert.deepEqual(f.calls.map((c) => c.origin), [A, B]);
  await assertEnvelope(res, "service_unavailable", 503);
  assert.equal(res.headers.get("retry-after"), "30");
  assert.equal(res.headers.get("x-lb-backend"), null);

  const three = fakeFetch(() => refused());
  await run(req("GET", "/healthz"), three, { maxAttempts: 5 });
  assert.deepEqual(three.calls.map((c) => c.origin), [A, B, C]); // never more than the pool
});

test("when the last attempt is a 5xx, that answer is returned", async () => {
  const f = fakeFetch((origin) => (origin === A ? refused() : status(503)));
  const res = await run(req("GET", "/ready"), f);
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("x-lb-backend"), B);
  assert.equal(await res.text(), "status 503");
});

test("a single attempt never fails over", async () => {
  const f = fakeFetch(() => status(500));
  const res = await run(req("POST", "/reconcile", { body: "{}" }), f, { maxAttempts: 1 });
  assert.equal(res.status, 500);
  assert.equal(f.calls.length, 1);
});

test("body and headers are sent byte-exact on every attempt; hop-by-hop headers are not", async () => {
  const bytes = new Uint8Array([0, 255, 1, 128, 10, 13, 0x7b, 0xc3, 0x28, 0x7d]);
  const f = fakeFetch((origin) => (origin === A ? status(500) : ok()));
  const request = req("POST", "/webhook/tg", {
    body: bytes,
    headers: {
      authorization: "Bearer s3cr3t  with spaces",
      "x-telegram-bot-api-secret-token": "tg-secret_123",
      "content-type": "application/octet-stream",
      connection: "keep-alive, x-drop-me",
      "keep-alive": "timeout=5",
      "x-drop-me": "1",
      "proxy-authorization": "Basic abc",
      te: "trailers",
      upgrade: "websocket",
      "x-custom": "kept",
    },
  });
  const res = await run(request, f);
  assert.equal(res.headers.get("x-lb-backend"), B);
  assert.equal(f.calls.length, 2);
  for (const call of f.calls) {
    assert.equal(call.method, "POST");
    assert.deepEqual(call.body, bytes);
    assert.equal(call.headers.get("authorization"), "Bearer s3cr3t  with spaces");
    assert.equal(call.headers.get("x-telegram-bot-api-secret-token"), "tg-secret_123");
    assert.equal(call.headers.get("content-type"), "application/octet-stream");
    assert.equal(call.headers.get("x-custom"), "kept");
    for (const gone of ["connection", "keep-alive", "x-drop-me", "proxy-authorization", "te",
      "upgrade", "host", "content-length"]) {
      assert.equal(call.headers.get(gone), null, gone);
    }
  }
});

test("hop-by-hop response headers are stripped, others kept", async () => {
  const f = fakeFetch(() => new Response("x", {
    status: 201,
    headers: { connection: "close, x-hop", "x-hop": "1", "keep-alive": "1", "set-cookie": "a=1",
      "x-request-id": "abc" },
  }));
  const res = await run(req("PUT", "/api/config", { body: "{}" }), f);
  assert.equal(res.status, 201);
  assert.equal(res.headers.get("connection"), null);
  assert.equal(res.headers.get("x-hop"), null);
  assert.equal(res.headers.get("keep-alive"), null);
  assert.equal(res.headers.get("set-cookie"), "a=1");
  assert.equal(res.headers.get("x-request-id"), "abc");
});

test("redirects from a backend are passed through, not followed", async () => {
  const f = fakeFetch(() => new Response(null, { status: 307, headers: { location: "/x" } }));
  const res = await run(req("GET", "/"), f);
  assert.equal(res.status, 307);
  assert.equal(res.headers.get("location"), "/x");
});

test("requestHeaders drops Host and Content-Length (the runtime recomputes them)", () => {
  const h = requestHeaders(new Headers({ host: "lb.example.net", "content-length": "3", a: "b" }));
  assert.deepEqual([...h], [["a", "b"]]);
});

test("a client-sent x-mw-client-ip is replaced by the connecting address on every attempt", async () => {
  // Catches a gateway that passes the client's own claim on: a guesser would send a new
  // address with every try and never be locked by a backend that trusts this header.
  const f = fakeFetch((origin) => (origin === A ? status(502) : ok()));
  const res = await run(req("POST", "/api/admin/session", {
    headers: {
      "cf-connecting-ip": "203.0.113.7",
      "x-mw-client-ip": "192.0.2.1",
      "x-forwarded-for": "192.0.2.2",
    },
  }), f);
  assert.equal(res.headers.get("x-lb-backend"), B);
  assert.deepEqual(f.calls.map((c) => c.headers.get("x-mw-client-ip")),
    ["203.0.113.7", "203.0.113.7"]);
  // Other client headers still go along as sent; the backend must not trust them.
  assert.equal(f.calls[0].headers.get("x-forwarded-for"), "192.0.2.2");
});

test("without a connecting address, a client-sent x-mw-client-ip is dropped, nothing set", () => {
  // Catches the fallback passing the client's claim on when the runtime gives no address.
  for (const sent of [{ "x-mw-client-ip": "192.0.2.1" },
    { "X-MW-Client-IP": "192.0.2.1, 192.0.2.3", "cf-connecting-ip": "  " },
    { connection: "x-mw-client-ip", "x-mw-client-ip": "192.0.2.1" }]) {
    const h = requestHeaders(new Headers(sent));
    assert.equal(h.get("x-mw-client-ip"), null, JSON.stringify(sent));
  }
  const ipv6 = requestHeaders(new Headers({ "cf-connecting-ip": "2001:db8::7" }));
  assert.equal(ipv6.get("x-mw-client-ip"), "2001:db8::7");
});
