"""The kernel model: one class per kernel, a frozen ``CompileKey`` per binary.

A ``JitKernel`` names each binary a deployment needs with a ``CompileKey`` and can
enumerate them (``get_warmup_keys``) and compile them (``compile``). A
``TritonJitKernel`` owns one ``@triton.jit`` function; its ``__call__``, decorated by
``kernel_launcher``, builds a ``LaunchSpec``. The same ``__call__`` launches at serve
time and, fed the stand-ins of ``warmup_inputs``, compiles at warmup, so the two cannot
drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generic, TypeVar

from triton.runtime.driver import driver as _triton_driver

from jitkern import registry, settings
from jitkern.settings import interpreting

CompileKeyT = TypeVar("CompileKeyT")


class WarmupMismatch(RuntimeError):
    """``warmup_inputs(key)`` produced a launch whose key is not ``key``."""


@dataclass(slots=True)
class LaunchSpec(Generic[CompileKeyT]):
    """What one launch needs: the grid, the kernel's keyword arguments, the key.

    ``kwargs`` holds every argument of the ``@triton.jit`` function by name, plus
    Triton launch options (``num_warps``, ...). ``result`` is what the call returns.
    Not frozen: it is built on every launch, and a frozen dataclass costs twice as much.
    """

    grid: tuple[int, ...]
    kwargs: dict[str, Any]
    key: CompileKeyT
    result: Any = None


class _ActiveLaunch(threading.local):
    """The kernel and key being launched, so compile hooks can name them."""

    kernel: "JitKernel | None" = None
    key: Any = None


active_launch = _ActiveLaunch()


def key_name(key: Any) -> str:
    """A stable, readable name of a compile key: ``head_size=1024,block_size=4``."""
    return ",".join(f"{f.name}={getattr(key, f.name)}" for f in dataclasses.fields(key))


def key_fields(key: Any) -> dict[str, Any]:
    """The key as plain JSON-friendly values (dtypes become their names)."""
    return {f.name: _plain(getattr(key, f.name)) for f in dataclasses.fields(key)}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


class JitKernel(Generic[CompileKeyT]):
    """A kernel whose binaries are named by a frozen ``CompileKey`` dataclass.

    Subclasses set ``name`` (the stable registry name used by manifests) and a nested
    ``CompileKey``, and implement ``dispatch``, ``get_warmup_keys`` and ``compile``.
    ``dispatch`` must be a pure function of hashable arguments: it is memoised, since it
    runs on every launch and building a frozen dataclass is the slow part.
    Each class has one instance (``Kernel()`` always returns it), so that what warmup
    loaded is what serving launches.
    """

    name: ClassVar[str]
    CompileKey: ClassVar[type]
    _instance: ClassVar["JitKernel | None"] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._instance = None
        if "dispatch" in cls.__dict__:
            cls.dispatch = _memoised(cls.__dict__["dispatch"])
        if "name" in cls.__dict__:
            key_class = getattr(cls, "CompileKey", None)
            if key_class is None or not dataclasses.is_dataclass(key_class):
                raise TypeError(f"{cls.__qualname__} must declare a CompileKey dataclass")
            if not key_class.__dataclass_params__.frozen:
                raise TypeError(f"{cls.__qualname__}.CompileKey must be frozen")
            registry.register(cls)

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._direct_launches = {}  # compile key -> DirectLaunch (TritonJitKernel)
        return cls._instance

    def dispatch(self, **values: Any) -> CompileKeyT:
        """Map the values a call sees to the key of the binary it needs."""
        raise NotImplementedError

    def get_warmup_keys(self, **config: Any) -> list[CompileKeyT]:
        """Every key a deployment with this config launches."""
        raise NotImplementedError

    def compile(self, key: CompileKeyT) -> Any:
        """Compile (or load from the cache) the binary of ``key``."""
        raise NotImplementedError

    def warmup(self, **config: Any) -> list[Any]:
        """Compile every key of ``config``."""
        return [self.compile(key) for key in self.get_warmup_keys(**config)]

    def describe(self, key: CompileKeyT) -> str:
        return f"{self.name}[{key_name(key)}]"


def _memoised(dispatch: Callable[..., Any]) -> Callable[..., Any]:
    """``dispatch`` behind an LRU cache (C-implemented; bounded, as sizes vary)."""
    cached = functools.lru_cache(maxsize=4096)(dispatch)

    @functools.wraps(dispatch)
    def memoised_dispatch(self, *args: Any, **values: Any) -> Any:
        return cached(self, *args, **values)

    return memoised_dispatch


def kernel_launcher(build: Callable[..., LaunchSpec]) -> Callable[..., Any]:
    """Decorate a ``__call__`` that returns a ``LaunchSpec``: calling it launches.

    The undecorated function stays reachable as ``launch_spec`` so that warmup runs
    the very same code on stand-in inputs.
    """

    @functools.wraps(build)
    def launch(self: "TritonJitKernel", *args: Any, **kwargs: Any) -> Any:
        spec = build(self, *args, **kwargs)
        self.launch(spec)
        return spec.result

    launch.launch_spec = build
    return launch


class TritonJitKernel(JitKernel[CompileKeyT]):
    """A ``JitKernel`` owning one ``@triton.jit`` function, set as ``kernel``."""

    kernel: ClassVar[Any]

    def warmup_inputs(self, key: CompileKeyT) -> dict[str, Any]:
        """Keyword arguments for ``__call__`` that make Triton build ``key``'s binary.

        Tensors are ``TritonWarmupTensor`` stand-ins; nothing is allocated.
        """
        raise NotImplementedError

    def launch_spec(self, *args: Any, **inputs: Any) -> LaunchSpec[CompileKeyT]:
        """The spec ``__call__`` would launch for these inputs, without launching."""
        return type(self).__call__.launch_spec(self, *args, **inputs)

    def launch(self, spec: LaunchSpec[CompileKeyT]) -> None:
        """Launch through the key's binary directly when it fits, else through Triton."""
        direct = self._direct_launches.get(spec.key)
        if direct is not None and direct.launch(spec):
            return
        active_launch.kernel, active_launch.key = self, spec.key
        try:
            binary = self.kernel.run(grid=spec.grid, warmup=False, **spec.kwargs)
        finally:
            active_launch.kernel = active_launch.key = None
        if direct is None and binary is not None:
            self._prepare_direct_launch(spec, binary)

    def forget_binaries(self) -> None:
        """Drop every binary this process holds for the kernel (tests start clean)."""
        self.kernel.device_caches.clear()
        self._direct_launches.clear()

    def _prepare_direct_launch(self, spec: LaunchSpec[CompileKeyT], binary: Any) -> None:
        if settings.current().direct_launch and not interpreting():
            self._direct_launches[spec.key] = DirectLaunch(self.kernel, spec, binary)

    def compile(self, key: CompileKeyT) -> Any:
        """Compile ``key`` through the launch path; nothing runs. None when interpreting."""
        spec = self.launch_spec(**self.warmup_inputs(key))
        if spec.key != key:
            raise WarmupMismatch(
                f"{self.name}: warmup_inputs({key_name(key)}) dispatches to {key_name(spec.key)}"
            )
        if interpreting():
            return None
        active_launch.kernel, active_launch.key = self, key
        try:
            binary = self.kernel.warmup(grid=(1,), **spec.kwargs)
        finally:
            active_launch.kernel = active_launch.key = None
        if not _compiling_only():
            self._prepare_direct_launch(spec, binary)
        return binary


