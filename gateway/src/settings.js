// The Worker's variables ([vars] in wrangler.toml, or secrets), read per request.

export const DEFAULTS = Object.freeze({
  LB_MAX_ATTEMPTS: 2,
  LB_REQUEST_TIMEOUT_MS: 10000,
  LB_RECONCILE_TIMEOUT_MS: 320000,
  LB_WORKER_TIMEOUT_MS: 300000,
  LB_HEALTH_TTL_MS: 30000,
});

// A whole decimal number >= min, else the default (an invalid value never breaks the gateway).
export function intVar(env, name, min = 0) {
  const raw = env?.[name];
  if (raw !== undefined && raw !== null && /^\s*\d+\s*$/.test(String(raw))) {
    const n = Number.parseInt(String(raw), 10);
    if (Number.isSafeInteger(n) && n >= min) return n;
  }
  return DEFAULTS[name];
}

export function insecureLoopbackAllowed(env) {
  return env?.LB_ALLOW_INSECURE_LOOPBACK === "1";
}

// Tests and local development only: name the answering origin in x-lb-backend.
export function backendExposed(env) {
  return env?.LB_EXPOSE_BACKEND === "1";
}
