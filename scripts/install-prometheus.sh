#!/usr/bin/env bash
# Installs Prometheus and promtool, as Debian bookworm packages them (`prometheus`), into
# .tools/bin, idempotently and without touching the system: `apt-get download` +
# `dpkg-deb -x` into .tools/cache, as install-registry.sh does for the registry. A Debian
# binary rather than a Go build: one download of about 30 MB instead of many minutes of CPU.
# The monitoring tests run promtool over monitoring/ and a real Prometheus scraping the
# agent; the sandbox scrapes its agent with it. Prints the path of the prometheus binary.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin" "$tools/cache"

# The version Debian bookworm ships (checked with `apt-cache policy prometheus`).
PROMETHEUS_DEB_VERSION="${PROMETHEUS_DEB_VERSION:-2.42.0+ds-5+deb12u1}"

installed() {
  local v=${PROMETHEUS_DEB_VERSION%%+*}
  [ -x "$tools/bin/prometheus" ] && [ -x "$tools/bin/promtool" ] &&
    "$tools/bin/prometheus" --version 2>&1 | grep -q "version $v" &&
    "$tools/bin/promtool" --version 2>&1 | grep -q "version $v"
}

install_prometheus() {
  installed && return 0
  command -v apt-get >/dev/null 2>&1 || { echo "install-prometheus: apt-get not found: install prometheus and promtool ${PROMETHEUS_DEB_VERSION%%+*} into $tools/bin by hand" >&2; return 1; }
  local dl="$tools/cache/prometheus"
  rm -rf "$dl" && mkdir -p "$dl"
  if ! apt-cache show "prometheus=$PROMETHEUS_DEB_VERSION" >/dev/null 2>&1; then
    echo "install-prometheus: apt-get update (package lists missing or stale)" >&2
    apt-get update -qq >&2 || true
  fi
  echo "install-prometheus: prometheus $PROMETHEUS_DEB_VERSION" >&2
  (cd "$dl" && apt-get download -qq "prometheus=$PROMETHEUS_DEB_VERSION" >&2 2>/dev/null) \
    || (cd "$dl" && apt-get download -qq prometheus >&2)
  local deb
  deb=$(ls "$dl"/prometheus_*.deb | head -n 1)
  dpkg-deb -x "$deb" "$dl/x"
  local b
  for b in prometheus promtool; do
    install -m 0755 "$dl/x/usr/bin/$b" "$tools/bin/$b.tmp"
    mv "$tools/bin/$b.tmp" "$tools/bin/$b"
  done
  rm -rf "$dl"
}

# Concurrent test runs share .tools: one installs, the others wait for it.
exec 9>"$tools/cache/prometheus.lock"
flock 9
install_prometheus
flock -u 9
echo "$tools/bin/prometheus"
