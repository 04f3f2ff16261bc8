// The gateway in the real workerd runtime (Miniflare, local only) in front of two real
// MessageWeave backends sharing one Redis, all on free loopback ports.
//
// Programs (override with the environment variables):
//   MESSAGEWEAVE_BIN  default <repo>/.venv/bin/messageweave, else `messageweave` on PATH
//   REDIS_SERVER_BIN  default <repo>/.venv/bin/redis-server, else `redis-server` on PATH
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import net from "node:net";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const GATEWAY = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const REPO = resolve(GATEWAY, "..");
const ADMIN_KEY = "5e".repeat(32); // CONFIG_ENCRYPTION_KEY, also the admin credential
const DEBUG_TOKEN = "debug-token-for-the-gateway-test";
// The Worker's GATEWAY_SECRET binding and the backends' GATEWAY_SECRET (issue #23).
const GATEWAY_SECRET = "gateway-secret-of-the-integration-test-0123456789";
const HEALTH_TOKEN = "health-token-of-the-integration-test-0123456789";
const HSTS = "max-age=31536000; includeSubDomains";
const HEX32 = /^[0-9a-f]{32}$/;
const STARTUP_MS = 30_000;

const children = [];
let redis;
let backendA;
let backendB;
let mf;
let mfPublic; // the same Worker without LB_EXPOSE_BACKEND, as deployed
let workerLog = "";

function program(envName, venvName) {
  if (process.env[envName]) return process.env[envName];
  const venv = join(REPO, ".venv", "bin", venvName);
  return existsSync(venv) ? venv : venvName;
}

