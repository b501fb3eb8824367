"""The package's ``graphloom`` console command: the Rust command line (the same ``main`` as the
binary a cargo build makes), run in this process by the extension, so that ``pip install`` of
the wheel puts ``graphloom`` on PATH."""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    """Runs ``graphloom`` with this process's arguments and exits with its status."""
    # The command runs without the interpreter, which would act on Ctrl-C only once it
    # returned: with the default disposition Ctrl-C ends the run at once, as it ends the binary.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # The benchmarks start the command again for the runs they measure: this script, not the
    # interpreter that this process is.
    os.environ["GRAPHLOOM_SELF"] = os.path.abspath(sys.argv[0])
    from ._graphloom import run_cli

    sys.exit(run_cli(["graphloom", *sys.argv[1:]]))
