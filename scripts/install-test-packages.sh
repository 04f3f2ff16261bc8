#!/usr/bin/env bash
# install-test-packages.sh -- install the Debian packages the test suite needs:
# - Cyrus IMAP 3.6 (imapd, lmtpd, squatter, cyrmaster; cyrus-caldav ships the httpd that serves
#   JMAP), the SASL tools used to create test users (saslpasswd2) and the PLAIN/LOGIN mechanisms;
# - redis-server (Debian's Redis 7.0, tested beside the embedded 6.2);
# - chromium (the admin page's browser tests drive it with Playwright) and a CJK font for the
#   Chinese screenshots;
# - nodejs and npm when `node` is not on PATH (the Telegram emulator and the gateway need >= 20).
#
# Idempotent: does nothing when everything is installed. Runs `apt-get update` only when the
# first `apt-get install` fails (stale or missing package lists). Never starts the system-wide
# Cyrus or the MTA the packages pull in (a temporary policy-rc.d forbids service starts), and
# disables the packaged cyrus-imapd unit. The tests start their own instance on 127.0.0.1.
#
# Usage (as root, or through sudo):  scripts/install-test-packages.sh
set -euo pipefail

PACKAGES="cyrus-common cyrus-imapd cyrus-caldav sasl2-bin libsasl2-modules redis-server chromium fonts-wqy-zenhei"
command -v node >/dev/null 2>&1 || PACKAGES="$PACKAGES nodejs npm"

say() { printf '[install-test-packages] %s\n' "$*" >&2; }

missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed' \
    || missing="$missing $p"
done
if [ -z "$missing" ]; then
  say "all installed: $PACKAGES"
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { say "ERROR: run as root (apt-get)"; exit 1; }
  SUDO="sudo"
fi

say "installing:$missing"
tmp_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod 755 /usr/sbin/policy-rc.d
  tmp_policy=1
fi
cleanup() { if [ "$tmp_policy" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing; then
  say "apt-get install failed; running apt-get update and retrying"
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

# The package enables the system-wide service (all interfaces) for the next boot: undo that.
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now cyrus-imapd redis-server >/dev/null 2>&1 || true
fi

for b in /usr/sbin/cyrmaster /usr/lib/cyrus/bin/httpd /usr/lib/cyrus/bin/squatter /usr/sbin/saslpasswd2 \
         /usr/bin/redis-server /usr/bin/chromium; do
  [ -x "$b" ] || { say "ERROR: $b missing after install"; exit 1; }
done
say "done"
