"""Triton's CPU interpreter, quicker where it repeats work for nothing (Triton 3.6):

- It reduces a block with a ``tl.reduce`` combine function of the kernel's own one element
  at a time, calling the function in Python for each element (``ReduceOps.generic_reduce``):
  a 512-wide reduce is 511 calls, and a Step5 test spent most of its time there. Here the
  block's even and odd elements are combined at once instead, halving it until one is
  left: the combine function runs on whole blocks, about log2(n) times. The order differs
  from the interpreter's left-to-right one but keeps each operand's position (element 2i
  is always the left operand of 2i + 1), so only the associativity ``tl.reduce`` asks of
  its combine function is used; a compiled kernel combines in a tree too. A combine
  function that branches (``if``, ``while``, ``for``, ``and``/``or``: on a block, Python
  would take one branch for every element), or any function it calls, takes the
  interpreter's own loop, as does one that fails on blocks.
- At each call of a ``@triton.jit`` function from a kernel it patches the builtins of
  ``triton.language`` again, listing every member of each module with
  ``inspect.getmembers`` to find them (a third of a DeepSeek V4 test). Here each module's
  builtins are listed once; each is still patched as the interpreter patches it. And a
  call from a kernel into language modules already patched during the launch patches
  nothing again (what it would patch is patched, until the launch restores it).
- It builds a table of numpy dtypes at each conversion of a Triton dtype (tens of
  thousands a launch); here each dtype is converted once.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import textwrap
from collections.abc import Iterator

import numpy as np
import triton.language as triton_language

from jitkern.kernel.interpreter import jit_callees


@contextlib.contextmanager
def quick_interpreter() -> Iterator[None]:
    """Within the block, Triton's interpreter reduces with a kernel's combine function
    pairwise over whole blocks, lists each module's builtins once, patches the language
    once a launch and converts each dtype once (see the module)."""
    from triton.runtime import interpreter
    from triton.runtime.interpreter import ReduceOps

    one_by_one, patch_builtins = ReduceOps.generic_reduce, interpreter._patch_builtin

    def pairwise(self, inputs):
        if not _branch_free(self.combine_fn.fn):
            return one_by_one(self, inputs)
        try:
            return _reduce_pairwise(self, inputs)
        except Exception:  # a combine function that needs scalars otherwise: the interpreter's own loop
            return one_by_one(self, inputs)

    def patch_listed_builtins(module, builder, scope):
        for name in _builtin_names(module):
            member = getattr(module, name)
            if triton_language.core.is_builtin(member):  # not yet patched: as the interpreter would
                interpreter._patch_attr(module, name, member, builder, scope)

    for module in (triton_language, triton_language.core, triton_language.tensor, triton_language.math,
                   triton_language.core.tensor_descriptor_base):
        _builtin_names(module)  # listed now, before a launch patches them
    patch_lang, numpy_dtype = interpreter._patch_lang, interpreter._get_np_dtype
    launch_patched: set = set()  # the language modules patched since the running launch began

    def patch_lang_once(fn):
        languages = _languages(fn)
        if not launch_patched:  # a launch: its scope restores what it patched
            scope = patch_lang(fn)
            restore = scope.restore
            scope.restore = lambda: (restore(), launch_patched.clear())
        elif languages <= launch_patched:  # a call from the kernel, into modules already patched
            return None  # the interpreter drops what a call's patch returns (and never restores it)
        else:  # tl.sum of a kernel that sees only triton.language: triton.language.core too
            scope = patch_lang(fn)
        launch_patched.update(languages)
        return scope

    scalar_dtype = functools.cache(numpy_dtype)

    def numpy_dtype_once(dtype):
        if isinstance(dtype, triton_language.block_type):
            dtype = dtype.element_ty
        if isinstance(dtype, triton_language.pointer_type):  # not hashable; the interpreter's answer is quick
            return numpy_dtype(dtype)
        return scalar_dtype(dtype)

    ReduceOps.generic_reduce, interpreter._patch_builtin = pairwise, patch_listed_builtins
    interpreter._patch_lang, interpreter._get_np_dtype = patch_lang_once, numpy_dtype_once
    try:
        yield
    finally:
        ReduceOps.generic_reduce, interpreter._patch_builtin = one_by_one, patch_builtins
        interpreter._patch_lang, interpreter._get_np_dtype = patch_lang, numpy_dtype


@functools.cache
def _languages(fn) -> frozenset:
    """The ``triton.language`` modules ``fn``'s globals hold, which a launch of it patches."""
    return frozenset(value for value in fn.__globals__.values()
                     if value is triton_language or value is triton_language.core)


@functools.cache
def _builtin_names(module) -> tuple[str, ...]:
    """The names of ``module``'s (a ``triton.language`` module or class) builtins, listed once."""
    return tuple(name for name, member in inspect.getmembers(module) if triton_language.core.is_builtin(member))


def _reduce_pairwise(ops, inputs) -> list:
    arrays = [tensor.handle.data for tensor in inputs]
    axis = ops.axis
    if axis is None:
        arrays, axis = [array.reshape(-1) for array in arrays], 0
    arrays = [np.moveaxis(array, axis, 0) for array in arrays]
    while arrays[0].shape[0] > 1:  # block lengths are powers of 2: the halves are whole
        left = [ops.to_tensor(array[0::2], tensor.dtype) for array, tensor in zip(arrays, inputs)]
        right = [ops.to_tensor(array[1::2], tensor.dtype) for array, tensor in zip(arrays, inputs)]
        combined = ops.combine_fn.fn(*left, *right)
        combined = combined if isinstance(combined, tuple) else (combined,)
        arrays = [np.broadcast_to(np.asarray(_data(value), dtype=array.dtype), array[0::2].shape)
                  for value, array in zip(combined, arrays)]
    reduced = [array[0] for array in arrays]
    if ops.keep_dims:
        if ops.axis is None:
            reduced = [np.reshape(value, (1,) * tensor.handle.data.ndim) for value, tensor in zip(reduced, inputs)]
        else:
            reduced = [np.expand_dims(value, ops.axis) for value in reduced]
    elif ops.axis is None:
        reduced = [value.item() for value in reduced]
    return [ops.to_tensor(value, tensor.dtype) for value, tensor in zip(reduced, inputs)]


def _data(value):
    return value.handle.data if hasattr(value, "handle") else value


BRANCHES = (ast.If, ast.IfExp, ast.While, ast.For, ast.BoolOp, ast.Match, ast.Try)


@functools.cache
def _branch_free(function) -> bool:
    """Whether ``function`` and the ``@triton.jit`` functions it calls by a global name hold
    no Python control flow."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return False
    if any(isinstance(node, BRANCHES) for node in ast.walk(tree)):
        return False
    return all(_branch_free(callee) for callee in jit_callees(function))
