"""The process boundary: Ctrl-C stops a loop run in Rust, and a forked child gets a clear error
from the parent's loaders and tables while the parent goes on. Each runs in a process of its
own, which the test signals or forks."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)


def test_ctrl_c_stops_time_rust_epoch(cora):
    # A thread sends SIGINT once the producer has gathered, while the main thread drains an
    # epoch of thousands of batches in Rust. The interrupt must end the epoch early: fewer
    # gathers than batches (without the signal check the epoch runs to its end first).
    result = run_python(f"""
        import os, signal, threading, time
        import graphloom as gl
        gl.init()
        ds = gl.Dataset.open({str(cora)!r})
        features = ds.feature_table(location="host")
        loader = gl.NeighborLoader(ds, [-1, -1, -1], batch_size=1, shuffle=False,
                                   input_nodes=list(range(ds.num_nodes)), features=features)
        def interrupt():
            while features.gather_stats()["calls"] == 0:
                time.sleep(0.001)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt, daemon=True).start()
        try:
            loader.time_rust_epoch()
        except KeyboardInterrupt:
            calls = int(features.gather_stats()["calls"])
            assert calls < len(loader), (calls, len(loader))
        else:
            raise AssertionError("the epoch ran to its end")
        assert sum(1 for _ in loader) == len(loader)   # the loader still works
        print("ok")
    """)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_a_forked_child_gets_an_error_and_the_parent_goes_on(cora):
    result = run_python(f"""
        import os, sys
        import graphloom as gl
        comm = gl.init()
        ds = gl.Dataset.open({str(cora)!r})
        loader = gl.NeighborLoader(ds, [5, 5], batch_size=16, shuffle=False)
        table = gl.create_embedding(comm, "continuous", "shared", "float32", (10, 4))
        table.scatter([1], __import__("numpy").ones((1, 4), "float32"))
        epoch = iter(loader)
        first = next(epoch)                      # the producer is running ahead
        pid = os.fork()
        if pid == 0:
            def refused(call):
                try:
                    call()
                except gl.GraphLoomError as e:
                    return "fork" in str(e) and "num_workers=0" in str(e) and "spawn" in str(e)
                except BaseException:
                    return False
                return False
            checks = [
                refused(lambda: next(epoch)),
                refused(lambda: next(iter(loader))),
                refused(loader.time_rust_epoch),
                refused(lambda: table.gather([1])),
                refused(lambda: gl.init()),
                refused(lambda: gl.Dataset.open({str(cora)!r})),
                refused(lambda: gl.NeighborLoader(ds, [5], batch_size=4)),
            ]
            # Exits through the interpreter: the exit handlers (finalize, which closes the
            # parent's tables) leave the parent's job alone.
            sys.exit(0 if all(checks) else 10 + checks.index(False))
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
        assert 1 + sum(1 for _ in epoch) == len(loader)     # the parent's epoch goes on
        assert sum(1 for _ in loader) == len(loader)        # and the next one
        assert table.gather([1]).sum().item() == 4
        print("ok")
    """)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_a_torch_dataloader_worker_reports_the_error_to_the_parent(cora):
    # DataLoader workers are forked; the worker's error must reach the parent (it pickles).
    result = run_python(f"""
        import torch
        import graphloom as gl
        gl.init()
        ds = gl.Dataset.open({str(cora)!r})
        loader = gl.NeighborLoader(ds, [5, 5], batch_size=16)
        class Batches(torch.utils.data.IterableDataset):
            def __iter__(self):
                return iter(loader)
        try:
            for _ in torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=1):
                pass
        except gl.GraphLoomError as e:
            assert "num_workers=0" in str(e), e
        else:
            raise AssertionError("the worker iterated the parent's loader")
        assert sum(1 for _ in loader) == len(loader)
        print("ok")
    """)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_the_folder_of_a_killed_process_data_is_removed_by_the_next_one(tmp_path):
    # A process iterating a NeighborLoader over a PyG Data is killed with SIGKILL: its
    # converted dataset's folder stays until the next process that converts a Data removes it.
    code = """
        import os, signal, sys
        import torch
        from torch_geometric.data import Data
        import graphloom as gl
        gl.init()
        data = Data(x=torch.randn(6, 3), edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]))
        loader = gl.NeighborLoader(data, [2], batch_size=2)
        next(iter(loader))
        print(os.getpid(), flush=True)
        {end}
    """
    env = dict(__import__("os").environ, TMPDIR=str(tmp_path))

    def run(end: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code.format(end=end))],
                              capture_output=True, text=True, timeout=300, env=env)

    killed = run("os.kill(os.getpid(), signal.SIGKILL)")
    assert killed.returncode == -9, killed.stderr
    pid = killed.stdout.split()[0]
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(f"graphloom-pyg-{pid}-")]
    assert left, "the killed process's folder is there until another process sweeps it"
    swept = run("pass")
    assert swept.returncode == 0, swept.stderr
    assert not any(p.name.startswith(f"graphloom-pyg-{pid}-") for p in tmp_path.iterdir())
    # The clean run removed its own folder too.
    assert not any(p.name.startswith("graphloom-pyg-") for p in tmp_path.iterdir())
