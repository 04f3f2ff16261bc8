// Issue #23, finding 3 (the gateway can be bypassed and names its backends) and the HSTS line
// of finding 8, through the Worker's whole request path (handle()) with an injected fetch.
// The signature is checked here with node:crypto, independently of the Worker's Web Crypto code.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";
import { createHealthCache } from "../src/health.js";
import { handle } from "../src/index.js";
import { fakeFetch, ok, refused, status } from "./helpers.js";

const A = "https://a.example.net";
const B = "https://b.example.net";
const LB = "https://lb.example.net";
const SECRET = "messageweave-gateway-test-secret-0123456789";
const HEALTH_TOKEN = "health-token-of-the-monitor-0123456789";
const NOW_MS = 1_700_000_000_500;
const ENV = {
  BACKEND_ORIGINS_JSON: JSON.stringify([A, B]),
  LB_VERSION: "1.2.3",
  GATEWAY_SECRET: SECRET,
  LB_HEALTH_TOKEN: HEALTH_TOKEN,
};
const HSTS = "max-age=31536000; includeSubDomains";
const SIGNATURE = /^t=(\d+),v1=([0-9a-f]{64})$/;

function deps(fetchFn, extra = {}) {
  return { fetch: fetchFn, random: () => 0, now: () => NOW_MS, healthCache: createHealthCache(),
    ...extra };
}

const mac = (secret, t, method, target, clientIp) =>
  createHmac("sha256", secret).update(`${t}\n${method}\n${target}\n${clientIp}`).digest("hex");

test("every forwarded request is signed over method, path with query, time and client address", async () => {
  // Finding 3: catches a Worker that forwards unsigned (a backend cannot tell it from a caller
  // that skipped the gateway), that signs something else than what it sends, or that lets a
  // client's own signature header through.
  const f = fakeFetch((origin) => (origin === A ? status(502) : ok()));
  const res = await handle(new Request(`${LB}/api/trace?q=a%20b`, {
    headers: { "cf-connecting-ip": "203.0.113.7", "x-mw-client-ip": "192.0.2.1",
      "x-mw-gateway-signature": "t=1,v1=" + "0".repeat(64) },
  }), ENV, deps(f));
  assert.equal(res.status, 200);
  assert.equal(f.calls.length, 2, "a failover attempt is signed too");
  for (const call of f.calls) {
    assert.equal(call.path, "/api/trace?q=a%20b");
    const m = SIGNATURE.exec(call.headers.get("x-mw-gateway-signature") ?? "");
    assert.ok(m, call.headers.get("x-mw-gateway-signature"));
    assert.equal(Number(m[1]), Math.floor(NOW_MS / 1000));
    assert.equal(m[2], mac(SECRET, m[1], "GET", "/api/trace?q=a%20b", "203.0.113.7"));
  }
});

test("a request without a connecting address is signed with an empty client address", async () => {
  // Finding 3: the backend believes x-mw-client-ip only as signed; an absent one is signed as "".
  const f = fakeFetch(() => ok());
  const res = await handle(new Request(`${LB}/webhook/tg`, { method: "POST", body: "{}" }), ENV,
    deps(f));
  assert.equal(res.status, 200);
  const [, t, v1] = SIGNATURE.exec(f.calls[0].headers.get("x-mw-gateway-signature"));
  assert.equal(v1, mac(SECRET, t, "POST", "/webhook/tg", ""));
  assert.equal(f.calls[0].headers.get("x-mw-client-ip"), null);
});

test("a GATEWAY_SECRET shorter than 32 characters is a 503, never an unsigned request", async () => {
  // Finding 3: catches a typo'd or placeholder secret silently forwarding unsigned (every
  // answer a 403 from the backends) or signing with a guessable key.
  const f = fakeFetch(() => ok());
  for (const secret of ["short", "x".repeat(31), `${"x".repeat(31)} `, "é".repeat(40)]) {
    const res = await handle(new Request(`${LB}/api/status`), { ...ENV, GATEWAY_SECRET: secret },
      deps(f));
    assert.equal(res.status, 503, JSON.stringify(secret));
  }
  assert.equal(f.calls.length, 0);
});

test("without GATEWAY_SECRET nothing is signed, and a client's signature header is dropped", async () => {
  // Finding 3: catches a client-made x-mw-gateway-signature passed on to a backend.
  const f = fakeFetch(() => ok());
  const { GATEWAY_SECRET: _, ...unsigned } = ENV;
  const res = await handle(new Request(`${LB}/api/status`, {
    headers: { "x-mw-gateway-signature": "t=1700000000,v1=" + "a".repeat(64) },
  }), unsigned, deps(f));
  assert.equal(res.status, 200);
  assert.equal(f.calls[0].headers.get("x-mw-gateway-signature"), null);
});

