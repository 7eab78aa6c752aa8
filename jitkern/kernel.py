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
import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generic, TypeVar

import torch
from triton.runtime.driver import driver as _triton_driver

from jitkern import registry, settings
from jitkern.settings import interpreting

CompileKeyT = TypeVar("CompileKeyT")


class WarmupMismatch(RuntimeError):
    """``warmup_inputs(key)`` produced a launch whose key is not ``key``."""


@dataclass(slots=True)
class LaunchSpec(Generic[CompileKeyT]):
    """What one launch needs: the grid, the kernel's runtime arguments, the key.

    ``kwargs`` holds the arguments of the ``@triton.jit`` function that are not constexprs,
    by name; the constexprs and Triton's launch options come from the kernel's
    ``constants(key)``. ``result`` is what the call returns. Not frozen: it is built on
    every launch, and a frozen dataclass costs twice as much.
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
    compile_cost: ClassVar[float] = 0.2
    """Rough seconds to compile one key. Parallel warmup starts the costliest keys first,
    so that a slow key does not start last and bound the wall time; only the order matters."""
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
        if "kernel" in cls.__dict__:
            settle_cache_key(cls.__dict__["kernel"])

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._direct_launches = {}  # compile key -> DirectLaunch or None (TritonJitKernel)
            cls._instance._launches_by_key_id = {}  # id(key) -> (key, its direct launch) (TritonJitKernel)
            cls._instance._constants = {}  # compile key -> constants(key), checked (TritonJitKernel)
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


def settle_cache_key(jit_function: Any) -> None:
    """Make the Triton cache key of ``jit_function`` independent of what was hashed before.

    Triton 3.6 adds to a kernel's hash the ``constexpr`` globals its helpers use, but reads
    a helper's list of them before hashing it: a helper not hashed yet (by another kernel)
    contributes none. So the key of a kernel depended on the order in which a process
    hashed kernels, and a serving process could look up another key than warmup built
    (Step5's decode kernel did, after verify was hashed first). Hashing again from the
    helpers up until the key no longer changes gives the key with every helper's globals,
    whatever the order.
    """
    if not hasattr(jit_function, "cache_key") or not hasattr(jit_function, "used_global_vals"):
        return  # the interpreter's functions have no cache key
    functions = _jit_helpers(jit_function)
    previous = None
    while previous != jit_function.cache_key:
        previous = jit_function.cache_key
        for function in functions:
            function.hash = None


def _jit_helpers(jit_function: Any) -> list[Any]:
    """``jit_function`` and the ``@triton.jit`` functions its module globals reach, transitively
    (Triton's own functions aside: their globals hold no constexprs of ours)."""
    found, pending = {id(jit_function): jit_function}, [jit_function]
    while pending:
        for value in list(pending.pop().__globals__.values()):
            if hasattr(value, "used_global_vals") and hasattr(value, "__globals__") and id(value) not in found \
                    and not getattr(value, "__module__", "").startswith("triton."):
                found[id(value)] = value
                pending.append(value)
    return list(found.values())


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


def _no_direct_launch(kwargs: dict, grid: tuple) -> bool:
    return False


_UNKNOWN = (None, _no_direct_launch)


class TritonJitKernel(JitKernel[CompileKeyT]):
    """A ``JitKernel`` owning one ``@triton.jit`` function, set as ``kernel``."""

    kernel: ClassVar[Any]

    def constants(self, key: CompileKeyT) -> dict[str, Any]:
        """The constexpr arguments of ``kernel`` and Triton's launch options (``num_warps``,
        ...) for ``key``.

        They come from the key alone, so that a key names one binary whatever the call:
        a direct launch passes the key's constants as they are and checks none of them.
        """
        return {}

    def warmup_inputs(self, key: CompileKeyT) -> dict[str, Any]:
        """Keyword arguments for ``__call__`` that make Triton build ``key``'s binary.

        Tensors are ``TritonWarmupTensor`` stand-ins; nothing is allocated.
        """
        raise NotImplementedError

    def launch_spec(self, *args: Any, **inputs: Any) -> LaunchSpec[CompileKeyT]:
        """The spec ``__call__`` would launch for these inputs, without launching."""
        return type(self).__call__.launch_spec(self, *args, **inputs)

    def triton_kwargs(self, spec: LaunchSpec[CompileKeyT]) -> dict[str, Any]:
        """Everything ``kernel[grid](...)`` takes for ``spec``: its arguments and its key's constants."""
        constants = self._key_constants(spec.key)
        misplaced = spec.kwargs.keys() & (constants.keys() | self._constexpr_names)
        if misplaced:
            raise TypeError(f"{self.name}: the LaunchSpec passes {sorted(misplaced)}; constexprs and launch "
                            f"options come from constants(key)")
        return {**spec.kwargs, **constants}

    def launch(self, spec: LaunchSpec[CompileKeyT]) -> None:
        """Launch through the key's binary directly when it fits, else through Triton.

        ``dispatch`` is memoised, so a key object usually repeats: its direct launch is
        found by the key's id first (an entry holds its key, checked to be this one), and
        by its hash, which a frozen dataclass computes field by field, only otherwise.
        """
        key = spec.key
        known_key, launch = self._launches_by_key_id.get(id(key), _UNKNOWN)
        if known_key is not key:
            launch = self._direct_launch_of(key)
        if not launch(spec.kwargs, spec.grid):
            self._launch_through_triton(spec)

    def _launch_through_triton(self, spec: LaunchSpec[CompileKeyT]) -> None:
        key = spec.key
        kwargs = self.triton_kwargs(spec)
        active_launch.kernel, active_launch.key = self, key
        try:
            binary = self.kernel.run(grid=spec.grid, warmup=False, **kwargs)
        finally:
            active_launch.kernel = active_launch.key = None
        if binary is not None and key not in self._direct_launches:
            self._prepare_direct_launch(spec, binary)

    def forget_binaries(self) -> None:
        """Drop every binary this process holds for the kernel (tests start clean)."""
        self.kernel.device_caches.clear()
        self._direct_launches.clear()
        self._launches_by_key_id.clear()

    def _key_constants(self, key: CompileKeyT) -> dict[str, Any]:
        constants = self._constants.get(key)
        if constants is None:
            constants = self.constants(key)
            runtime = constants.keys() & (set(self.kernel.arg_names) - self._constexpr_names)
            if runtime:
                raise TypeError(f"{self.name}: constants({key_name(key)}) gives {sorted(runtime)}, which are not "
                                f"constexprs: the LaunchSpec passes them")
            self._constants[key] = constants
        return constants

    @functools.cached_property
    def _constexpr_names(self) -> frozenset[str]:
        params = getattr(self.kernel, "params", None)
        if params is not None:
            return frozenset(param.name for param in params if param.is_constexpr)
        parameters = inspect.signature(self.kernel.fn).parameters  # the interpreter's functions have no params
        return frozenset(name for name, param in parameters.items() if "constexpr" in str(param.annotation))

    def _direct_launch_of(self, key: CompileKeyT) -> Callable[[dict, tuple], bool]:
        """The key's direct launch, remembered by the key's id once the key has a binary."""
        if key not in self._direct_launches:
            return _no_direct_launch  # not compiled yet: Triton's path, then ask again
        direct = self._direct_launches[key]
        if len(self._launches_by_key_id) >= 4096:  # keys dispatch's cache dropped would pile up
            self._launches_by_key_id.clear()
        launch = _no_direct_launch if direct is None else direct.launch
        self._launches_by_key_id[id(key)] = (key, launch)
        return launch

    def _prepare_direct_launch(self, spec: LaunchSpec[CompileKeyT], binary: Any) -> None:
        if settings.current().direct_launch and not interpreting():
            self._direct_launches[spec.key] = build_direct_launch(
                self.kernel, spec, self._key_constants(spec.key), binary
            )

    def compile(self, key: CompileKeyT) -> Any:
        """Compile ``key`` through the launch path; nothing runs. None when interpreting."""
        spec = self.launch_spec(**self.warmup_inputs(key))
        if spec.key != key:
            raise WarmupMismatch(
                f"{self.name}: warmup_inputs({key_name(key)}) dispatches to {key_name(spec.key)}"
            )
        kwargs = self.triton_kwargs(spec)
        if interpreting():
            return None
        active_launch.kernel, active_launch.key = self, key
        try:
            binary = self.kernel.warmup(grid=(1,), **kwargs)
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
    """One key's binary and the launch function generated for it.

    Triton's ``kernel[grid](...)`` binds and specialises every argument, rebuilds its cache
    key and re-reads its settings on every launch. Here that happens once, on the key's
    first launch (or warmup): from the specialisation Triton gave each argument, straight-
    line code is generated (``source``) that checks, per launch, just enough to know that
    Triton would pick this same binary, then calls the compiled launcher. ``launch(kwargs,
    grid)`` returns False for a call outside the binary, which then takes Triton's normal
    path, where the guard sees it. Launches use the current stream, so CUDA graphs capture
    them; Triton's launch hooks are read per launch and fire as in Triton.
    """

    __slots__ = ("binary", "launch", "source")

    def __init__(self, binary: Any, launch: Callable[[dict, tuple], bool], source: str):
        self.binary, self.launch, self.source = binary, launch, source


# Triton's integer classes (``native_specialize_impl``), as conditions on an int ``{0}``.
_INT_CLASSES = {
    "i32": f"-{2**31} <= {{0}} < {2**31}",
    "i64": f"-{2**63} <= {{0}} < {2**63} and not -{2**31} <= {{0}} < {2**31}",
    "u64": f"{2**63} <= {{0}} < {2**64}",
}


def build_direct_launch(jit_function: Any, spec: LaunchSpec, constants: dict[str, Any],
                        binary: Any) -> DirectLaunch | None:
    """The direct launch of ``binary``, built for ``spec``'s arguments and its key's ``constants``.

    None when an argument is of a kind the generated checks do not cover (tuples, tensor
    descriptors, a default left out, a backend with its own specialisation rules): that
    key always takes Triton's path.
    """
    import triton
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    active = _triton_driver.active
    device = active.get_current_device()
    backend = jit_function.device_caches[device][3]
    backend_class = type(backend)
    if not (backend_class.supports_native_tensor_specialization
            and backend_class.get_int_specialization is BaseBackend.get_int_specialization
            and backend_class.get_tensor_specialization is BaseBackend.get_tensor_specialization):
        return None
    kwargs = spec.kwargs
    constexprs = {param.name for param in jit_function.params if param.is_constexpr}
    if not set(jit_function.arg_names) <= kwargs.keys() | constants.keys() or constexprs & kwargs.keys():
        return None  # a default stands in, or a constexpr varies per launch: Triton's path decides
    runtime = triton.knobs.runtime
    binary._init_handles()  # load onto the GPU now, not on the first request
    run, run_options = _launcher(binary.run)
    get_device = _device_getter(active)
    namespace = {
        "drivers": _triton_driver, "ACTIVE": active, "DEVICE": device, "get_device": get_device,
        "get_stream": active.get_current_stream, "RUNTIME": runtime, "RUNTIME_SET": runtime.__dict__,
        "RUNTIME_CLASS": type(runtime), "DEBUG": runtime.debug, "PRE_RUN_HOOKS": jit_function.pre_run_hooks,
        "NO_ENTER": type(runtime).launch_enter_hook, "NO_EXIT": type(runtime).launch_exit_hook,
        "ENTER_HOOKS": type(runtime).launch_enter_hook.calls, "EXIT_HOOKS": type(runtime).launch_exit_hook.calls,
        "FUNCTION": binary.function, "PACKED": binary.packed_metadata, "launch_metadata": binary.launch_metadata,
        "TENSORS": (torch.Tensor, torch.nn.Parameter), "run": run,
    }
    on_cuda = active.get_active_torch_device().type == "cuda"
    unchanged_globals = []  # Triton refuses to launch once a global the kernel read has changed:
    for j, ((name, _), (_value, globals_dict)) in enumerate(jit_function.used_global_vals.items()):
        namespace[f"GLOBALS{j}"], namespace[f"GLOBAL{j}"] = globals_dict, globals_dict.get(name)
        unchanged_globals.append(f" or GLOBALS{j}.get({name!r}) is not GLOBAL{j}")  # any other object: Triton's path
    loads, checks, values, launch_args = [], [], [], []
    i32_checks, multiples_of_16, unspecialised = [], [], []  # i32 arguments: checked together, in the common case
    for i, param in enumerate(jit_function.params):
        if param.name in constants:  # a constexpr: fixed by the key, passed as it is
            namespace[f"c{i}"] = constants[param.name]
            values.append(f"c{i}")
            launch_args.append(f"c{i}")
            continue
        arg, value = f"a{i}", kwargs[param.name]
        loads.append(f"{arg} = kwargs[{param.name!r}]")
        values.append(arg)
        specialise, align = not param.do_not_specialize, not param.do_not_specialize_on_alignment
        try:
            kind, key = native_specialize_impl(backend, value, param.is_const, specialise, align)
        except (TypeError, OverflowError):
            return None
        lines = _argument_checks(i, value, (kind, key), specialise and align, on_cuda, namespace)
        if lines is None:
            return None
        lines = [f"# {param.name}: {(kind, key)!r}", *lines]
        if kind == "i32" and (key == "D" and specialise and align or key is None):
            (multiples_of_16 if key == "D" else unspecialised).append(arg)
            i32_checks += lines
        else:
            checks += lines
        launch_args.append(f"p{i}" if kind.startswith("*") else arg)
    if i32_checks:
        checks += _i32_checks(multiples_of_16, unspecialised, i32_checks)
    device_check = "" if get_device is None else " or get_device() != DEVICE"
    source = "\n".join([
        "def launch(kwargs, grid):",
        f"    if (len(kwargs) != {len(kwargs)} or drivers._active is not ACTIVE or PRE_RUN_HOOKS{device_check}"
        f"{''.join(unchanged_globals)}):",
        "        return False",
        "    try:",
        *(f"        {line}" for line in loads),
        "    except KeyError:",
        "        return False",
        *(f"    {line}" for line in checks),
        "    stream = get_stream(DEVICE)",
        "    metadata = enter = exit = None  # no hooks: as Triton, but without building their metadata",
        "    if RUNTIME_SET or ENTER_HOOKS or EXIT_HOOKS or RUNTIME_CLASS.debug is not DEBUG:",
        "        if RUNTIME.debug is not DEBUG:  # a knob set or a hook added: read them as Triton does",
        "            return False",
        "        if not (RUNTIME.launch_enter_hook is NO_ENTER and RUNTIME.launch_exit_hook is NO_EXIT",
        "                and not (ENTER_HOOKS or EXIT_HOOKS)):",
        "            enter, exit = RUNTIME.launch_enter_hook, RUNTIME.launch_exit_hook",
        f"            metadata = launch_metadata(grid, stream, {', '.join(values)})",
        "    n = len(grid)",
        "    run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, stream, FUNCTION,",
        f"        {''.join(f'{option!r}, ' for option in run_options)}PACKED, metadata, enter, exit, "
        f"{', '.join(launch_args)})",
        "    return True",
    ])
    exec(compile(source, f"<direct launch of {binary.name}>", "exec"), namespace)
    return DirectLaunch(binary, namespace["launch"], source)


def _argument_checks(i: int, value: Any, specialisation: tuple[Any, Any], divisibility: bool, on_cuda: bool,
                     namespace: dict[str, Any]) -> list[str] | None:
    """Lines returning False unless argument ``a{i}`` specialises as ``value`` did (to
    ``specialisation``, Triton's type and key); None for a kind of argument not covered.

    Mirrors Triton's native rules: a tensor's type is its dtype, its key whether its
    address is a multiple of 16; an int's type is its class (1 is the constexpr 1) and
    its key whether it is a multiple of 16; bools and floats are not specialised. A
    tensor's address ``p{i}`` goes to the launcher as an int, which it takes as is
    (``is_cuda``, as ``on_cuda`` wants it, stands in for the check the launcher makes on
    a tensor's address: a CPU tensor's address would run on the GPU).
    """
    arg, (kind, key) = f"a{i}", specialisation
    if not isinstance(kind, str):
        return None
    if kind.startswith("*"):
        if not isinstance(getattr(value, "dtype", None), torch.dtype):
            return None
        dtype = str(value.dtype).replace(".", "_")  # torch_bfloat16
        namespace[dtype] = value.dtype
        condition = f"type({arg}) not in TENSORS or {arg}.dtype is not {dtype} or {'not ' if on_cuda else ''}{arg}.is_cuda"
        if divisibility:
            return [f"if {condition} or {'' if key == 'D' else 'not '}(p{i} := {arg}.data_ptr()) & 15: return False"]
        return [f"if {condition}: return False", f"p{i} = {arg}.data_ptr()"]
    if kind in _INT_CLASSES:
        condition = f"type({arg}) is int and {_INT_CLASSES[kind].format(arg)}"
        if kind == "i32" and key == "":  # specialised, yet not a multiple of 16: 1 would be the constexpr 1
            condition += f" and {arg} != 1"
        if divisibility:
            condition += f" and {'not ' if key == 'D' else ''}{arg} & 15"
        return [f"if not ({condition}): return False"]
    if kind == "constexpr":  # None, or the int 1
        return [f"if not ({_same(arg, value)}): return False"]
    if kind in ("u1", "fp32"):
        return [f"if type({arg}) is not {'bool' if kind == 'u1' else 'float'}: return False"]
    return None


def _i32_checks(multiples_of_16: list[str], unspecialised: list[str], exact: list[str]) -> list[str]:
    """The checks of i32 arguments: one condition for the common case, in which the values
    are not negative, then the ``exact`` checks of each argument when it fails."""
    condition = [f"type({arg}) is int" for arg in multiples_of_16 + unspecialised]
    if multiples_of_16:  # all in [0, 2**31) and multiples of 16
        condition.append(f"not (m := {' | '.join(multiples_of_16)}) >> 31 and not m & 15")
    if unspecialised:
        condition.append(f"not ({' | '.join(unspecialised)}) >> 31")
    return ["# i32 arguments, together: none negative (else each on its own)",
            f"if not ({' and '.join(condition)}):", *(f"    {line}" for line in exact)]


def _same(arg: str, value: Any) -> str:
    """A condition true when ``arg`` is what Triton takes for the plain ``value``. Triton
    names a binary by the text of its values, so 1 is not True, nor 0.0 -0.0."""
    if value is None or isinstance(value, bool):
        return f"{arg} is {value!r}"
    if isinstance(value, float):
        return f"type({arg}) is float and repr({arg}) == {repr(value)!r}"
    return f"type({arg}) is {type(value).__name__} and {arg} == {value!r}"


def _launcher(run: Callable[..., None]) -> tuple[Callable[..., None], tuple]:
    """The compiled launcher to call, and the constants it takes after the function.

    Triton's CUDA launcher is a Python object whose ``__call__`` only allocates scratch
    memory, when the kernel needs any, and adds two flags of the binary before calling
    its C launch function. A kernel needing no scratch goes straight to the C function,
    with those flags and no scratch (None), saving a Python call per launch; any other
    launcher is called as is.
    """
    from triton.backends.nvidia.driver import CudaLauncher

    if type(run) is CudaLauncher and not (run.global_scratch_size or run.profile_scratch_size):
        return run.launch, (run.launch_cooperative_grid, run.launch_pdl, None, None)
    return run, ()


def _device_getter(active: Any) -> Callable[[], Any] | None:
    """The driver's current-device query; for CUDA, torch's without its lazy-init check
    (CUDA is initialised once a binary is loaded), which is most of its cost. None when
    the process sees one CUDA device, which is then always the current one."""
    if getattr(active, "get_current_device", None) is torch.cuda.current_device:
        return None if torch.cuda.device_count() == 1 else torch._C._cuda_getDevice
    return active.get_current_device
