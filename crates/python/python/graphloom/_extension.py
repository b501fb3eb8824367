"""The extension as the package calls it. PyO3 converts an int argument into its Rust integer
(``usize``, ``u64``, ``i64``) and raises ``OverflowError: can't convert negative int to
unsigned`` when it does not fit (a negative count or seed, a seed past 2**64), without the
argument's name. Every call through :data:`extension`, and through :func:`checked` for the
methods of the extension's objects, raises ``ValueError`` naming the argument and its range
instead: one rule for every argument, rather than a check of each at each call."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterator

import numpy as np

from . import _graphloom

# The largest int an argument holds (u64, usize), and the largest a signed one holds (i64).
_UNSIGNED_MAX = 2**64 - 1
_SIGNED_MAX = 2**63 - 1

# What a Rust integer cannot hold, in the order a culprit is looked for: what no integer
# holds, then what no unsigned one holds, then what a signed one does not (the call failed,
# so an int past i64 that a u64 would hold was an i64's).
_OUT_OF_RANGE = (
    (lambda v: v > _UNSIGNED_MAX, f"is more than {_UNSIGNED_MAX} (2**64 - 1), the most it takes"),
    (lambda v: v < 0, "is negative: expected an int of 0 or more"),
    (lambda v: v > _SIGNED_MAX, f"is more than {_SIGNED_MAX} (2**63 - 1), the most it takes"),
)


def _ints(value: Any) -> Iterator[int]:
    """The ints of an argument: itself, or the items of a list or tuple (a shape)."""
    items = value if isinstance(value, (list, tuple)) else (value,)
    for v in items:
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            yield int(v)


def _arguments(fn: Callable[..., Any], args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """The arguments of a call of ``fn`` by name (PyO3 gives its functions, classes and
    methods their signatures), or by position where its signature is unknown."""
    try:
        return list(inspect.signature(fn).bind(*args, **kwargs).arguments.items())
    except (TypeError, ValueError):
        return [(f"argument {i + 1}", a) for i, a in enumerate(args)] + list(kwargs.items())


def _out_of_range(arguments: list[tuple[str, Any]]) -> str | None:
    """What is wrong with the argument no Rust integer of its kind holds, naming it: a single
    int before the items of a sequence (fanouts hold -1 by right); None when none is."""
    for holds_not, why in _OUT_OF_RANGE:
        for sequences in (False, True):
            for name, value in arguments:
                if isinstance(value, (list, tuple)) != sequences:
                    continue
                for v in _ints(value):
                    if holds_not(v):
                        return f"{name}: {v} {why}"
    return None


def checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a function, class or bound method of the extension) raising ``ValueError``
    naming the argument where PyO3 raises ``OverflowError`` for an int out of its range."""

    @functools.wraps(fn, updated=())
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OverflowError:
            message = _out_of_range(_arguments(fn, args, kwargs))
            if message is None:
                raise
            raise ValueError(message) from None

    return call


class _Class:
    """An extension class whose construction and static methods are :func:`checked` (its
    instances are the class's own)."""

    def __init__(self, cls: type) -> None:
        self._cls = cls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return checked(self._cls)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._cls, name)
        return checked(value) if callable(value) else value


class _Extension:
    """The extension module with every function and class :func:`checked`."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(_graphloom, name)
        if isinstance(value, type):
            return value if issubclass(value, BaseException) else _Class(value)
        return checked(value) if callable(value) else value


#: The extension, as every module of the package calls it.
extension: Any = _Extension()
