#!/usr/bin/env bash
# Installs an OCI registry, distribution/distribution as Debian packages it
# (`docker-registry`), into .tools/bin/registry, idempotently and without touching the
# system: `apt-get download` + `dpkg-deb -x` into .tools/cache, as install-oci-tool.sh does
# for umoci. A Debian binary rather than a Go build: 5 MB of download instead of minutes of
# CPU. The image push test runs it on loopback as the registry `scripts/image --push`
# pushes to. Prints the path of the binary on stdout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin" "$tools/cache"

# The version Debian bookworm ships (checked with `apt-cache policy docker-registry`).
REGISTRY_DEB_VERSION="${REGISTRY_DEB_VERSION:-2.8.2+ds1-1}"

install_registry() {
  local bin="$tools/bin/registry"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "${REGISTRY_DEB_VERSION%%+*}"; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || { echo "install-registry: apt-get not found: install distribution's registry ${REGISTRY_DEB_VERSION%%+*} into $bin by hand" >&2; return 1; }
  local dl="$tools/cache/registry"
  rm -rf "$dl" && mkdir -p "$dl"
  if ! apt-cache show "docker-registry=$REGISTRY_DEB_VERSION" >/dev/null 2>&1; then
    echo "install-registry: apt-get update (package lists missing or stale)" >&2
    apt-get update -qq >&2 || true
  fi
  echo "install-registry: docker-registry $REGISTRY_DEB_VERSION" >&2
  (cd "$dl" && apt-get download -qq "docker-registry=$REGISTRY_DEB_VERSION" >&2 2>/dev/null) \
    || (cd "$dl" && apt-get download -qq docker-registry >&2)
  local deb
  deb=$(ls "$dl"/docker-registry_*.deb | head -n 1)
  dpkg-deb -x "$deb" "$dl/x"
  install -m 0755 "$dl/x/usr/bin/docker-registry" "$bin.tmp"
  mv "$bin.tmp" "$bin"
  rm -rf "$dl"
}

# Concurrent test runs share .tools: one installs, the others wait for it.
exec 9>"$tools/cache/registry.lock"
flock 9
install_registry
flock -u 9
echo "$tools/bin/registry"
