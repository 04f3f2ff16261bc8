// MessageWeave edge gateway: a Cloudflare Worker that load-balances identical backends.

import { httpsRedirect, methodNotAllowed, notFound, serviceUnavailable } from "./errors.js";
import { forward, rotation } from "./forward.js";
import { createHealthCache, healthResponse, PROBE_TIMEOUT_CAP_MS } from "./health.js";
import { parsePool } from "./pool.js";
import { matchRoute } from "./routes.js";
import { insecureLoopbackAllowed, intVar } from "./settings.js";

const sharedHealthCache = createHealthCache();

// deps: {fetch, random, now, healthCache, log} — injectable for tests.
export async function handle(request, env = {}, deps = {}) {
  const fetchFn = deps.fetch ?? ((input, init) => fetch(input, init));
  const url = new URL(request.url);
  if (url.protocol === "http:") return httpsRedirect(url);

  const match = matchRoute(request.method, url.pathname);
  if (match.status === 404) return notFound();
  if (match.status === 405) return methodNotAllowed(match.allow);
  const { route } = match;

  const pool = parsePool(env.BACKEND_ORIGINS_JSON, {
    allowInsecureLoopback: insecureLoopbackAllowed(env),
  });
  if (!pool.ok) deps.log?.(pool.reason);
  const requestTimeout = intVar(env, "LB_REQUEST_TIMEOUT_MS", 1);

  if (route.local) {
    return healthResponse(pool, env.LB_VERSION || "unknown", deps.healthCache ?? sharedHealthCache, {
      fetchFn,
      timeoutMs: Math.min(requestTimeout, PROBE_TIMEOUT_CAP_MS),
      ttlMs: intVar(env, "LB_HEALTH_TTL_MS", 0),
      now: deps.now ?? Date.now,
    });
  }

  if (!pool.ok || pool.origins.length === 0) return serviceUnavailable();

  const longRunning = route.timeoutVar !== null;
  const bodyless = request.method === "GET" || request.method === "HEAD";
  const body = bodyless ? null : await request.arrayBuffer();
  return forward({
    request,
    body,
    order: rotation(pool.origins, deps.random ?? Math.random),
    maxAttempts: longRunning ? 1 : intVar(env, "LB_MAX_ATTEMPTS", 1),
    timeoutMs: longRunning ? intVar(env, route.timeoutVar, 1) : requestTimeout,
    fetchFn,
    log: deps.log,
  });
}

export default {
  fetch(request, env) {
    return handle(request, env, { log: (msg) => console.warn(`messageweave-lb: ${msg}`) });
  },
};
