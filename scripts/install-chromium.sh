#!/usr/bin/env bash
# Debian's Chromium for the report's browser test (tests/integration/test_report_browser.py drives
# it over the DevTools protocol; test tools' own browser downloads cannot work on a machine without
# network). Idempotent: nothing to do when `chromium` (or $CHROMIUM) is on PATH. Installs with
# apt-get as root, or through sudo without a password; otherwise says what to run.
set -euo pipefail

if command -v "${CHROMIUM:-chromium}" >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium not found and no apt-get here: install Chromium and put it on PATH as chromium (or set CHROMIUM)" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "chromium not found: run 'apt-get install chromium fonts-liberation' as root, then make setup again" >&2
  exit 1
fi
echo "installing Debian's chromium (once; for the report's browser test)"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq chromium fonts-liberation >/dev/null
command -v chromium >/dev/null
