// The gateway's own answers. Errors use the backend's envelope and nothing else in the body:
// {"error": "<code>", "request_id": "<32 lowercase hex>"}, the id also sent as x-request-id.

export const RETRY_AFTER = "30";

export function newRequestId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function envelope(status, code, extraHeaders = {}) {
  const requestId = newRequestId();
  const headers = new Headers({
    "content-type": "application/json",
    "x-request-id": requestId,
    ...extraHeaders,
  });
  return new Response(JSON.stringify({ error: code, request_id: requestId }), { status, headers });
}

export const notFound = () => envelope(404, "not_found");
export const methodNotAllowed = (allow) => envelope(405, "method_not_allowed", { allow });
export const serviceUnavailable = () =>
  envelope(503, "service_unavailable", { "retry-after": RETRY_AFTER });

// On every answer to an https request (index.js): the admin key is typed into the page this
// gateway serves, so a browser must never try plain http for it again (issue #23). Not on the
// plain-http redirect: RFC 6797 §7.2 forbids it there, and a browser ignores it.
export const HSTS = "max-age=31536000; includeSubDomains";

export function withHsts(response) {
  response.headers.set("strict-transport-security", HSTS);
  return response;
}

// Plain http -> the same URL on https, method and body preserved by the client (308).
export function httpsRedirect(url) {
  const target = new URL(url);
  target.protocol = "https:";
  target.port = "";
  return new Response(null, { status: 308, headers: { location: target.toString() } });
}
