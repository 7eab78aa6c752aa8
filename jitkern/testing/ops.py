"""Checking a public function's torch op (``public_call(op=...)``) on a call of it."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
"""``torch.library.opcheck``'s tests that hold for ops writing tensors in place: what the op
writes is what its schema says, it has no autograd of its own to miss, its fake result
matches the real one, and AOT dispatch with dynamic shapes traces it."""


class _FirstOp(TorchDispatchMode):
    """Records the first op called inside it (the public function's, before those of its body)."""

    call: tuple[Any, tuple[tuple, dict[str, Any]]] | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.call is None:
            self.call = (func, (tuple(args), dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


def op_call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, tuple[tuple, dict[str, Any]]]:
    """The op overload a call of ``function`` is under ``torch.compile`` and its arguments
    (a dict as its repr, as the op carries it): found by making the call as Dynamo records
    it (``function.op_call``), which runs the op."""
    with _FirstOp() as first:
        function.op_call(*args, **kwargs)
    return first.call


def check_op(function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """``torch.library.opcheck`` (``OPCHECK_TESTS``) of the op a call of ``function`` takes,
    on copies of its tensors; raises ``torch.testing``'s ``OpCheckError`` naming the test."""
    copies = [value.clone() if isinstance(value, torch.Tensor) else value for value in args]
    overload, (op_args, op_kwargs) = op_call(function, *copies, **{
        name: value.clone() if isinstance(value, torch.Tensor) else value for name, value in kwargs.items()})
    torch.library.opcheck(overload, op_args, op_kwargs, test_utils=OPCHECK_TESTS)
