#!/usr/bin/env bash
# Gateway tests from a clean clone: install the pinned devDependencies when node_modules is
# missing or package-lock.json changed, then the unit suite, the workerd integration suite and
# a `wrangler deploy --dry-run` build check. Exits non-zero if any of them fails.
set -uo pipefail
cd "$(dirname "$0")"

command -v node >/dev/null && command -v npm >/dev/null || { echo "gateway: node and npm are required" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "gateway: node >= 20 required, found $(node --version)" >&2; exit 1; }

stamp=node_modules/.messageweave-lock
if [ ! -d node_modules ] || ! cmp -s package-lock.json "$stamp"; then
  npm ci --no-audit --no-fund || exit 1
  cp package-lock.json "$stamp"
fi

status=0
npm test || status=1
npm run test:integration || status=1

out=$(mktemp -d)
if WRANGLER_SEND_METRICS=false npx --no-install wrangler deploy --dry-run --outdir "$out" >"$out/log" 2>&1; then
  echo "wrangler deploy --dry-run: ok"
else
  cat "$out/log"; echo "wrangler deploy --dry-run: FAILED" >&2; status=1
fi
rm -rf "$out"
exit $status
