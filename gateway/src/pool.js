// BACKEND_ORIGINS_JSON: a JSON array of backend origins, e.g. ["https://a.example","https://b.example"].

// scheme://authority with an optional single trailing "/"; no credentials, path, query or
// fragment, no whitespace.
const ORIGIN_SHAPE = /^(https?):\/\/([^/?#@\s\\]+)\/?$/i;
const LOOPBACK_HOSTS = /^(127(\.\d{1,3}){3}|localhost|\[::1\])$/;

// -> {ok: true, origins: [...]} (possibly empty) | {ok: false, reason}
// Any bad entry rejects the whole pool: a half-understood pool is a configuration error.
export function parsePool(raw, { allowInsecureLoopback = false } = {}) {
  if (raw === undefined || raw === null || String(raw).trim() === "") {
    return { ok: true, origins: [] };
  }
  let list;
  try {
    list = JSON.parse(String(raw));
  } catch {
    return { ok: false, reason: "BACKEND_ORIGINS_JSON is not JSON" };
  }
  if (!Array.isArray(list)) return { ok: false, reason: "BACKEND_ORIGINS_JSON is not an array" };
  const origins = [];
  for (const entry of list) {
    const origin = parseOrigin(entry, allowInsecureLoopback);
    if (origin === null) return { ok: false, reason: `invalid backend origin ${JSON.stringify(entry)}` };
    if (!origins.includes(origin)) origins.push(origin);
  }
  return { ok: true, origins };
}

export function parseOrigin(entry, allowInsecureLoopback = false) {
  if (typeof entry !== "string") return null;
  const shape = ORIGIN_SHAPE.exec(entry);
  if (!shape) return null;
  let url;
  try {
    url = new URL(entry);
  } catch {
    return null;
  }
  if (url.username || url.password || url.pathname !== "/" || url.search || url.hash) return null;
  if (!url.hostname) return null;
  if (url.protocol === "https:") return url.origin;
  if (url.protocol === "http:" && allowInsecureLoopback && LOOPBACK_HOSTS.test(url.hostname)) {
    return url.origin;
  }
  return null;
}