test("no public answer names the backend that gave it", async () => {
  // Finding 3: catches x-lb-backend on an answer: it tells anyone which origin to call
  // around the gateway (and its flood protection).
  for (const behaviour of [() => ok(), () => status(401), () => status(503), (o) =>
    (o === A ? refused() : ok())]) {
    const f = fakeFetch(behaviour);
    const res = await handle(new Request(`${LB}/api/status`), ENV, deps(f));
    assert.equal(res.headers.get("x-lb-backend"), null, String(res.status));
    for (const [, value] of res.headers) {
      assert.ok(!value.includes("a.example.net") && !value.includes("b.example.net"), value);
    }
  }
});

test("LB_EXPOSE_BACKEND=1 (tests and local development only) names it", async () => {
  const f = fakeFetch(() => ok());
  const res = await handle(new Request(`${LB}/api/status`), { ...ENV, LB_EXPOSE_BACKEND: "1" },
    deps(f));
  assert.equal(res.headers.get("x-lb-backend"), A);
  for (const v of ["0", "true", "yes", ""]) {
    const other = await handle(new Request(`${LB}/api/status`), { ...ENV, LB_EXPOSE_BACKEND: v },
      deps(fakeFetch(() => ok())));
    assert.equal(other.headers.get("x-lb-backend"), null, v);
  }
});

test("/healthz-worker lists no origin without the health token", async () => {
  // Finding 3: catches the public health answer handing out every backend's address.
  const f = fakeFetch((origin) => (origin === A ? ok() : refused()));
  const anonymous = [{}, { authorization: "Bearer wrong-token-wrong-token-wrong-token" },
    { authorization: `bearer ${HEALTH_TOKEN}` }, { authorization: `Bearer ${HEALTH_TOKEN}x` },
    { authorization: `Bearer ${HEALTH_TOKEN.slice(1)}` }, { authorization: HEALTH_TOKEN }];
  for (const headers of anonymous) {
    const res = await handle(new Request(`${LB}/healthz-worker`, { headers }), ENV, deps(f));
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.deepEqual(JSON.parse(text), { status: "ok", version: "1.2.3", available: 1, total: 2 });
    assert.ok(!text.includes("example.net"), text);
  }
  const listed = await handle(new Request(`${LB}/healthz-worker`, {
    headers: { authorization: `Bearer ${HEALTH_TOKEN}` },
  }), ENV, deps(f));
  assert.deepEqual((await listed.json()).backends, [
    { origin: A, up: true, status: 200 }, { origin: B, up: false, status: null }]);
  // A token too short to resist guessing lists nothing, even when presented.
  const short = await handle(new Request(`${LB}/healthz-worker`, {
    headers: { authorization: "Bearer short" },
  }), { ...ENV, LB_HEALTH_TOKEN: "short" }, deps(f));
  assert.equal((await short.json()).backends, undefined);
});

test("every answer over https carries HSTS, the gateway's own and the backends'", async () => {
  // Finding 8: catches an answer without Strict-Transport-Security: the admin key is typed
  // into this page, and a first visit by plain http could be intercepted.
  const f = fakeFetch((origin) => (origin === A ? status(401) : ok()));
  const cases = [
    [`${LB}/api/status`, {}, ENV], // forwarded (a backend's 401)
    [`${LB}/nope`, {}, ENV], // 404
    [`${LB}/api/config`, { method: "DELETE" }, ENV], // 405
    [`${LB}/api/status`, {}, { ...ENV, BACKEND_ORIGINS_JSON: "[]" }], // 503
    [`${LB}/api/status`, {}, { ...ENV, GATEWAY_SECRET: "short" }], // 503, misconfigured
    [`${LB}/healthz-worker`, {}, ENV],
    [`${LB}/healthz-worker`, { headers: { authorization: `Bearer ${HEALTH_TOKEN}` } }, ENV],
  ];
  for (const [url, init, env] of cases) {
    const res = await handle(new Request(url, init), env, deps(f));
    assert.equal(res.headers.get("strict-transport-security"), HSTS, `${url} ${res.status}`);
  }
  // RFC 6797 §7.2: not over plain http (a browser ignores it there); the 308 sends it to https.
  const redirect = await handle(new Request("http://lb.example.net/"), ENV, deps(f));
  assert.equal(redirect.status, 308);
  assert.equal(redirect.headers.get("strict-transport-security"), null);
});
