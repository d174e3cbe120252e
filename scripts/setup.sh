#!/usr/bin/env bash
# Install everything ssdlab needs on a fresh Debian machine, idempotently:
# Debian packages, the Python virtualenv at .venv with pinned tools, and ssdlab itself
# (Rust core + PyO3 module, built by maturin in release mode).
set -euo pipefail
cd "$(dirname "$0")/.."

# Real clients the tests and benches drive: NBD (qemu-io, nbdinfo/nbdcopy, fio's nbd engine,
# nbdkit as the reference server), flashrom (serprog), openssl for throwaway TLS certificates,
# libmemcached's memccp/memccat/memcstat and netcat (`ssdlab cache serve`), redis-server (the reference
# for `ssdlab kv serve`'s RESP front-end) with redis-cli and redis-benchmark, lz4 and zstd (the C
# libraries' own benchmarks beside the RMML codecs in `ssdlab-bench --only rmml`), libclang-dev
# (bindgen, for the littlefs C library under crates/spi-fw's power-cut campaigns).
APT_PACKAGES=(build-essential pkg-config qemu-utils libnbd-bin nbdkit fio flashrom openssl libmemcached-tools netcat-openbsd memcached redis-server redis-tools lz4 zstd libclang-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "setup: Rust (cargo) is required: https://rustup.rs" >&2; exit 1; }
# `make test` checks formatting and lints: rustfmt and clippy come with rustup's default profile.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    command -v rustup >/dev/null || { echo "setup: cargo fmt and cargo clippy are required (rustfmt, clippy)" >&2; exit 1; }
    rustup component add rustfmt clippy
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$PY" -m venv .venv
fi
# Pinned build and test tools (runtime deps are pinned in pyproject.toml). Ray is an optional
# extra (ssdlab[ray]) installed here so the tests cover `ssdlab sweep --ray`; pymemcache is the
# third-party memcached client the `ssdlab cache serve` tests drive, redis (redis-py) the Redis
# client the `ssdlab kv serve` tests drive; ruff lints the Python; mypy's
# stubtest checks the type stubs of ssdlab._native against the built module; pytest-xdist runs
# `make test`'s Python tests on two workers.
.venv/bin/python -m pip install -q --disable-pip-version-check \
    "maturin==1.16.0" "pytest==8.4.2" "numpy==2.3.5" "matplotlib==3.10.8" "tqdm==4.70.1" "scipy==1.17.1" "ray==2.60.0" \
    "pymemcache==4.0.0" "redis==7.1.1" "ruff==0.14.5" "mypy==2.4.1" "pytest-xdist==3.8.0"

echo "setup: building ssdlab (release)"
mkdir -p target
if ! VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin develop --release --locked >target/setup-build.log 2>&1; then
    cat target/setup-build.log >&2
    echo "setup: building ssdlab failed (log above, also in target/setup-build.log)" >&2
    exit 1
fi
# The FlacFS LD_PRELOAD shim (target/release/libflacfs.so) for unmodified programs.
if ! cargo build --release --locked -p ssdlab-flac-shim >>target/setup-build.log 2>&1; then
    cat target/setup-build.log >&2
    echo "setup: building the FlacFS shim failed (log above)" >&2
    exit 1
fi
# The guest `ssdlab vm` boots (kernel + initramfs from Debian packages, cached in target/guest/).
bash scripts/build-guest.sh
.venv/bin/python -c "import ssdlab; print('setup: ssdlab', ssdlab.__version__, 'ready in .venv')"