def _compiling_only() -> bool:
    from triton.runtime.driver import driver

    from jitkern.targets import CompileOnlyDriver

    return type(driver.active) is CompileOnlyDriver


class DirectLaunch:
    """One key's binary, launched without Triton's per-call option parsing and lookup.

    Triton's ``kernel[grid](...)`` re-reads its settings, rebuilds a cache key string
    and walks its hooks on every launch. Here that is done once per key. Per launch,
    Triton's own native binder still specialises the arguments (dtypes, 16-byte
    alignment, integer classes), and the launch goes through only if that equals the
    specialisation the binary was built for: a call outside it returns False and takes
    Triton's normal path, where the guard sees it. Launches use the current stream, so
    they are captured by CUDA graphs; Triton's launch hooks fire as usual.
    """

    __slots__ = ("binder", "specialization", "binary", "device", "knobs")

    def __init__(self, jit_function: Any, spec: LaunchSpec, binary: Any):
        import triton
        from triton.runtime.driver import driver

        self.device = driver.active.get_current_device()
        self.binder = jit_function.device_caches[self.device][4]
        _bound, self.specialization, _options = self.binder(**spec.kwargs)
        binary._init_handles()  # load onto the GPU now, not on the first request
        self.binary = binary
        self.knobs = triton.knobs.runtime

    def launch(self, spec: LaunchSpec) -> bool:
        bound, specialization, _options = self.binder(**spec.kwargs)
        active = _triton_driver.active
        device = active.get_current_device()
        if specialization != self.specialization or device != self.device:
            return False
        stream = active.get_current_stream(device)
        grid, binary, args = spec.grid, self.binary, bound.values()
        enter_hook = self.knobs.launch_enter_hook
        metadata = binary.launch_metadata(grid, stream, *args) if enter_hook is not None else None
        binary.run(
            grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
            stream, binary.function, binary.packed_metadata, metadata, enter_hook, self.knobs.launch_exit_hook, *args,
        )
        return True
