"""The package as pip installs it: the wheel that ``scripts/build-wheel.sh`` builds (once per
test run, with the tests' cargo profile so that it reuses their build) installs into a fresh
virtual environment with no Rust toolchain on PATH and imports as ``graphloom``, under the
distribution name ``graphloom-gnn``; the source distribution holds every crate it builds
from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
from pathlib import Path

import pytest

import graphloom as gl

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Path:
    """The folder holding the wheel and the sdist."""
    out = tmp_path_factory.mktemp("dist")
    command = ["bash", str(REPO / "scripts" / "build-wheel.sh"), "--profile", "dev", "--sdist",
               "--out", str(out)]
    if gl.mpi_available:
        command.append("--mpi")  # the features of the tests' build: nothing is compiled again
    env = dict(os.environ, GRAPHLOOM_VENV=sys.prefix)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_wheel_installs_without_cargo_and_imports(built, tmp_path):
    (wheel,) = built.glob("graphloom_gnn-*.whl")
    assert "-abi3-" in wheel.name, wheel.name
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    python = fresh / "bin" / "python"
    path = f"{fresh / 'bin'}:/usr/bin:/bin"
    assert shutil.which("cargo", path=path) is None, "the install must not find cargo"
    env = {"PATH": path, "HOME": str(tmp_path)}
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
         "--no-deps", "--disable-pip-version-check", str(wheel)],
        env=env, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    # numpy (and torch) from the test environment, after the fresh one's own packages.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "test-environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    check = textwrap.dedent(f"""
        import importlib.metadata, sys
        import graphloom as gl
        assert gl.__file__.startswith({str(fresh)!r}), gl.__file__
        assert gl._graphloom.__file__.startswith({str(fresh)!r}), gl._graphloom.__file__
        assert "torch" not in sys.modules
        table = gl.create_embedding(gl.init(), "continuous", "host", "float32", (4, 2))
        table.scatter([1], __import__("numpy").ones((1, 2), "float32"))
        assert table.gather([1]).tolist() == [[1.0, 1.0]]
        print(gl.__version__, importlib.metadata.version("graphloom-gnn"))
    """)
    run = subprocess.run([str(python), "-c", check], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    version, dist_version = run.stdout.split()
    assert version == dist_version == gl.__version__
    # The command line came with it, on the environment's PATH: it prepares and trains.
    cli = shutil.which("graphloom", path=path)
    assert cli == str(fresh / "bin" / "graphloom"), cli
    out = subprocess.run([cli, "--version"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"graphloom {gl.__version__}", out
    data = tmp_path / "syn"
    for command in (["prepare", "synthetic", "--nodes", "500", "--out", str(data)],
                    ["train", "--dataset", str(data), "--epochs", "2", "--json"]):
        run = subprocess.run([cli, *command], env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["epochs"] == 2


def test_the_sdist_holds_every_crate_it_builds_from(built):
    (sdist,) = built.glob("graphloom_gnn-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in archive.getnames()}
    for needed in ("pyproject.toml", "Cargo.lock", "crates/python/Cargo.toml",
                   "python/graphloom/__init__.py", "crates/graph/src/lib.rs",
                   "crates/convert/src/lib.rs", "crates/nn/src/lib.rs", "crates/cli/src/lib.rs",
                   "crates/bench/src/lib.rs", "crates/plan/src/lib.rs", "crates/store/src/lib.rs"):
        assert any(n.endswith(needed) for n in names), needed


def test_the_cli_and_the_package_report_one_version(graphloom_cli):
    out = subprocess.run([str(graphloom_cli), "--version"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == f"graphloom {gl.__version__}"


def test_the_console_command_is_the_command_line():
    """The package's ``graphloom`` runs the binary's main: the same version, exit statuses and
    usage tips, and a closed pipe ends it quietly (Python ignores SIGPIPE; the command must
    not)."""
    cli = Path(sys.prefix, "bin", "graphloom")
    assert cli.is_file(), "the install puts the console command beside the interpreter"
    out = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, f"graphloom {gl.__version__}")
    typo = subprocess.run([str(cli), "train", "--epoch", "3"], capture_output=True, text=True,
                          timeout=60)
    assert typo.returncode == 2 and "--epochs" in typo.stderr, typo.stderr
    missing = subprocess.run([str(cli), "info", "/nonexistent/graphloom-data"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1, missing
    assert missing.stderr.startswith("error: ") and "/nonexistent/graphloom-data" in missing.stderr
    piped = subprocess.run(f"{cli} train --help | head -1", shell=True, capture_output=True,
                           text=True, timeout=60)
    assert piped.returncode == 0 and piped.stdout and "Error" not in piped.stderr, piped


def test_the_console_command_benchmarks_in_processes_of_its_own(tmp_path):
    """A bench starts the command again for what it measures: the console command, not the
    interpreter running it."""
    cli = str(Path(sys.prefix, "bin", "graphloom"))
    data = tmp_path / "mag"
    subprocess.run([cli, "prepare", "synthetic", "--hetero", "mag", "--scale", "0.005", "--out",
                    str(data)], check=True, capture_output=True, timeout=300)
    env = dict(os.environ, DGL_PYTHON=str(tmp_path / "no-python"))
    run = subprocess.run([cli, "bench", "hetero", "--dataset", str(data), "--fanouts", "5,5",
                          "--batches", "2", "--repeats", "1", "--json"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    (line,) = run.stdout.splitlines()
    record = json.loads(line)
    assert record["system"] == "graphloom" and record["seeds_per_second"] > 0, record
