"""WholeGraph's memory types, memory locations and element types as the store's, and the
layouts the store does not have."""

from __future__ import annotations

import torch

_MEMORY_TYPES = ("continuous", "chunked", "distributed")


def _location(memory_location: str, memory_type: str) -> str:
    """The store's location of WholeGraph's ``memory_location`` for ``memory_type``: its host
    memory is one every process of a machine maps for the continuous and chunked types
    (shared), each process's own for the distributed one."""
    if memory_location == "cuda":
        raise ValueError(
            'memory_location="cuda": this build of graphloom keeps tables in host memory; '
            'pass memory_location="cpu"'
        )
    if memory_location != "cpu":
        raise ValueError(f'memory_location={memory_location!r}: expected "cpu" (or "cuda")')
    return "host" if memory_type == "distributed" else "shared"


def _memory_type(memory_type: str) -> str:
    """WholeGraph's ``memory_type``, checked: the store's layouts have the same names."""
    if memory_type not in _MEMORY_TYPES:
        raise ValueError(f"memory_type={memory_type!r}: expected continuous, chunked or "
                         "distributed")
    return memory_type


def _torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of the store's element type ``name``."""
    return {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
            "i32": torch.int32, "i64": torch.int64}[name]


def _check_round_robin(round_robin_size: int) -> None:
    """Refuses WholeGraph's round-robin row placement (the store places rows in blocks)."""
    if round_robin_size:
        raise NotImplementedError("round_robin_size: rows are partitioned in blocks")
