// Forwarding to the backend pool: rotation order, failover decision, header hygiene, the
// client-address header the backend's throttle can be told to trust, and the signature that
// tells a backend the request came through this gateway (signature.js).

import { serviceUnavailable } from "./errors.js";
import { SIGNATURE_HEADER } from "./signature.js";

// RFC 9110 §7.6.1 hop-by-hop fields, plus the legacy ones proxies still see. Host and
// Content-Length are recomputed by the runtime from the target URL and the buffered body.
const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];
const REQUEST_ONLY_DROP = ["host", "content-length"];

// Names the origin that answered, only when LB_EXPOSE_BACKEND = "1" (tests, local development):
// on a public answer it tells anyone where to go around the gateway (issue #23).
export const BACKEND_HEADER = "x-lb-backend";
// The client's address as the gateway saw it, for the backend's throttle (reference §3.4).
// Always the gateway's own: whatever a client sent under this name is dropped first.
export const CLIENT_IP_HEADER = "x-mw-client-ip";
// Where the runtime puts the connecting address: Cloudflare's edge sets it on every request
// (a client cannot choose it), and so does workerd under Miniflare, from the socket's peer.
export const CONNECTING_IP_HEADER = "cf-connecting-ip";

// Every origin once, starting at a random index and rotating: [s, s+1, ..., s-1].
export function rotation(origins, random = Math.random) {
  const n = origins.length;
  if (n === 0) return [];
  const start = Math.min(n - 1, Math.floor(random() * n));
  return origins.map((_, i) => origins[(start + i) % n]);
}

// Whether an attempt's outcome moves on to the next backend: a network error or timeout
// (no response), or any 5xx. 4xx and everything else is the answer.
export function shouldFailover(outcome) {
  if (outcome.error) return true;
  return outcome.status >= 500 && outcome.status <= 599;
}

function stripHopByHop(headers, extra = []) {
  const out = new Headers(headers);
  const named = (headers.get("connection") ?? "")
    .split(",")
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
  for (const name of [...HOP_BY_HOP, ...extra, ...named]) out.delete(name);
  return out;
}

// The headers sent to a backend: the client's, minus hop-by-hop ones and Host/Content-Length,
// with CLIENT_IP_HEADER replaced by the connecting address (absent when the runtime gave none)
// and any client-sent SIGNATURE_HEADER dropped (forward() adds the gateway's own).
export function requestHeaders(headers) {
  const out = stripHopByHop(headers, [...REQUEST_ONLY_DROP, CLIENT_IP_HEADER, SIGNATURE_HEADER]);
  const client = (headers.get(CONNECTING_IP_HEADER) ?? "").trim();
  if (client) out.set(CLIENT_IP_HEADER, client);
  return out;
}

// The backend's answer as the client gets it: hop-by-hop headers stripped, and BACKEND_HEADER
// only when `expose` (never on a public answer).
export function backendResponse(response, origin, expose = false) {
  const headers = stripHopByHop(response.headers);
  headers.delete(BACKEND_HEADER);
  if (expose) headers.set(BACKEND_HEADER, origin);
  return new Response(response.body, {
    status: response.status,
    statusText: response.statusText,
    headers,
  });
}

class Timeout extends Error {
  constructor(ms) {
    super(`no response within ${ms} ms`);
    this.name = "Timeout";
  }
}

// One attempt: resolves {response} or {error}. The timeout covers the wait for the response
// head; a body that is already streaming is not cut off.
export async function attempt(fetchFn, url, init, timeoutMs) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Timeout(timeoutMs)), timeoutMs);
  try {
    const response = await fetchFn(url, { ...init, signal: controller.signal });
    return { response, status: response.status };
  } catch (error) {
    return { error: controller.signal.aborted ? new Timeout(timeoutMs) : error };
  } finally {
    clearTimeout(timer);
  }
}

// Send the request to the backends in `order`, at most `maxAttempts` of them, moving on only
// when shouldFailover() says so. `body` is the buffered request body (ArrayBuffer or null) so
// that every attempt sends the same bytes. `sign(method, target, clientIp)` -> the signature
// header's value (once: every attempt carries the same), or absent to forward unsigned.
export async function forward({ request, body, order, maxAttempts, timeoutMs, fetchFn, log,
  sign, exposeBackend = false }) {
  const url = new URL(request.url);
  const target = url.pathname + url.search;
  const headers = requestHeaders(request.headers);
  if (sign) {
    headers.set(SIGNATURE_HEADER,
      await sign(request.method, target, headers.get(CLIENT_IP_HEADER) ?? ""));
  }
  const answer = (response, origin) => backendResponse(response, origin, exposeBackend);
  const tries = order.slice(0, Math.max(1, maxAttempts));
  for (let i = 0; i < tries.length; i++) {
    const origin = tries[i];
    const init = {
      method: request.method,
      headers,
      body: body === null ? null : body.slice(0),
      redirect: "manual",
    };
    const outcome = await attempt(fetchFn, origin + target, init, timeoutMs);
    const last = i === tries.length - 1;
    if (!shouldFailover(outcome)) return answer(outcome.response, origin);
    const why = outcome.error ? `${outcome.error.name}: ${outcome.error.message}` : outcome.status;
    log?.(`${request.method} ${url.pathname} via ${origin} failed (${why})`);
    if (last && outcome.response) return answer(outcome.response, origin);
    if (outcome.response) await outcome.response.body?.cancel().catch(() => {});
  }
  return serviceUnavailable();
}
