// The signature every forwarded request carries when GATEWAY_SECRET is bound (issue #23;
// reference §3.3). A backend with the same GATEWAY_SECRET serves only signed requests
// (messageweave.api.gateway) and believes x-mw-client-ip only on them:
//
//   x-mw-gateway-signature: t=<Unix seconds>,v1=<64 lowercase hex>
//   v1 = HMAC-SHA256(GATEWAY_SECRET, "<t>\n<METHOD>\n<path?query>\n<x-mw-client-ip or empty>")
//
// The path and query are exactly what is sent (URL.pathname + URL.search), so what the backend
// receives is what was signed. The backend accepts t within 60 s of its own clock.

export const SIGNATURE_HEADER = "x-mw-gateway-signature";
export const MIN_SECRET_CHARS = 32;
// Printable ASCII without spaces, 32..1024: the same rule as the backend's GATEWAY_SECRET.
const SECRET_SHAPE = /^[\x21-\x7e]{32,1024}$/;

// null when `secret` may sign, else why not (never quoting the value).
export function secretProblem(secret) {
  if (typeof secret === "string" && SECRET_SHAPE.test(secret)) return null;
  return `GATEWAY_SECRET must be ${MIN_SECRET_CHARS} to 1024 printable ASCII characters without ` +
    "spaces; forwarding nothing until it is fixed";
}

const encoder = new TextEncoder();
let cached = { secret: null, key: null }; // one isolate, one secret: import the key once

async function keyFor(secret) {
  if (cached.secret !== secret) {
    const key = await crypto.subtle.importKey("raw", encoder.encode(secret),
      { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    cached = { secret, key };
  }
  return cached.key;
}

const hex = (buffer) => Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0"))
  .join("");

// -> the header value for one request. `t` in Unix seconds.
export async function sign(secret, { t, method, target, clientIp = "" }) {
  const text = `${t}\n${method}\n${target}\n${clientIp}`;
  const mac = await crypto.subtle.sign("HMAC", await keyFor(secret), encoder.encode(text));
  return `t=${t},v1=${hex(mac)}`;
}

// Whether `presented` equals `expected`, in time independent of where they differ: both are
// hashed first, so the comparison always runs over 32 bytes.
export async function constantTimeEqual(presented, expected) {
  const [a, b] = await Promise.all([presented, expected].map((s) =>
    crypto.subtle.digest("SHA-256", encoder.encode(s))));
  const x = new Uint8Array(a);
  const y = new Uint8Array(b);
  let diff = 0;
  for (let i = 0; i < x.length; i++) diff |= x[i] ^ y[i];
  return diff === 0;
}
