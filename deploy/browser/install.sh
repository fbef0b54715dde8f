#!/usr/bin/env bash
# Chromium for the report page's browser test (tests/integration/test_report_page.py), from
# the distribution's packages. Idempotent; never fails the build: without Chromium the test
# skips and says why.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium: not installed and cannot install it here (needs root and apt-get);" \
       "the report page's browser test will skip" >&2
  exit 0
fi
echo "installing chromium (Debian package) for the report page's browser test ..."
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/tmp/servesweep-chromium.log 2>&1; then
  apt-get update -q >>/tmp/servesweep-chromium.log 2>&1 &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >>/tmp/servesweep-chromium.log 2>&1 ||
    echo "chromium: apt-get failed (see /tmp/servesweep-chromium.log); the browser test will skip" >&2
fi
exit 0
