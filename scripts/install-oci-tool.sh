#!/usr/bin/env bash
# Installs umoci and oci-image-tool (OCI image tools from Debian's packages) into .tools/bin,
# idempotently, without touching the system: `apt-get download` + `dpkg-deb -x` into .tools/cache.
# The image test validates scripts/image's output with both and unpacks it with umoci.
# Prints the path of the umoci binary on stdout (oci-image-tool is beside it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin" "$tools/cache"

# The versions Debian bookworm ships (checked with `apt-cache policy umoci oci-image-tool`).
UMOCI_DEB_VERSION="${UMOCI_DEB_VERSION:-0.4.7+ds-3+b7}"
# opencontainers/image-tools (Go): `oci-image-tool validate --type imageLayout` checks a layout
# against the image spec's JSON schemas and every descriptor's digest and size.
OCI_IMAGE_TOOL_DEB_VERSION="${OCI_IMAGE_TOOL_DEB_VERSION:-1.0.0~rc2+really.rc1+dfsg-2+b12}"

# install_deb PACKAGE VERSION: /usr/bin/PACKAGE from Debian's package into .tools/bin,
# unless the installed one's stamp already names VERSION.
install_deb() {
  local pkg=$1 version=$2 bin="$tools/bin/$1" stamp="$tools/cache/$1.version"
  if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || { echo "install-oci-tool: apt-get not found: install $pkg $version into $bin by hand" >&2; return 1; }
  local dl="$tools/cache/$pkg"
  rm -rf "$dl" && mkdir -p "$dl"
  # A fresh machine may have no package lists yet.
  if ! apt-cache show "$pkg=$version" >/dev/null 2>&1; then
    echo "install-oci-tool: apt-get update (package lists missing or stale)" >&2
    apt-get update -qq >&2 || true
  fi
  echo "install-oci-tool: $pkg $version" >&2
  # apt-get download writes into the current directory; _apt cannot write to .tools when
  # run as root, which only costs a warning.
  (cd "$dl" && apt-get download -qq "$pkg=$version" >&2 2>/dev/null) \
    || (cd "$dl" && apt-get download -qq "$pkg" >&2)
  local deb
  deb=$(ls "$dl"/"$pkg"_*.deb | head -n 1)
  dpkg-deb -x "$deb" "$dl/x"
  install -m 0755 "$dl/x/usr/bin/$pkg" "$bin.tmp"
  mv "$bin.tmp" "$bin"
  echo "$version" > "$stamp"
  rm -rf "$dl"
}

# Concurrent test runs share .tools: one installs, the others wait for it.
exec 9>"$tools/cache/umoci.lock"
flock 9
install_deb umoci "$UMOCI_DEB_VERSION"
install_deb oci-image-tool "$OCI_IMAGE_TOOL_DEB_VERSION"
flock -u 9
echo "$tools/bin/umoci"
