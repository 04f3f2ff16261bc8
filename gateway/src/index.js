// MessageWeave edge gateway: a Cloudflare Worker that load-balances identical backends.

import { httpsRedirect, methodNotAllowed, notFound, serviceUnavailable, withHsts } from "./errors.js";
import { forward, rotation } from "./forward.js";
import { createHealthCache, healthResponse, PROBE_TIMEOUT_CAP_MS } from "./health.js";
import { parsePool } from "./pool.js";
import { matchRoute } from "./routes.js";
import { backendExposed, insecureLoopbackAllowed, intVar } from "./settings.js";
import { constantTimeEqual, secretProblem, sign } from "./signature.js";

const sharedHealthCache = createHealthCache();

// Whether the request presents LB_HEALTH_TOKEN (exact "Bearer <token>"); a token shorter than
// 32 characters is never accepted, so a weak one cannot be guessed into the origin list.
async function healthAuthorized(request, env) {
  const token = env.LB_HEALTH_TOKEN;
  if (typeof token !== "string" || secretProblem(token) !== null) return false;
  const presented = request.headers.get("authorization") ?? "";
  return constantTimeEqual(presented, `Bearer ${token}`);
}

// deps: {fetch, random, now, healthCache, log} — injectable for tests.
export async function handle(request, env = {}, deps = {}) {
  const url = new URL(request.url);
  if (url.protocol === "http:") return httpsRedirect(url);
  return withHsts(await route(request, url, env, deps));
}

async function route(request, url, env, deps) {
  const fetchFn = deps.fetch ?? ((input, init) => fetch(input, init));
  const now = deps.now ?? Date.now;
  const match = matchRoute(request.method, url.pathname);
  if (match.status === 404) return notFound();
  if (match.status === 405) return methodNotAllowed(match.allow);
  const { route: found } = match;

  const pool = parsePool(env.BACKEND_ORIGINS_JSON, {
    allowInsecureLoopback: insecureLoopbackAllowed(env),
  });
  if (!pool.ok) deps.log?.(pool.reason);
  const requestTimeout = intVar(env, "LB_REQUEST_TIMEOUT_MS", 1);

  if (found.local) {
    return healthResponse(pool, env.LB_VERSION || "unknown", deps.healthCache ?? sharedHealthCache, {
      fetchFn,
      timeoutMs: Math.min(requestTimeout, PROBE_TIMEOUT_CAP_MS),
      ttlMs: intVar(env, "LB_HEALTH_TTL_MS", 0),
      now,
    }, await healthAuthorized(request, env));
  }

  // Unset: forward unsigned (a backend without GATEWAY_SECRET). Set but weak or malformed:
  // forward nothing, rather than unsigned requests every backend refuses, or a guessable key.
  const secret = env.GATEWAY_SECRET;
  const signed = secret !== undefined && secret !== null && String(secret).trim() !== "";
  if (signed && secretProblem(secret) !== null) {
    deps.log?.(secretProblem(secret));
    return serviceUnavailable();
  }
  if (!pool.ok || pool.origins.length === 0) return serviceUnavailable();

  const longRunning = found.timeoutVar !== null;
  const bodyless = request.method === "GET" || request.method === "HEAD";
  const body = bodyless ? null : await request.arrayBuffer();
  return forward({
    request,
    body,
    order: rotation(pool.origins, deps.random ?? Math.random),
    maxAttempts: longRunning ? 1 : intVar(env, "LB_MAX_ATTEMPTS", 1),
    timeoutMs: longRunning ? intVar(env, found.timeoutVar, 1) : requestTimeout,
    fetchFn,
    log: deps.log,
    sign: signed
      ? (method, target, clientIp) =>
        sign(secret, { t: Math.floor(now() / 1000), method, target, clientIp })
      : undefined,
    exposeBackend: backendExposed(env),
  });
}

export default {
  fetch(request, env) {
    return handle(request, env, { log: (msg) => console.warn(`messageweave-lb: ${msg}`) });
  },
};
