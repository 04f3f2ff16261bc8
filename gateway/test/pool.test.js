import assert from "node:assert/strict";
import { test } from "node:test";
import { parseOrigin, parsePool } from "../src/pool.js";
import { DEFAULTS, insecureLoopbackAllowed, intVar } from "../src/settings.js";

const pool = (list, opts) => parsePool(JSON.stringify(list), opts);

test("missing or blank pool is an empty pool", () => {
  for (const raw of [undefined, null, "", "   "]) {
    assert.deepEqual(parsePool(raw), { ok: true, origins: [] });
  }
  assert.deepEqual(pool([]), { ok: true, origins: [] });
});

test("https origins are normalised and deduplicated, order kept", () => {
  const got = pool(["https://A.example.net", "https://b.example.net/", "https://a.example.net",
    "https://c.example.net:8443", "https://b.example.net:443"]);
  assert.deepEqual(got, {
    ok: true,
    origins: ["https://a.example.net", "https://b.example.net", "https://c.example.net:8443"],
  });
});

test("anything but a bare https origin rejects the whole pool", () => {
  const bad = [
    "http://a.example.net",
    "https://user:pw@a.example.net",
    "https://user@a.example.net",
    "https://@a.example.net",
    "https://a.example.net/path",
    "https://a.example.net//",
    "https://a.example.net/?x=1",
    "https://a.example.net?x=1",
    "https://a.example.net/#frag",
    "https://a.example.net#",
    " https://a.example.net",
    "https://a.example.net ",
    "ftp://a.example.net",
    "https://",
    "a.example.net",
    "",
    42,
    null,
    ["https://a.example.net"],
  ];
  for (const entry of bad) {
    const got = pool(["https://ok.example.net", entry]);
    assert.equal(got.ok, false, JSON.stringify(entry));
    assert.match(got.reason, /invalid backend origin/);
  }
});

test("non-JSON or non-array pools are invalid", () => {
  for (const raw of ["not json", "{\"a\":1}", "\"https://a.example.net\"", "1"]) {
    assert.equal(parsePool(raw).ok, false, raw);
  }
});

test("plain http is accepted only for loopback hosts, and only when allowed", () => {
  const loop = ["http://127.0.0.1:8081", "http://127.0.0.2:8082/", "http://localhost:9",
    "http://[::1]:8083"];
  assert.equal(pool(loop).ok, false);
  assert.deepEqual(pool(loop, { allowInsecureLoopback: true }).origins,
    ["http://127.0.0.1:8081", "http://127.0.0.2:8082", "http://localhost:9", "http://[::1]:8083"]);
  for (const entry of ["http://10.0.0.1", "http://example.net", "http://127.0.0.1.nip.io",
    "http://0.0.0.0:80", "http://user:pw@127.0.0.1:1"]) {
    assert.equal(parseOrigin(entry, true), null, entry);
  }
});

test("LB_ALLOW_INSECURE_LOOPBACK must be exactly \"1\"", () => {
  assert.equal(insecureLoopbackAllowed({ LB_ALLOW_INSECURE_LOOPBACK: "1" }), true);
  for (const v of [undefined, "", "0", "true", "yes", 1]) {
    assert.equal(insecureLoopbackAllowed({ LB_ALLOW_INSECURE_LOOPBACK: v }), false, String(v));
  }
});

test("numeric variables fall back to their defaults when missing or invalid", () => {
  assert.deepEqual(DEFAULTS, {
    LB_MAX_ATTEMPTS: 2,
    LB_REQUEST_TIMEOUT_MS: 10000,
    LB_RECONCILE_TIMEOUT_MS: 320000,
    LB_WORKER_TIMEOUT_MS: 300000,
    LB_HEALTH_TTL_MS: 30000,
  });
  assert.equal(intVar({}, "LB_MAX_ATTEMPTS", 1), 2);
  assert.equal(intVar({ LB_MAX_ATTEMPTS: "3" }, "LB_MAX_ATTEMPTS", 1), 3);
  assert.equal(intVar({ LB_MAX_ATTEMPTS: 4 }, "LB_MAX_ATTEMPTS", 1), 4);
  for (const bad of ["0", "-1", "2.5", "abc", "", "1e3"]) {
    assert.equal(intVar({ LB_MAX_ATTEMPTS: bad }, "LB_MAX_ATTEMPTS", 1), 2, bad);
  }
  assert.equal(intVar({ LB_HEALTH_TTL_MS: "0" }, "LB_HEALTH_TTL_MS", 0), 0);
});
