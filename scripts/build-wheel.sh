#!/usr/bin/env bash
# Builds the Python package `graphloom-gnn` (imported as `graphloom`) as a wheel that installs
# with pip and no Rust toolchain, the `graphloom` command line included, and its source
# distribution:
#   bash scripts/build-wheel.sh [--mpi] [--sdist] [--profile PROFILE] [--out DIR]
#   pip install dist/graphloom_gnn-*.whl
# The wheel is abi3 (one wheel for CPython 3.11 and later) and tagged manylinux for the glibc
# it was built against (build on the oldest Linux you install to, or in a manylinux image).
# --mpi      builds the MPI backend too, linked to this machine's OpenMPI (a wheel for machines
#            with the same OpenMPI; without it, jobs run as one process or under torchrun);
# --sdist    also writes the source distribution (pip builds it with a Rust toolchain);
# --profile  cargo's profile [default: release]; the tests use `dev` to reuse their build;
# --out      the folder for the files [default: dist/].
# maturin comes from $GRAPHLOOM_VENV when it has one, else from a build environment made in
# ~/.cache/graphloom/build-venv.
set -euo pipefail
cd "$(dirname "$0")/.."

mpi=0
sdist=0
profile=release
out=dist
while [ $# -gt 0 ]; do
  case "$1" in
    --mpi) mpi=1 ;;
    --sdist) sdist=1 ;;
    --profile) profile="${2:?--profile takes a cargo profile}"; shift ;;
    --out) out="${2:?--out takes a folder}"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if ! command -v cargo >/dev/null; then
  echo "cargo is required to build the wheel (https://rustup.rs); installing it needs none" >&2
  exit 1
fi
MATURIN=""
for candidate in "${GRAPHLOOM_VENV:-}/bin/maturin" "$(command -v maturin || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then MATURIN="$candidate"; break; fi
done
if [ -z "$MATURIN" ]; then
  BUILD_VENV="$HOME/.cache/graphloom/build-venv"
  if [ ! -x "$BUILD_VENV/bin/maturin" ]; then
    echo "making the build environment $BUILD_VENV"
    python3 -m venv "$BUILD_VENV"
    "$BUILD_VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'maturin>=1.16,<2'
  fi
  MATURIN="$BUILD_VENV/bin/maturin"
fi

features=()
[ "$mpi" -eq 1 ] && features=(--features mpi)
# A wheel linked to the system's OpenMPI is for machines that have it: not a manylinux one.
compat=()
[ "$mpi" -eq 1 ] && compat=(--compatibility linux --auditwheel skip)
mkdir -p "$out"
# cargo's progress goes to stderr as it builds: a first release build takes about 6 minutes on
# 2 cores.
echo "building the wheel ($profile profile$([ "$mpi" -eq 1 ] && echo ", with MPI")) into $out" >&2
"$MATURIN" build --manifest-path crates/python/Cargo.toml --profile "$profile" \
  --out "$out" "${features[@]}" "${compat[@]}"
if [ "$sdist" -eq 1 ]; then
  "$MATURIN" sdist --manifest-path crates/python/Cargo.toml --out "$out"
fi
ls -1 "$out"/graphloom_gnn-*
