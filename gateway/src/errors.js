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

// Plain http -> the same URL on https, method and body preserved by the client (308).
export function httpsRedirect(url) {
  const target = new URL(url);
  target.protocol = "https:";
  target.port = "";
  return new Response(null, { status: 308, headers: { location: target.toString() } });
}
