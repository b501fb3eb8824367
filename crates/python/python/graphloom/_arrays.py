"""Turning torch tensors, numpy arrays and lists into the buffers the extension reads, and the
extension's DLPack views into torch tensors (numpy arrays without torch)."""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np


def loaded_torch() -> Any:
    """torch if some module has imported it, else None: a torch tensor or dtype can only come
    from a process that has, and asking does not import torch."""
    return sys.modules.get("torch")


@functools.cache
def torch_or_none() -> Any:
    """torch, imported on first use, or None when it is not installed (results are numpy
    arrays then). Imported here rather than with the package, so that ``import graphloom``
    stays light."""
    try:
        import torch
    except ImportError:
        return None
    return torch


_NAMES = {
    "f32": "f32", "float32": "f32", "float": "f32",
    "f64": "f64", "float64": "f64", "double": "f64",
    "bf16": "bf16", "bfloat16": "bf16",
    "i32": "i32", "int32": "i32",
    "i64": "i64", "int64": "i64", "long": "i64",
}


def dtype_name(dtype: Any) -> str:
    """GraphLoom's name (f32, f64, bf16, i32, i64) of a dtype given as a string, a numpy dtype
    or a torch dtype."""
    if dtype is None:
        raise TypeError("dtype: give one of float32, float64, bfloat16, int32 or int64")
    torch = loaded_torch()
    if torch is not None and isinstance(dtype, torch.dtype):
        key = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        key = dtype
    else:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"{dtype!r} is not a dtype") from None
    try:
        return _NAMES[key]
    except KeyError:
        raise TypeError(
            f"dtype {dtype!r} is not supported: use float32, float64, bfloat16, int32 or int64"
        ) from None


def is_torch(x: Any) -> bool:
    """Whether `x` is a torch tensor (False without torch)."""
    torch = loaded_torch()
    return torch is not None and isinstance(x, torch.Tensor)


def ids_array(ids: Any, what: str = "ids") -> np.ndarray:
    """Node or row ids as a contiguous 1-D int64 numpy array (no copy for int64 input).

    Accepts a CPU torch tensor or a numpy array of int64 or int32, or a sequence of ints;
    anything else raises TypeError (wrong dtype) or ValueError (wrong device or shape)."""
    if is_torch(ids):
        if ids.device.type != "cpu":
            raise ValueError(f"{what}: the tensor is on {ids.device}; GraphLoom reads CPU tensors")
        torch = loaded_torch()
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{what}: expected an int64 or int32 tensor, got {ids.dtype}")
        array = ids.detach().contiguous().numpy()
    elif isinstance(ids, np.ndarray):
        if ids.dtype not in (np.int64, np.int32):
            raise TypeError(f"{what}: expected an int64 or int32 array, got {ids.dtype}")
        array = ids
    else:
        try:
            array = np.asarray(ids)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{what}: expected integer ids: {e}") from None
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"{what}: expected integer ids, got {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D array of ids, got shape {tuple(array.shape)}")
    return np.ascontiguousarray(array, dtype=np.int64)


def _check_rows(what: str, dtype: str, got: str, shape: tuple[int, ...], got_shape: tuple) -> None:
    if got != dtype:
        raise TypeError(f"{what}: the table holds {dtype}, the rows are {got}")
    if tuple(got_shape) != shape:
        raise ValueError(f"{what}: expected shape {shape}, got {tuple(got_shape)}")


def rows_bytes(rows: Any, dtype: str, shape: tuple[int, ...], what: str = "rows") -> np.ndarray:
    """Rows for a table of `dtype` as a contiguous uint8 array of their bytes, after checking
    their dtype and shape."""
    if is_torch(rows):
        if rows.device.type != "cpu":
            raise ValueError(f"{what}: the tensor is on {rows.device}; GraphLoom reads CPU tensors")
        _check_rows(what, dtype, dtype_name(rows.dtype), shape, rows.shape)
        return rows.detach().contiguous().view(loaded_torch().uint8).numpy().reshape(-1)
    if not isinstance(rows, np.ndarray):
        raise TypeError(f"{what}: expected a torch tensor or a numpy array, got {type(rows).__name__}")
    if dtype == "bf16":
        raise TypeError(f"{what}: give bfloat16 rows as a torch tensor (numpy has no bfloat16)")
    _check_rows(what, dtype, dtype_name(rows.dtype), shape, rows.shape)
    if not rows.dtype.isnative:
        rows = rows.astype(rows.dtype.newbyteorder("="))
    return np.ascontiguousarray(rows).view(np.uint8).reshape(-1)


def dense_array(tensor: Any, what: str) -> tuple[np.ndarray, str]:
    """A writable contiguous float32, float64 or int64 CPU tensor (or numpy array) as a numpy
    array sharing its memory, with GraphLoom's dtype name."""
    if is_torch(tensor):
        if tensor.device.type != "cpu":
            raise ValueError(f"{what}: the tensor is on {tensor.device}; GraphLoom reads CPU tensors")
        torch = loaded_torch()
        if tensor.dtype not in (torch.float32, torch.float64, torch.int64):
            raise TypeError(f"{what}: {tensor.dtype} is not float32, float64 or int64")
        if not tensor.is_contiguous():
            raise ValueError(f"{what}: the tensor must be contiguous (reduced in place)")
        array = tensor.detach().numpy()
    elif isinstance(tensor, np.ndarray):
        array = tensor
        if not array.flags.c_contiguous:
            raise ValueError(f"{what}: the array must be contiguous (reduced in place)")
    else:
        raise TypeError(f"{what}: expected a torch tensor or a numpy array, got {type(tensor).__name__}")
    name = dtype_name(array.dtype)
    if name not in ("f32", "f64", "i64"):
        raise TypeError(f"{what}: {array.dtype} is not float32, float64 or int64")
    return array.reshape(-1), name


def from_view(view: Any) -> Any:
    """A view of GraphLoom memory as a torch tensor (numpy array without torch), sharing it.

    Read-only memory (a table mapped read-only) comes back as a read-only numpy array even
    with torch: torch has no read-only tensors, and a write to such a map would kill the
    process. `torch.from_numpy` still shares it, at the caller's risk."""
    if view.writable:
        torch = torch_or_none()
        if torch is not None:
            return torch.from_dlpack(view)
        if view.dtype == "bf16":
            raise TypeError("bfloat16 data needs torch (numpy has no bfloat16)")
        return np.from_dlpack(view)
    if view.dtype == "bf16":
        raise TypeError(
            "a read-only bfloat16 table has no zero-copy view (numpy has no bfloat16): gather it"
        )
    return np.from_dlpack(view)


def int_list(values: Any, what: str) -> list[int]:
    """A sequence of ints (a list, tuple, array or tensor; not a string) as a list."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{what}: expected a sequence of integers, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (
            is_torch(v) and v.dim() == 0 and not v.is_floating_point()
        ):
            raise TypeError(f"{what}: {v!r} is not an integer")
        out.append(int(v))
    return out
