#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test (built optimised, with debug
# assertions, by the dev profile), including the MPI tests under mpirun, then the Python
# package's tests. Installs what it needs on a fresh machine: OpenMPI (and libclang, to generate
# the MPI bindings) from apt, cargo-nextest, and the Python package with its test dependencies
# in a virtual environment outside the repository (scripts/python-install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi
if ! command -v mpirun >/dev/null || ! dpkg -s libopenmpi-dev libclang-dev >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libopenmpi-dev openmpi-bin libclang-dev >/dev/null
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# OpenMPI refuses to run as root, and by default more processes than cores.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
# Where cargo builds: $CARGO_TARGET_DIR when set (maturin builds the extension there too).
target="${CARGO_TARGET_DIR:-target}"

# Shared-memory segments of GraphLoom already there (left by a process killed before this run):
# only segments this run leaves behind fail it.
shm_before=$(find /dev/shm -maxdepth 1 -name 'graphloom*' 2>/dev/null | sort)

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo nextest run --workspace --all-features --no-fail-fast 2>&1 | tee "$target/nextest.log"
# The MPI tests are named mpi_*; a suite in which none ran has not tested the MPI backend.
mpi_passed=$(grep -cE '^\s+PASS .*mpi_' "$target/nextest.log" || true)
if [ "$mpi_passed" -eq 0 ]; then
  echo "no MPI test ran: the suite must run the mpirun tests" >&2
  exit 1
fi
echo "MPI tests passed: $mpi_passed"
cargo test --workspace --all-features --doc

# The Python package: built into its virtual environment (with MPI, and with torch and
# torch_geometric for the tests), then its tests, the mpirun ones included.
bash scripts/python-install.sh --mpi --test
GRAPHLOOM_BIN="$(realpath "$target")/debug/graphloom" \
  "${GRAPHLOOM_VENV:-$HOME/.cache/graphloom/venv}/bin/python" -m pytest -q crates/python/tests \
  -c crates/python/pyproject.toml

# No test may leave a shared-memory segment behind.
leftover=$(comm -13 <(echo "$shm_before") \
  <(find /dev/shm -maxdepth 1 -name 'graphloom*' 2>/dev/null | sort) | sed '/^$/d' | head -5)
if [ -n "$leftover" ]; then
  echo "shared-memory segments left behind: $leftover" >&2
  exit 1
fi
