#!/usr/bin/env bash
# install-test-packages.sh -- install the Debian packages the test suite needs:
# - Cyrus IMAP 3.6 (imapd, lmtpd, squatter, cyrmaster; cyrus-caldav ships the httpd that serves
#   JMAP), the SASL tools used to create test users (saslpasswd2) and the PLAIN/LOGIN mechanisms;
# - redis-server (Debian's Redis 7.0, tested beside the embedded 6.2) and redis-sentinel (the
#   Sentinel set of tests/peers/redis_sentinel.py; the cluster peer needs only redis-server and
#   redis-cli);
# - chromium (the admin page's browser tests drive it with Playwright) and a CJK font for the
#   Chinese screenshots;
# - Dovecot 2.3 for the IMAP tests: dovecot-core and dovecot-lmtpd are installed; dovecot-imapd
#   is NOT (Debian's cyrus-imapd `Conflicts: imap-server`, which dovecot-imapd provides: installing
#   it would remove Cyrus). `apt-get download` fetches the dovecot-imapd .deb of exactly
#   dovecot-core's version and `dpkg-deb -x` unpacks it into
#   $DOVECOT_IMAPD_CACHE/<version> (default /var/cache/messageweave-test/dovecot-imapd), where
#   tests/peers/dovecot.py finds its `imap` and `imap-login` binaries;
# - nodejs and npm when `node` is not on PATH (the Telegram emulator and the gateway need >= 20).
#
# Idempotent: does nothing when everything is installed and unpacked. Runs `apt-get update` only when the
# first `apt-get install` fails (stale or missing package lists). Never starts the system-wide
# Cyrus, Dovecot or the MTA the packages pull in (a temporary policy-rc.d forbids service starts),
# and disables the packaged cyrus-imapd and dovecot units. The tests start their own instance on 127.0.0.1.
#
# Usage (as root, or through sudo):  scripts/install-test-packages.sh
set -euo pipefail

PACKAGES="cyrus-common cyrus-imapd cyrus-caldav sasl2-bin libsasl2-modules redis-server redis-sentinel chromium fonts-wqy-zenhei dovecot-core dovecot-lmtpd"
command -v node >/dev/null 2>&1 || PACKAGES="$PACKAGES nodejs npm"

DOVECOT_IMAPD_CACHE=${DOVECOT_IMAPD_CACHE:-/var/cache/messageweave-test/dovecot-imapd}

say() { printf '[install-test-packages] %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  SUDO="sudo"
fi
need_sudo() {
  if [ -n "$SUDO" ] && ! command -v sudo >/dev/null; then
    say "ERROR: run as root (apt-get)"; exit 1
  fi
}

install_packages() {
  local missing="" p
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed' \
      || missing="$missing $p"
  done
  if [ -z "$missing" ]; then
    say "all installed: $PACKAGES"
    return 0
  fi
  need_sudo
  say "installing:$missing"
  tmp_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    tmp_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing; then
    say "apt-get install failed; running apt-get update and retrying"
    $SUDO apt-get update -q
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
  fi
  # The packages enable the system-wide services (all interfaces) for the next boot: undo that.
  if command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now cyrus-imapd redis-server redis-sentinel dovecot.service dovecot.socket \
      >/dev/null 2>&1 || true
  fi
}

# The dovecot-imapd package of dovecot-core's exact version, unpacked (never installed: see above).
unpack_dovecot_imapd() {
  local ver dir dl
  ver=$(dpkg-query -W -f='${Version}' dovecot-core)
  dir=$DOVECOT_IMAPD_CACHE/$(printf '%s' "$ver" | tr -c 'A-Za-z0-9.+~-' '_')
  if [ -x "$dir/usr/lib/dovecot/imap" ] && [ -x "$dir/usr/lib/dovecot/imap-login" ]; then
    say "dovecot-imapd $ver unpacked in $dir"
    return 0
  fi
  need_sudo
  say "unpacking dovecot-imapd $ver into $dir"
  dl=$(mktemp -d "${TMPDIR:-/tmp}/dovecot-imapd-dl.XXXXXX")
  chmod 777 "$dl"  # apt-get download runs as the _apt user
  if ! (cd "$dl" && $SUDO apt-get download -q "dovecot-imapd=$ver"); then
    say "apt-get download failed; running apt-get update and retrying"
    $SUDO apt-get update -q
    (cd "$dl" && $SUDO apt-get download -q "dovecot-imapd=$ver")
  fi
  $SUDO rm -rf "$dir"
  $SUDO mkdir -p "$dir"
  $SUDO dpkg-deb -x "$dl"/dovecot-imapd_*.deb "$dir"
  rm -rf "$dl"
  $SUDO chmod 755 "$DOVECOT_IMAPD_CACHE" "$dir"
}

tmp_policy=0
cleanup() { if [ "$tmp_policy" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi; }
trap cleanup EXIT

install_packages
unpack_dovecot_imapd

for b in /usr/sbin/cyrmaster /usr/lib/cyrus/bin/httpd /usr/lib/cyrus/bin/squatter /usr/sbin/saslpasswd2 \
         /usr/bin/redis-server /usr/bin/redis-cli /usr/bin/redis-sentinel /usr/bin/chromium /usr/sbin/dovecot /usr/lib/dovecot/lmtp; do
  [ -x "$b" ] || { say "ERROR: $b missing after install"; exit 1; }
done
say "done"
