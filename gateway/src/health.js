// GET /healthz-worker: the gateway's view of the pool, from each backend's GET /healthz.
// Anyone gets the aggregate (status, version, available, total); the list of origins only a
// caller presenting LB_HEALTH_TOKEN (index.js): an origin is where to go around the gateway.

import { attempt } from "./forward.js";

export const PROBE_TIMEOUT_CAP_MS = 5000;

export async function probe(fetchFn, origin, timeoutMs) {
  const outcome = await attempt(fetchFn, `${origin}/healthz`, { method: "GET", redirect: "manual" }, timeoutMs);
  if (outcome.error) return { origin, up: false, status: null };
  await outcome.response.body?.cancel().catch(() => {});
  return { origin, up: outcome.status === 200, status: outcome.status };
}

// -> [httpStatus, body]. `pool` is parsePool()'s result; `detailed` adds `backends`.
export function aggregate(pool, backends, version, detailed = true) {
  const available = backends.filter((b) => b.up).length;
  const total = backends.length;
  let status;
  let http;
  if (!pool.ok) {
    [status, http] = ["down", 503];
  } else if (total === 0) {
    [status, http] = ["no-backends", 200];
  } else if (available > 0) {
    [status, http] = ["ok", 200];
  } else {
    [status, http] = ["down", 503];
  }
  const body = { status, version, available, total };
  return [http, detailed ? { ...body, backends } : body];
}

// Probe results are kept for `ttlMs` per pool (per isolate); 0 disables the cache. Only plain
// data is cached, never a promise, so no request waits on another request's I/O.
export function createHealthCache() {
  let entry = null;
  return {
    async backends(origins, { fetchFn, timeoutMs, ttlMs, now }) {
      const key = origins.join(" ");
      const t = now();
      if (ttlMs > 0 && entry && entry.key === key && t - entry.at < ttlMs) return entry.backends;
      const backends = await Promise.all(origins.map((o) => probe(fetchFn, o, timeoutMs)));
      entry = { key, at: now(), backends };
      return backends;
    },
  };
}

export async function healthResponse(pool, version, cache, opts, detailed = true) {
  const origins = pool.ok ? pool.origins : [];
  const backends = origins.length ? await cache.backends(origins, opts) : [];
  const [status, body] = aggregate(pool, backends, version, detailed);
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", "cache-control": "no-store" },
  });
}