function freePort() {
  return new Promise((res, rej) => {
    const srv = net.createServer();
    srv.once("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

function start(name, cmd, args, env = {}) {
  const child = spawn(cmd, args, {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const proc = { name, child, output: "", exited: false };
  const keep = (chunk) => {
    proc.output = (proc.output + chunk).slice(-8000);
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  proc.exit = new Promise((res) => {
    child.once("exit", (code, signal) => {
      proc.exited = true;
      res({ code, signal });
    });
    child.once("error", (err) => {
      proc.exited = true;
      proc.output += `\nspawn failed: ${err.message}`;
      res({ code: null, signal: null });
    });
  });
  children.push(proc);
  return proc;
}

async function waitFor(proc, check) {
  const deadline = Date.now() + STARTUP_MS;
  while (Date.now() < deadline) {
    if (proc.exited) break;
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const hint = "set MESSAGEWEAVE_BIN / REDIS_SERVER_BIN, or install the backend into <repo>/.venv";
  throw new Error(`${proc.name} did not start (${proc.child.spawnfile}; ${hint}):\n${proc.output}`);
}

function tcpOpen(port) {
  return new Promise((res) => {
    const s = net.connect(port, "127.0.0.1");
    s.once("connect", () => {
      s.end();
      res(true);
    });
    s.once("error", () => res(false));
  });
}

async function startBackend(name, redisPort) {
  const port = await freePort();
  const proc = start(name, program("MESSAGEWEAVE_BIN", "messageweave"),
    ["serve", "--host", "127.0.0.1"], {
      REDIS_URL: `redis://127.0.0.1:${redisPort}/0`,
      CONFIG_ENCRYPTION_KEY: ADMIN_KEY,
      PORT: String(port),
      DEBUG_ENABLED: "1",
      DEBUG_TOKEN,
      // The deployment the gateway is for: the backends serve only what it signed, and believe
      // its client-address header on those requests only. No TRUSTED_PROXIES: the signature,
      // not the peer's address, says a request came through the gateway.
      GATEWAY_SECRET,
      TRUSTED_PROXY_HEADER: "x-mw-client-ip",
    });
  proc.origin = `http://127.0.0.1:${port}`;
  await waitFor(proc, async () => {
    const r = await fetch(`${proc.origin}/healthz`, { signal: AbortSignal.timeout(1000) });
    return r.status === 200;
  });
  return proc;
}

async function stop(proc, signal = "SIGTERM") {
  if (proc.exited) return;
  proc.child.kill(signal);
  const timer = setTimeout(() => proc.child.kill("SIGKILL"), 3000);
  await proc.exit;
  clearTimeout(timer);
}

function wranglerToml() {
  const text = readFileSync(join(GATEWAY, "wrangler.toml"), "utf8");
  const value = (key) => {
    const m = new RegExp(`^${key}\\s*=\\s*"([^"]+)"`, "m").exec(text);
    assert.ok(m, `wrangler.toml has no ${key}`);
    return m[1];
  };
  return { main: value("main"), compatibilityDate: value("compatibility_date") };
}

// A request to the gateway as Cloudflare would hand it over: the client spoke https.
const gw = (path, init) => mf.dispatchFetch(`https://gateway.test${path}`, { redirect: "manual", ...init });

const bearer = (token) => ({ authorization: `Bearer ${token}` });

// What the Worker adds, computed here with node:crypto: for a test's own direct call.
function signed(method, target, clientIp = "") {
  const t = Math.floor(Date.now() / 1000);
  const v1 = createHmac("sha256", GATEWAY_SECRET).update(`${t}\n${method}\n${target}\n${clientIp}`)
    .digest("hex");
  return { "x-mw-gateway-signature": `t=${t},v1=${v1}` };
}

async function assertEnvelope(res, httpStatus, code) {
  const text = await res.text();
  assert.equal(res.status, httpStatus, text);
  const body = JSON.parse(text);
  assert.deepEqual(Object.keys(body).sort(), ["error", "request_id"], text);
  assert.equal(body.error, code);
  assert.match(body.request_id, HEX32);
  assert.equal(res.headers.get("x-request-id"), body.request_id);
  return body;
}

process.on("exit", () => {
  for (const p of children) if (!p.exited) p.child.kill("SIGKILL");
});

before(async () => {
  const redisPort = await freePort();
  redis = start("redis", program("REDIS_SERVER_BIN", "redis-server"), [
    "--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
  ]);
  await waitFor(redis, () => tcpOpen(redisPort));
  [backendA, backendB] = await Promise.all([
    startBackend("backend A", redisPort),
    startBackend("backend B", redisPort),
  ]);

  const toml = wranglerToml();
  const worker = (bindings) => new Miniflare({
    modules: true,
    modulesRoot: GATEWAY,
    scriptPath: join(GATEWAY, toml.main),
    // wrangler bundles every .js as an ES module; Miniflare alone would assume CommonJS.
    modulesRules: [{ type: "ESModule", include: ["**/*.js"] }],
    compatibilityDate: toml.compatibilityDate,
    host: "127.0.0.1",
    port: 0,
    bindings: {
      BACKEND_ORIGINS_JSON: JSON.stringify([backendA.origin, backendB.origin]),
      LB_VERSION: "integration-test",
      LB_ALLOW_INSECURE_LOOPBACK: "1",
      LB_HEALTH_TTL_MS: "0",
      LB_REQUEST_TIMEOUT_MS: "5000",
      GATEWAY_SECRET,
      LB_HEALTH_TOKEN: HEALTH_TOKEN,
      ...bindings,
    },
    handleRuntimeStdio(stdout, stderr) {
      const keep = (chunk) => {
        workerLog += chunk;
      };
      stdout.on("data", keep);
      stderr.on("data", keep);
    },
  });
  // Most tests tell the two backends apart by x-lb-backend, so this one names them.
  mf = worker({ LB_EXPOSE_BACKEND: "1" });
  mfPublic = worker({});
  await Promise.all([mf.ready, mfPublic.ready]);
}, { timeout: 60_000 });

after(async () => {
  if (mf) await mf.dispose();
  if (mfPublic) await mfPublic.dispose();
  await Promise.all(children.map((p) => stop(p)));
}, { timeout: 20_000 });

test("requests through the gateway reach both backends and carry x-lb-backend", async () => {
  const seen = new Set();
  for (let i = 0; i < 20; i++) {
    const res = await gw("/api/status");
    const body = await res.json();
    assert.equal(res.status, 200);
    assert.deepEqual(Object.keys(body).sort(), ["missing", "mode", "ready", "settings_saved", "version"]);
    assert.equal(body.ready, true);
    assert.match(res.headers.get("x-request-id"), HEX32);
    seen.add(res.headers.get("x-lb-backend"));
  }
  assert.deepEqual([...seen].sort(), [backendA.origin, backendB.origin].sort());

  const health = await gw("/healthz");
  assert.equal(health.status, 200);
  assert.equal(await health.text(), "ok");
});

test("the admin page and every module it imports load through the gateway", async () => {
  const page = await gw("/");
  assert.equal(page.status, 200);
  const entry = /<script type="module" src="([^"]+)"><\/script>/.exec(await page.text());
  assert.ok(entry, "index.html loads no module");
  const pending = [entry[1]];
  const loaded = new Set();
  while (pending.length > 0) {
    const path = pending.pop();
    if (loaded.has(path)) continue;
    loaded.add(path);
    const res = await gw(path);
    const text = await res.text();
    assert.equal(res.status, 200, path);
    assert.equal(res.headers.get("content-type"), "text/javascript; charset=utf-8", path);
    for (const m of text.matchAll(/\bfrom "\.\/([^"]+)"/g)) pending.push(`/assets/${m[1]}`);
  }
  assert.ok(loaded.has("/assets/i18n.js") && loaded.has("/assets/zones.js"), [...loaded].join(" "));
  const css = await gw("/assets/styles.css");
  assert.equal(css.status, 200);
  await css.arrayBuffer();
  // Forwarded by the pattern, then refused by the backend, which serves only its own modules.
  const unknown = await gw("/assets/no-such-module.js");
  assert.ok(unknown.headers.get("x-lb-backend"));
  await assertEnvelope(unknown, 404, "not_found");
});

test("the real socket redirects plain http to https", async () => {
  const res = await fetch(new URL("/api/status?x=1", await mf.ready), { redirect: "manual" });
  assert.equal(res.status, 308);
  assert.match(res.headers.get("location"), /^https:\/\/127\.0\.0\.1:?\d*\/api\/status\?x=1$/);
  const dispatched = await mf.dispatchFetch("http://gateway.test/webhook/tg",
    { method: "POST", body: "{}", redirect: "manual" });
  assert.equal(dispatched.status, 308);
  assert.equal(dispatched.headers.get("location"), "https://gateway.test/webhook/tg");
});

test("/healthz-worker sees both backends", async () => {
  const res = await gw("/healthz-worker", { headers: bearer(HEALTH_TOKEN) });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), {
    status: "ok",
    version: "integration-test",
    available: 2,
    total: 2,
    backends: [
      { origin: backendA.origin, up: true, status: 200 },
      { origin: backendB.origin, up: true, status: 200 },
    ],
  });
});

test("/api/bootstrap and /debug/* are 404 at the gateway, and a backend serves them signed only", async () => {
  // Issue #23, finding 3: catches a backend that serves a caller who went around the gateway
  // (to /api/bootstrap, /debug/*, /metrics, or anything else): only /healthz stays open.
  for (const [method, path, headers, body] of [
    ["POST", "/api/bootstrap", bearer(ADMIN_KEY), ""],
    ["POST", "/api/bootstrap", bearer("wrong"), "{}"],
    ["GET", "/debug/ping", bearer(DEBUG_TOKEN), undefined],
  ]) {
    const res = await gw(path, { method, headers, body });
    await assertEnvelope(res, 404, "not_found");
    assert.equal(res.headers.get("x-lb-backend"), null);
  }
  const direct = backendA.origin;
  for (const [method, path, headers] of [["POST", "/api/bootstrap", bearer(ADMIN_KEY)],
    ["GET", "/debug/ping", bearer(DEBUG_TOKEN)], ["GET", "/metrics", bearer("worker")],
    ["GET", "/api/status", {}], ["GET", "/no/such/path", {}]]) {
    const res = await fetch(direct + path, { method, headers,
      body: method === "POST" ? "{}" : undefined });
    await assertEnvelope(res, 403, "gateway_signature_invalid");
  }
  const alive = await fetch(`${direct}/healthz`);
  assert.equal(alive.status, 200);
  assert.equal(await alive.text(), "ok");
  // Signed as the gateway signs, they exist (the operator's `messageweave bootstrap` does this).
  await assertEnvelope(await fetch(`${direct}/api/bootstrap`, { method: "POST",
    headers: { ...bearer("wrong"), ...signed("POST", "/api/bootstrap") }, body: "{}" }),
  401, "unauthorized");
  await assertEnvelope(await fetch(`${direct}/api/bootstrap`, { method: "POST",
    headers: { ...bearer(ADMIN_KEY), ...signed("POST", "/api/bootstrap") }, body: "" }),
  400, "invalid_request");
  const ping = await fetch(`${direct}/debug/ping`,
    { headers: { ...bearer(DEBUG_TOKEN), ...signed("GET", "/debug/ping") } });
  assert.equal(ping.status, 200);
  assert.deepEqual(await ping.json(), { ok: true });
});

test("unknown paths are 404 and wrong methods 405 with Allow, from the gateway", async () => {
  await assertEnvelope(await gw("/no/such/path"), 404, "not_found");
  for (const [method, path, allow] of [
    ["DELETE", "/api/business-config", "GET, PUT"],
    ["GET", "/api/admin/session", "POST"],
    ["HEAD", "/healthz", "GET"],
    ["POST", "/healthz-worker", "GET"],
  ]) {
    const res = await gw(path, { method });
    assert.equal(res.status, 405, `${method} ${path}`);
    assert.equal(res.headers.get("allow"), allow);
    assert.equal(res.headers.get("x-lb-backend"), null);
    if (method !== "HEAD") await assertEnvelope(res, 405, "method_not_allowed");
  }
});

let session;

test("request bodies and Authorization reach the backend unchanged", async () => {
  const wrong = await gw("/api/enabled", {
    method: "PUT", headers: { ...bearer("not-a-session"), "content-type": "application/json" },
    body: '{"enabled": true}',
  });
  assert.ok(wrong.headers.get("x-lb-backend"), "the 401 comes from a backend");
  await assertEnvelope(wrong, 401, "unauthorized");

  const login = await gw("/api/admin/session", { method: "POST", headers: bearer(ADMIN_KEY) });
  assert.equal(login.status, 200);
  const created = await login.json();
  assert.match(created.session, /^[0-9a-f]{64}$/);
  assert.ok(created.expires_in > 0);
  session = created.session;

  const set = await gw("/api/enabled", {
    method: "PUT", headers: bearer(session), body: '{"enabled": true}',
  });
  assert.equal(set.status, 200);
  assert.deepEqual(await set.json(), { enabled: true });

  const invalid = await gw("/api/enabled", {
    method: "PUT", headers: bearer(session), body: '{"enabled": "yes"}',
  });
  assert.equal(invalid.headers.get("x-config-error"), "enabled must be a boolean");
  await assertEnvelope(invalid, 422, "invalid_configuration");
  await assertEnvelope(await gw("/api/enabled", {
    method: "PUT", headers: bearer(session), body: "{not json",
  }), 400, "invalid_request");

  // One Redis behind both backends: the session and the switch hold whichever answers.
  const seen = new Set();
  for (let i = 0; i < 12; i++) {
    const res = await gw("/api/enabled", { headers: bearer(session) });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { enabled: true });
    seen.add(res.headers.get("x-lb-backend"));
  }
  assert.equal(seen.size, 2);
});

test("the gap audit's GET and POST /api/audit pass the gateway to a backend", async () => {
  const anonymous = await gw("/api/audit", { method: "POST" });
  assert.ok(anonymous.headers.get("x-lb-backend"), "the 401 comes from a backend");
  await assertEnvelope(anonymous, 401, "unauthorized");
  await assertEnvelope(await gw("/api/audit", {
    method: "POST", headers: bearer(session), body: "{}",
  }), 400, "invalid_request");
  const last = await gw("/api/audit", { headers: bearer(session) });
  assert.equal(last.status, 200);
  assert.deepEqual(await last.json(), { last: null });
  await assertEnvelope(await gw("/api/audit", { method: "PUT", headers: bearer(session) }),
    405, "method_not_allowed");
});

test("the callbacks card's GET /api/push/status passes the gateway to a backend", async () => {
  const anonymous = await gw("/api/push/status");
  assert.ok(anonymous.headers.get("x-lb-backend"), "the 401 comes from a backend");
  await assertEnvelope(anonymous, 401, "unauthorized");
  const status = await gw("/api/push/status", { headers: bearer(session) });
  assert.equal(status.status, 200);
  assert.equal((await status.json()).state, "off");
  await assertEnvelope(await gw("/api/push/status", { method: "POST", headers: bearer(session) }),
    405, "method_not_allowed");
});

test("the trace card's GET /api/trace passes the gateway with its query string", async () => {
  const anonymous = await gw("/api/trace?q=x");
  assert.ok(anonymous.headers.get("x-lb-backend"), "the 401 comes from a backend");
  await assertEnvelope(anonymous, 401, "unauthorized");
  // An empty q reaches the backend's own check: the query string is passed on unchanged.
  await assertEnvelope(await gw("/api/trace?q=", { headers: bearer(session) }), 400,
    "invalid_request");
  await assertEnvelope(await gw("/api/trace", { method: "POST", headers: bearer(session) }),
    405, "method_not_allowed");
});

test("as deployed: no answer names its backend, every one carries HSTS, no origin list", async () => {
  // Issue #23, findings 3 and 8: catches x-lb-backend or a public /healthz-worker handing out
  // the origins to call around the gateway, and an answer without Strict-Transport-Security.
  const pub = (path, init) => mfPublic.dispatchFetch(`https://gateway.test${path}`,
    { redirect: "manual", ...init });
  const origins = [backendA.origin, backendB.origin];
  for (const [path, httpStatus] of [["/api/status", 200], ["/api/enabled", 401], ["/nope", 404],
    ["/healthz-worker", 200]]) {
    const res = await pub(path);
    const text = await res.text();
    assert.equal(res.status, httpStatus, `${path}: ${text}`);
    assert.equal(res.headers.get("strict-transport-security"), HSTS, path);
    assert.equal(res.headers.get("x-lb-backend"), null, path);
    for (const origin of origins) {
      assert.ok(!text.includes(origin.replace("http://", "")), `${path}: ${text}`);
      for (const [, value] of res.headers) assert.ok(!value.includes(origin), value);
    }
  }
  assert.deepEqual(await (await pub("/healthz-worker")).json(),
    { status: "ok", version: "integration-test", available: 2, total: 2 });
  const listed = await (await pub("/healthz-worker", { headers: bearer(HEALTH_TOKEN) })).json();
  assert.deepEqual(listed.backends.map((b) => b.origin), origins);
});

test("the backends throttle each client the gateway saw, not the gateway, nor a spoofed header", async () => {
  // Catches a gateway that sets no client address (one guesser behind it would lock out every
  // client: they all share the gateway's address) and one that passes a client's own
  // x-mw-client-ip on (a guesser sending a new one with each try would never be locked).
  // Miniflare, like Cloudflare's edge, hands the Worker cf-connecting-ip; a request that
  // carries none gets the socket's peer (127.0.0.1 here), which the other tests use.
  const guesser = "203.0.113.7";
  const wrong = (client, spoofed) => gw("/api/enabled", {
    headers: { ...bearer("not-a-credential"), "cf-connecting-ip": client,
      "x-mw-client-ip": spoofed },
  });
  for (let i = 0; i < 10; i++) {
    const res = await wrong(guesser, `192.0.2.${i + 1}`);
    assert.ok(res.headers.get("x-lb-backend"), "the 401 comes from a backend");
    await assertEnvelope(res, 401, "unauthorized");
  }
  const locked = await wrong(guesser, "192.0.2.99");
  await assertEnvelope(locked, 429, "rate_limited");
  assert.ok(Number(locked.headers.get("retry-after")) > 0);

  await assertEnvelope(await wrong("198.51.100.9", guesser), 401, "unauthorized");
  const mine = await gw("/api/enabled", { headers: bearer(session) }); // from 127.0.0.1
  assert.equal(mine.status, 200);

  const audit = await gw("/api/logs/audit", { headers: bearer(session) });
  assert.equal(audit.status, 200);
  const throttled = (await audit.json()).records.filter((r) => r.action === "auth_throttled");
  assert.deepEqual(throttled.map((r) => r.client), [guesser]);
});

test("a client-sent X-Forwarded-For does not choose the backend's throttle bucket", async () => {
  // Catches the backend's HTTP server believing X-Forwarded-For from a local proxy (this
  // gateway, a cloudflared tunnel): the gateway passes client headers on, so a guesser would
  // pick a new address for every try and never be locked.
  const guesser = "203.0.113.8";
  for (let i = 0; i < 10; i++) {
    await assertEnvelope(await gw("/api/enabled", {
      headers: { ...bearer("not-a-credential"), "cf-connecting-ip": guesser,
        "x-forwarded-for": `192.0.2.${i + 101}` },
    }), 401, "unauthorized");
  }
  await assertEnvelope(await gw("/api/enabled", {
    headers: { ...bearer("not-a-credential"), "cf-connecting-ip": guesser },
  }), 429, "rate_limited");
});

test("after SIGKILL of one backend, requests fail over to the other", async () => {
  await stop(backendA, "SIGKILL");
  const logBefore = workerLog.length;
  for (let i = 0; i < 20; i++) {
    const res = await gw("/api/status");
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-lb-backend"), backendB.origin);
    assert.equal((await res.json()).ready, true);
  }
  // A buffered request body is sent again to the next backend.
  for (let i = 0; i < 6; i++) {
    const res = await gw("/api/enabled", {
      method: "PUT", headers: bearer(session), body: '{"enabled": false}',
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-lb-backend"), backendB.origin);
    assert.deepEqual(await res.json(), { enabled: false });
  }
  // With a random start, some of those 26 requests tried the dead backend first.
  const failed = workerLog.slice(logBefore).split("\n")
    .filter((l) => l.includes(`via ${backendA.origin} failed`));
  assert.ok(failed.some((l) => l.includes("GET /api/status")), workerLog.slice(logBefore));
  assert.ok(failed.some((l) => l.includes("PUT /api/enabled")), workerLog.slice(logBefore));
});

test("/healthz-worker reports one of two backends after the kill", async () => {
  const res = await gw("/healthz-worker", { headers: bearer(HEALTH_TOKEN) });
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.equal(body.status, "ok");
  assert.equal(body.available, 1);
  assert.equal(body.total, 2);
  assert.deepEqual(body.backends, [
    { origin: backendA.origin, up: false, status: null },
    { origin: backendB.origin, up: true, status: 200 },
  ]);
});

test("with every backend gone: 503 envelope, and /healthz-worker is down", async () => {
  await stop(backendB, "SIGKILL");
  const res = await gw("/api/status");
  assert.equal(res.headers.get("retry-after"), "30");
  assert.equal(res.headers.get("x-lb-backend"), null);
  await assertEnvelope(res, 503, "service_unavailable");

  const health = await gw("/healthz-worker");
  assert.equal(health.status, 503);
  const body = await health.json();
  assert.equal(body.status, "down");
  assert.equal(body.available, 0);
  assert.equal(body.total, 2);
});
