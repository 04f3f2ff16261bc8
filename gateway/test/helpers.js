// Shared helpers for the unit tests: a recording fetch double and envelope checks.
import assert from "node:assert/strict";

// behaviour(origin, call) -> Response | Error (thrown) | "hang" (waits for the abort signal)
export function fakeFetch(behaviour) {
  const calls = [];
  const fn = async (url, init = {}) => {
    const u = new URL(url);
    const call = {
      url,
      origin: u.origin,
      path: u.pathname + u.search,
      method: init.method,
      headers: new Headers(init.headers),
      body: init.body == null ? null : new Uint8Array(init.body),
      redirect: init.redirect,
    };
    calls.push(call);
    const out = await behaviour(u.origin, call);
    if (out === "hang") {
      return new Promise((_, reject) => {
        init.signal.addEventListener("abort", () => reject(init.signal.reason));
      });
    }
    if (out instanceof Error) throw out;
    return out;
  };
  fn.calls = calls;
  return fn;
}

export const ok = (body = "ok", init = {}) => new Response(body, { status: 200, ...init });
export const status = (code) => new Response(`status ${code}`, { status: code });
export const refused = () => new TypeError("fetch failed: connection refused");

export const HEX32 = /^[0-9a-f]{32}$/;

export async function assertEnvelope(response, code, httpStatus) {
  assert.equal(response.status, httpStatus);
  assert.equal(response.headers.get("content-type"), "application/json");
  const body = await response.json();
  assert.deepEqual(Object.keys(body).sort(), ["error", "request_id"]);
  assert.equal(body.error, code);
  assert.match(body.request_id, HEX32);
  assert.equal(response.headers.get("x-request-id"), body.request_id);
  return body;
}
