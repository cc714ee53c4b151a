#!/usr/bin/env bash
# Install every build, run and test dependency of score by package name.
#
# Idempotent and quick when everything is present: one dpkg-query decides what
# is missing and apt runs only for that.  Run as root (or with sudo available).
#
#   scripts/install-deps.sh            install what is missing
#   scripts/install-deps.sh --check    list what is missing, exit 1 if anything is
set -euo pipefail

# Grouped by the part that needs them; keep each list sorted.
build_pkgs=(
  build-essential pkg-config meson ninja-build
  libpmix-dev libfabric-dev libmunge-dev libslurm-dev
  clang libclang-rt-14-dev
  protobuf-compiler
  debhelper dpkg-dev help2man lintian
)
run_pkgs=(
  iproute2 iputils-ping nftables procps psmisc util-linux
  apt-cacher-ng mmdebstrap munge openmpi-bin libopenmpi-dev openssh-client
  slurm-client slurmctld slurmd
)
test_pkgs=(
  python3 python3-mpi4py python3-pip python3-pytest python3-venv
  hpcc iperf3 libfabric-bin netpipe-openmpi netpipe-tcp sockperf linux-perf
  ansible-core ansible-lint
  nodejs prometheus python3-matplotlib
)
pkgs=("${build_pkgs[@]}" "${run_pkgs[@]}" "${test_pkgs[@]}")

missing_pkgs() {
  local installed
  # dpkg-query exits non-zero when any package is unknown; its output still counts.
  installed=$( (dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${pkgs[@]}" 2>/dev/null || true) \
              | awk '$2 == "installed" { print $1 }')
  for p in "${pkgs[@]}"; do
    grep -qxF "$p" <<<"$installed" || echo "$p"
  done
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

mapfile -t missing < <(missing_pkgs)

rust_missing=0
command -v cargo >/dev/null 2>&1 || rust_missing=1
# npm (the Grafana schema check): Debian packages it apart from nodejs;
# NodeSource's nodejs carries it (and conflicts with Debian's npm).
npm_missing=0
command -v npm >/dev/null 2>&1 || npm_missing=1

if [ "${1:-}" = "--check" ]; then
  status=0
  if [ ${#missing[@]} -gt 0 ]; then echo "missing packages: ${missing[*]}"; status=1; fi
  if [ $rust_missing -eq 1 ]; then echo "missing: cargo (Rust toolchain)"; status=1; fi
  if [ $npm_missing -eq 1 ]; then echo "missing: npm"; status=1; fi
  exit $status
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists yet; refresh them once per install run.
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ $npm_missing -eq 1 ] && ! command -v npm >/dev/null 2>&1; then
  echo "install-deps: installing npm" >&2
  as_root apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

if [ $rust_missing -eq 1 ]; then
  if command -v rustup >/dev/null 2>&1; then
    echo "install-deps: installing the stable Rust toolchain with rustup" >&2
    rustup toolchain install stable --profile minimal -c clippy -c rustfmt
  else
    echo "install-deps: installing Rust from Debian (cargo, rustc)" >&2
    as_root apt-get install -y -qq --no-install-recommends cargo rustc >/dev/null
  fi
fi
