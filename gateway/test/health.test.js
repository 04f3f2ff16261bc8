import assert from "node:assert/strict";
import { test } from "node:test";
import { aggregate, createHealthCache, healthResponse, probe } from "../src/health.js";
import { fakeFetch, ok, refused, status } from "./helpers.js";

const A = "https://a.example.net";
const B = "https://b.example.net";
const up = (origin) => ({ origin, up: true, status: 200 });
const down = (origin, s = null) => ({ origin, up: false, status: s });
const okPool = (origins) => ({ ok: true, origins });

test("aggregate: ok with at least one backend up", () => {
  assert.deepEqual(aggregate(okPool([A, B]), [up(A), down(B)], "v1"), [200, {
    status: "ok", version: "v1", available: 1, total: 2, backends: [up(A), down(B)],
  }]);
  assert.equal(aggregate(okPool([A, B]), [up(A), up(B)], "v1")[1].available, 2);
});

test("aggregate: down when none is up", () => {
  const [http, body] = aggregate(okPool([A, B]), [down(A), down(B, 503)], "v1");
  assert.equal(http, 503);
  assert.equal(body.status, "down");
  assert.equal(body.available, 0);
  assert.equal(body.total, 2);
});

test("aggregate: no-backends for an empty pool, down for an invalid one", () => {
  assert.deepEqual(aggregate(okPool([]), [], "v1"), [200, {
    status: "no-backends", version: "v1", available: 0, total: 0, backends: [],
  }]);
  const [http, body] = aggregate({ ok: false, reason: "x" }, [], "v1");
  assert.equal(http, 503);
  assert.equal(body.status, "down");
  assert.equal(body.total, 0);
});

test("probe: 200 is up; other statuses and errors are down", async () => {
  const f = fakeFetch((origin) => ({ [A]: ok(), [B]: status(503) })[origin] ?? refused());
  assert.deepEqual(await probe(f, A, 100), up(A));
  assert.deepEqual(await probe(f, B, 100), down(B, 503));
  assert.deepEqual(await probe(f, "https://c.example.net", 100), down("https://c.example.net"));
  assert.deepEqual(f.calls.map((c) => [c.url, c.method]), [
    [`${A}/healthz`, "GET"], [`${B}/healthz`, "GET"], ["https://c.example.net/healthz", "GET"],
  ]);
  const hang = fakeFetch(() => "hang");
  assert.deepEqual(await probe(hang, A, 20), down(A));
});

test("the cache answers within the TTL and probes again after it", async () => {
  let t = 1000;
  let aUp = true;
  const f = fakeFetch((origin) => (origin === A && aUp ? ok() : refused()));
  const cache = createHealthCache();
  const opts = { fetchFn: f, timeoutMs: 100, ttlMs: 30000, now: () => t };
  assert.deepEqual(await cache.backends([A, B], opts), [up(A), down(B)]);
  aUp = false;
  t += 29999;
  assert.deepEqual(await cache.backends([A, B], opts), [up(A), down(B)]);
  assert.equal(f.calls.length, 2);
  t += 1;
  assert.deepEqual(await cache.backends([A, B], opts), [down(A), down(B)]);
  assert.equal(f.calls.length, 4);
  // a different pool is never answered from another pool's entry
  await cache.backends([B], opts);
  assert.equal(f.calls.length, 5);
  // TTL 0: always probe
  await cache.backends([B], { ...opts, ttlMs: 0 });
  await cache.backends([B], { ...opts, ttlMs: 0 });
  assert.equal(f.calls.length, 7);
});

test("healthResponse is JSON, not cached by clients", async () => {
  const f = fakeFetch(() => ok());
  const res = await healthResponse(okPool([A]), "v9", createHealthCache(),
    { fetchFn: f, timeoutMs: 100, ttlMs: 0, now: Date.now });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/json");
  assert.equal(res.headers.get("cache-control"), "no-store");
  assert.deepEqual(await res.json(), {
    status: "ok", version: "v9", available: 1, total: 1, backends: [up(A)],
  });
});
