#!/usr/bin/env bash
# Installs umoci (an OCI image tool from Debian's packages) into .tools/bin, idempotently,
# without touching the system: `apt-get download` + `dpkg-deb -x` into .tools/cache.
# The image test validates and unpacks scripts/image's output with it.
# Prints the path of the umoci binary on stdout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin" "$tools/cache"

# The version Debian bookworm ships (checked with `apt-cache policy umoci`).
UMOCI_DEB_VERSION="${UMOCI_DEB_VERSION:-0.4.7+ds-3+b7}"

install_umoci() {
  local bin="$tools/bin/umoci"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "${UMOCI_DEB_VERSION%%+*}"; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || { echo "install-oci-tool: apt-get not found: install umoci 0.4.7 into $bin by hand" >&2; return 1; }
  local dl="$tools/cache/umoci"
  rm -rf "$dl" && mkdir -p "$dl"
  # A fresh machine may have no package lists yet.
  if ! apt-cache show "umoci=$UMOCI_DEB_VERSION" >/dev/null 2>&1; then
    echo "install-oci-tool: apt-get update (package lists missing or stale)" >&2
    apt-get update -qq >&2 || true
  fi
  echo "install-oci-tool: umoci $UMOCI_DEB_VERSION" >&2
  # apt-get download writes into the current directory; _apt cannot write to .tools when
  # run as root, which only costs a warning.
  (cd "$dl" && apt-get download -qq "umoci=$UMOCI_DEB_VERSION" >&2 2>/dev/null) \
    || (cd "$dl" && apt-get download -qq umoci >&2)
  local deb
  deb=$(ls "$dl"/umoci_*.deb | head -n 1)
  dpkg-deb -x "$deb" "$dl/x"
  install -m 0755 "$dl/x/usr/bin/umoci" "$bin.tmp"
  mv "$bin.tmp" "$bin"
  rm -rf "$dl"
}

# Concurrent test runs share .tools: one installs, the others wait for it.
exec 9>"$tools/cache/umoci.lock"
flock 9
install_umoci
flock -u 9
echo "$tools/bin/umoci"
