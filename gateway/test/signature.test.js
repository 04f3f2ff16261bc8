// The gateway's signature (src/signature.js): the known-answer vector shared with the backend's
// tests (tests/integration/security/test_gateway_signature.py), and the secret's rules.
import assert from "node:assert/strict";
import { test } from "node:test";
import { secretProblem, sign, SIGNATURE_HEADER } from "../src/signature.js";

const SECRET = "messageweave-gateway-test-secret-0123456789";

test("the known-answer vector both sides agree on", async () => {
  // Catches the Worker and the backend disagreeing on the signed text (order, separators,
  // encoding): every forwarded request would be refused.
  assert.equal(SIGNATURE_HEADER, "x-mw-gateway-signature");
  const header = await sign(SECRET, { t: 1700000000, method: "POST",
    target: "/api/trace?q=a%20b", clientIp: "203.0.113.7" });
  assert.equal(header,
    "t=1700000000,v1=f5c4ad886fb153bf9b8682b2461a500fe6dec1327b109b4a6f23ab9f7d8fd067");
});

test("a secret is 32 to 1024 printable ASCII characters without spaces", () => {
  assert.equal(secretProblem(SECRET), null);
  assert.equal(secretProblem("!".repeat(32)), null);
  assert.equal(secretProblem("~".repeat(1024)), null);
  for (const bad of ["", "x".repeat(31), ` ${"x".repeat(32)}`, `${"x".repeat(32)}\n`,
    "é".repeat(32), "x".repeat(1025), `${"x".repeat(16)} ${"x".repeat(16)}`]) {
    assert.match(secretProblem(bad), /GATEWAY_SECRET/, JSON.stringify(bad));
  }
});
