"""The messages of a torchrun job's store communicator: bytes between two processes over
torch.distributed's tagged point-to-point sends (gloo), for the extension's ``TorchComm``,
which builds the store's collectives on them. A message travels as its length (int64), then
its bytes, both under its tag; waits release the interpreter lock (torch's ``Work.wait``)."""

from __future__ import annotations

import datetime
from typing import Any


def _dist() -> Any:
    """torch.distributed with a process group, or an error that says how to make one."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "this torchrun job has no process group: call torch.distributed."
            "init_process_group('gloo') before graphloom's tables and collectives"
        )
    return dist


def _wait(work: Any, seconds: float) -> None:
    """Waits for ``work``: TimeoutError past ``seconds``, ConnectionError when the peer's
    connection failed."""
    try:
        work.wait(timeout=datetime.timedelta(seconds=seconds))
    except RuntimeError as err:
        text = str(err)
        if "timed out" in text.lower() or "timeout" in text.lower():
            raise TimeoutError(text) from None
        raise ConnectionError(text) from None


class Transport:
    """Sends and receives bytes between the ranks of torch.distributed's default group."""

    def isend(self, dest: int, tag: int, data: bytes) -> tuple:
        """Starts sending ``data`` to world rank ``dest``; returns the handle :meth:`wait`
        takes (it keeps the tensors alive until then)."""
        import torch

        dist = _dist()
        header = torch.tensor([len(data)], dtype=torch.int64)
        works = [dist.isend(header, dest, tag=tag)]
        payload = None
        if data:
            payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            works.append(dist.isend(payload, dest, tag=tag))
        return works, header, payload

    def wait(self, handle: tuple) -> None:
        """Completes a send started by :meth:`isend`."""
        for work in handle[0]:
            try:
                work.wait()
            except RuntimeError as err:
                raise ConnectionError(str(err)) from None

    def recv(self, src: int, tag: int, seconds: float) -> bytes:
        """The next message from world rank ``src`` under ``tag``, waiting at most ``seconds``
        for each of its two parts."""
        import torch

        dist = _dist()
        header = torch.empty(1, dtype=torch.int64)
        _wait(dist.irecv(header, src, tag=tag), seconds)
        length = int(header[0])
        if length == 0:
            return b""
        payload = torch.empty(length, dtype=torch.uint8)
        _wait(dist.irecv(payload, src, tag=tag), seconds)
        return payload.numpy().tobytes()
