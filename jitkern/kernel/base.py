"""The kernel contract: one class per kernel, a frozen ``CompileKey`` per binary.

A ``JitKernel`` names each binary a deployment needs with a ``CompileKey`` and can
enumerate them (``get_warmup_keys``) and compile them (``compile``). A
``TritonJitKernel`` owns one ``@triton.jit`` function; its ``__call__``, decorated by
``kernel_launcher``, builds a ``LaunchSpec``. The same ``__call__`` launches at serve
time and, fed the stand-ins of ``warmup_inputs``, compiles at warmup, so the two cannot
drift apart.

The class only declares. What jitkern derives from the declaration lives in two objects
each kernel has: ``kernel.layouts`` (``jitkern.layouts.KernelLayouts``: stand-ins, the
binary a launch needs, the binaries a domain needs) and ``kernel.binaries``
(``jitkern.launch.BinaryTable``: the binaries this process holds and the launch path).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, ClassVar, Generic, Iterable, TypeVar

from jitkern import settings, targets
from jitkern.kernel import registry
from jitkern.kernel.adopt import Adopted, add_tuned_fields, adopt, adopt_autotuner, check_heuristics, heuristic_constants
from jitkern.kernel.arguments import Arguments
from jitkern.kernel.calls import NoCallFor, bound_values, random_call
from jitkern.kernel.declaration import Declaration
from jitkern.kernel.declare import METADATA, DeclarationError
from jitkern.kernel.interpreter import calls_dot, refusing_bf16_dots
from jitkern.kernel.settle import settle_cache_key
from jitkern.kernel.tuning import TuningSpace, Winners
from jitkern.launch.binaries import BinaryTable
from jitkern.launch.plans import recording
from jitkern.launch.spec import LaunchSpec, active_launch
from jitkern.layouts.binary_key import BinaryKey, key_name
from jitkern.layouts.domains import LayoutDomain
from jitkern.layouts.kernel_layouts import NO_LAYOUTS, KernelLayouts, WarmupMismatch
from jitkern.layouts.specialisation import parse_layout, runtime_params

CompileKeyT = TypeVar("CompileKeyT")


class JitKernel(Generic[CompileKeyT]):
    """A kernel whose binaries are named by a frozen ``CompileKey`` dataclass.

    Subclasses set ``name`` (the stable registry name used by manifests) and a nested
    ``CompileKey`` (a plain class is made a frozen, keyword-only dataclass), and implement
    ``dispatch``, ``get_warmup_keys`` and ``compile``.
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
    layouts: ClassVar[Any] = NO_LAYOUTS
    """What jitkern derives of the kernel's layouts: one binary per key here, every layout
    of its launches for a Triton kernel (``KernelLayouts``)."""
    _instance: ClassVar["JitKernel | None"] = None
    _adopted: ClassVar[Adopted | None] = None  # what its kernel's triton.autotune and triton.heuristics said

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._instance = None
        key_class = cls.__dict__.get("CompileKey")
        if isinstance(key_class, type) and "__dataclass_fields__" not in key_class.__dict__:
            cls.CompileKey = dataclasses.dataclass(frozen=True, kw_only=True)(key_class)  # what every key must be
        if "dispatch" in cls.__dict__:
            cls.dispatch = _memoised(cls.__dict__["dispatch"])
        if "kernel" in cls.__dict__:  # a @triton.jit function, or one in Triton's wrappers (jitkern.kernel.adopt)
            cls._adopted = adopt(cls.__qualname__, cls.__dict__["kernel"])
            cls.kernel = cls._adopted.function
            settle_cache_key(cls.kernel)
        if hasattr(cls.__dict__.get("__call__"), "launch_spec"):  # kept apart: profilers may wrap __call__
            cls._build_launch_spec = cls.__dict__["__call__"].launch_spec
        cls._declare()
        if "name" in cls.__dict__:  # registered last: a class refused above takes no name
            key_class = getattr(cls, "CompileKey", None)
            if key_class is None or not dataclasses.is_dataclass(key_class):
                raise TypeError(f"{cls.__qualname__} must declare a CompileKey dataclass")
            if not key_class.__dataclass_params__.frozen:
                raise TypeError(f"{cls.__qualname__}.CompileKey must be frozen")
            registry.register(cls)

    @classmethod
    def _declare(cls) -> None:
        """Check and take in what the class declares (``TritonJitKernel``'s attributes)."""

    def __new__(cls):
        if cls._instance is None:
            instance = super().__new__(cls)
            instance._start()
            cls._instance = instance
        return cls._instance

    def _start(self) -> None:
        """Make what the one instance holds in this process."""

    def dispatch(self, **values: Any) -> CompileKeyT:
        """Map the values a call sees to the key of the binary it needs."""
        raise NotImplementedError

    def get_warmup_keys(self, **config: Any) -> list[CompileKeyT]:
        """Every key a deployment with this config launches."""
        raise NotImplementedError

    def launched_on(self, key: CompileKeyT, target: Any) -> bool:
        """Whether serving on ``target`` (a ``jitkern.targets.Target``) ever launches ``key``:
        warmup, its lock and ``load()`` leave the others out there (a PDL variant on a GPU
        without PDL, where the public function never picks it)."""
        return True

    def compile(self, key: BinaryKey | CompileKeyT) -> Any:
        """Compile (or load from the cache) the binary of ``key`` (a compile key alone: the
        binary of its stand-ins' layout)."""
        raise NotImplementedError

    def warmup(self, domain: LayoutDomain = LayoutDomain(), **config: Any) -> list[Any]:
        """Compile every binary of ``config`` inside ``domain``."""
        return [self.compile(key) for key in self.layouts.binary_keys(self.get_warmup_keys(**config), domain)]

    def describe(self, key: CompileKeyT) -> str:
        return f"{self.name}[{key_name(key)}]"


def _memoised(dispatch: Callable[..., Any]) -> Callable[..., Any]:
    """``dispatch`` behind an LRU cache (C-implemented; bounded, as sizes vary)."""
    cached = functools.lru_cache(maxsize=4096)(dispatch)

    @functools.wraps(dispatch)
    def memoised_dispatch(self, *args: Any, **values: Any) -> Any:
        return cached(self, *args, **values)

    memoised_dispatch.cache_clear = cached.cache_clear  # a tuning table taken: keys picked before are dropped
    return memoised_dispatch


class TritonJitKernel(JitKernel[CompileKeyT]):
    """A ``JitKernel`` owning one ``@triton.jit`` function, set as ``kernel``.

    Its ``CompileKey`` names what the kernel decides: constexprs, dtypes, launch options.
    How Triton specialises the runtime arguments (each tensor's 16-byte alignment, each
    integer's class) is derived by jitkern (``jitkern.layouts``): a binary is a
    ``BinaryKey``, the compile key and that layout. The class attributes below say what
    jitkern cannot see from the stand-ins.
    """

    kernel: ClassVar[Any]
    large_ints: ClassVar[bool] = False
    """Whether a runtime integer (a size, a stride) can reach 2**31. When False, the public
    function must refuse such launches: they would need i64 binaries."""
    size_limit: ClassVar[int] = 2**31
    """Every dimension of a tensor argument is below this; the public function refuses larger
    ones. With ``large_ints`` False, it keeps sizes and what ``__call__`` computes from them i32."""
    pinned_by_key: ClassVar[frozenset[str]] = frozenset()
    """Runtime integers whose value the compile key fixes (a capacity the key names): one
    class, the stand-ins'. Every other integer that is not a tensor's stride may take any value."""
    aligned_tensors: ClassVar[frozenset[str]] = frozenset()
    """Tensors the public function requires 16-byte aligned: a layout cannot list them as unaligned."""
    fixed_strides: ClassVar[frozenset[str]] = frozenset()
    """Strides the public function fixes, of a tensor (``"ring"``) or one dimension (``"mean.1"``):
    a layout cannot list them as strided."""
    check_config: ClassVar[Callable[..., None] | None] = None
    """A check of a deployment's whole config (``Config`` values that must agree), run by the
    declared ``get_warmup_keys`` before it enumerates; it raises ``ValueError`` naming the field."""
    tuning: ClassVar[TuningSpace | None] = None
    """The candidate configs of the key's ``tuned()`` fields, what selects among them and the
    default (``jitkern.kernel.tuning``); a ``triton.autotune``'s configs when ``kernel`` has one."""
    arguments: ClassVar[Arguments | None] = None
    """The public function's ``Arguments``: what it checks, warmup assumes. The strides they
    fix join ``fixed_strides``; a tensor ``__call__`` shares with them has its usual stand-in."""
    stand_ins: ClassVar[dict[str, Any]] = {}
    """The stand-in of ``__call__``'s arguments the key and ``arguments`` do not give: a
    ``Tensor`` per tensor, a value per plain argument; ``warmup_inputs`` is made of them."""
    binaries: BinaryTable
    """The binaries this process holds for the kernel, and its launch path."""
    _declaration: ClassVar[Declaration | None] = None
    _author_launcher: ClassVar[Callable[..., LaunchSpec] | None] = None  # the __call__ a declared key is read around
    _reads: ClassVar[Callable[..., tuple]]  # the values a declared key reads from a call

    @classmethod
    def _declare(cls) -> None:
        if cls.__module__ == __name__:
            return  # this base class itself
        for attribute in ("pinned_by_key", "aligned_tensors", "fixed_strides"):
            setattr(cls, attribute, _names(cls, attribute))
        if cls.arguments is not None and hasattr(cls, "_build_launch_spec"):
            cls.fixed_strides |= cls.arguments.fixed_strides(inspect.signature(cls._build_launch_spec).parameters)
        adopted, space = cls.__dict__.get("_adopted"), getattr(cls, "tuning", None)
        if adopted is not None and adopted.configs:
            adopt_autotuner(cls, adopted)
        elif space is not None and "CompileKey" in cls.__dict__:  # its own key, its own or inherited space
            add_tuned_fields(cls, space.configs)
        _adopt_declaration(cls)
        if adopted is not None and adopted.heuristics:
            check_heuristics(cls, adopted.heuristics, cls._declaration.constants_named() if cls._declaration else set())
        if "kernel" in cls.__dict__ and settings.interpreting() and calls_dot(cls.kernel.fn):
            cls.launch = refusing_bf16_dots(cls.launch)

    def _start(self) -> None:
        self.layouts = KernelLayouts(self)
        self.binaries = BinaryTable(self)
        self._constants: dict[tuple, dict[str, Any]] = {}  # (key, target) -> constants_for(key)

    def constants(self, key: CompileKeyT) -> dict[str, Any]:
        """The constexprs of ``kernel`` and Triton's launch options (``num_warps``, ...) for
        ``key``: those its fields declare (``constexpr=``, ``option=``), and what a kernel adds
        to ``super().constants(key)``. From the key alone, so that a key names one binary
        whatever the call: a direct launch passes them as they are and checks none."""
        constants = self._declaration.constants(key) if self._declaration else {}
        heuristics = self._adopted.heuristics if self._adopted else ()
        return heuristic_constants(self, heuristics, key, constants) if heuristics else constants

    @property
    def winners(self) -> Winners | None:
        """A tuned kernel's space and the winners this process took from a table (else None)."""
        return self._declaration.winners if self._declaration else None

    def warmup_inputs(self, key: CompileKeyT) -> dict[str, Any]:
        """Keyword arguments for ``__call__`` that launch with ``key``: any valid launch.

        Tensors are ``TritonWarmupTensor`` stand-ins; nothing is allocated. Their layout is
        the deployment's usual one (aligned, contiguous): jitkern varies it per layout.
        Made from the key's declared fields, ``arguments`` and ``stand_ins``; a kernel whose
        usual layout is not that (views of one projection, say) declares those stand-ins.
        """
        if self._declaration is None:
            raise NotImplementedError(f"{self.name}: declare its CompileKey fields and tensors, or write warmup_inputs")
        return self._declaration.stand_ins(key, self.stand_ins)

    def random_call(self, key: CompileKeyT, selectors: dict[str, Any], absent: tuple[str, ...], device: Any) -> dict:
        """Random arguments of the public function ``arguments`` declares, of ``key``'s and the
        selectors' sizes and dtypes, the optional tensors in ``absent`` None (``jitkern.kernel.calls``)."""
        if self._declaration is None or self.arguments is None:
            raise NoCallFor(f"{self.name}: random calls need declared CompileKey fields and arguments")
        values = {**{name: getattr(key, name) for name in self._declaration.fields}, **selectors}
        return random_call(self.arguments, *bound_values(self._declaration.reading, self.arguments, values), absent, device)

    def launch_spec(self, *args: Any, **inputs: Any) -> LaunchSpec[CompileKeyT]:
        """The spec ``__call__`` would launch for these inputs, without launching."""
        return type(self)._build_launch_spec(self, *args, **inputs)

    def key_for(self, **arguments: Any) -> CompileKeyT:
        """The key a call with ``arguments`` (by ``__call__``'s names) takes; those no field
        reads may be left out: what a public function needs before it has them (the tile
        whose BLOCK_SIZE_M its host-side sorting pads to)."""
        if self._declaration is None:
            raise NotImplementedError(f"{self.name}: key_for needs declared CompileKey fields")
        return self.dispatch(**self._declaration.read_from(arguments))

    def spec_for(self, key: CompileKeyT, /, *args: Any, **inputs: Any) -> LaunchSpec[CompileKeyT]:
        """The spec these inputs launch with ``key``'s tuned fields (a candidate, which no table
        need pick: stand-ins at warmup, a candidate timed by ``jitkern.tuning``), their key
        otherwise as ``launch_spec`` reads it. An untuned kernel's is ``launch_spec``'s. Runs
        no dispatch, so no table's winner nor default is picked."""
        declaration = self._declaration
        if declaration is None or declaration.winners is None:
            return self.launch_spec(*args, **inputs)
        read = dict(zip(declaration.read, type(self)._reads(self, *args, **inputs)))
        chosen = declaration.key_of({**read, **{name: getattr(key, name) for name in declaration.tuned}})
        spec = type(self)._author_launcher(self, chosen, *args, **inputs)
        spec.key = chosen
        return spec

    def launch(self, spec: LaunchSpec[CompileKeyT]) -> Callable[[dict, tuple], bool] | None:
        """Launch ``spec``: directly through a binary held when one fits (returning the
        direct launch that did), else through Triton (None)."""
        return self.binaries.launch(spec)

    def triton_kwargs(self, spec: LaunchSpec[CompileKeyT]) -> dict[str, Any]:
        """Everything ``kernel[grid](...)`` takes for ``spec``: its arguments and its key's constants."""
        constants = self.constants_for(spec.key)
        misplaced = spec.kwargs.keys() & (constants.keys() | self._constexpr_names)
        if misplaced:
            raise TypeError(f"{self.name}: the LaunchSpec passes {sorted(misplaced)}; constexprs and launch "
                            f"options come from constants(key)")
        unknown = spec.kwargs.keys() - self._runtime_names
        if unknown:  # Triton would take a launch option for its own, and the direct launch ignores the rest
            raise TypeError(f"{self.name}: the LaunchSpec passes {sorted(unknown)}, not runtime parameters of "
                            f"{self.kernel.__name__} (those are {', '.join(self._runtime_names)})")
        return {**spec.kwargs, **constants}

    def constants_for(self, key: CompileKeyT) -> dict[str, Any]:
        """``constants(key)`` for the target compiled for now (``jitkern.targets.current``:
        a kernel may choose its code paths by target), with Triton's launch options fitted
        to that target; kept per key and target."""
        target = targets.current()
        constants = self._constants.get((key, target))
        if constants is None:
            constants, _notes = targets.fit_launch_options(self.constants(key), target)
            runtime = constants.keys() & (set(self.kernel.arg_names) - self._constexpr_names)
            if runtime:
                raise TypeError(f"{self.name}: constants({key_name(key)}) gives {sorted(runtime)}, which are not "
                                f"constexprs: the LaunchSpec passes them")
            self._constants[(key, target)] = constants
        return constants

    @functools.cached_property
    def _constexpr_names(self) -> frozenset[str]:
        return frozenset(self.kernel.arg_names) - frozenset(self._runtime_names)

    @functools.cached_property
    def _runtime_names(self) -> tuple[str, ...]:
        """The parameters of ``kernel`` a ``LaunchSpec`` passes, in their order: those the
        layouts are derived for (``runtime_params``), so the two cannot disagree."""
        return tuple(param.name for param in runtime_params(self.kernel))

    def compile(self, key: BinaryKey | CompileKeyT) -> Any:
        """Compile the binary of ``key`` from stand-ins of its layout; nothing runs. None when
        interpreting. ``WarmupMismatch`` if Triton would specialise them otherwise."""
        binary_key = key if isinstance(key, BinaryKey) else BinaryKey(key)
        spec = LaunchSpec((1,), self.layouts.stand_in_kwargs(binary_key), binary_key.key)
        built = self.layouts.binary_key(spec)
        if parse_layout(built.layout) != parse_layout(binary_key.layout):
            raise WarmupMismatch(f"{self.name}: stand-ins of layout {binary_key.layout!r} specialise as "
                                 f"{built.layout!r}")
        kwargs = self.triton_kwargs(spec)
        if settings.interpreting():
            return None
        active_launch.kernel, active_launch.spec = self, spec
        try:
            binary = self.kernel.warmup(grid=(1,), **kwargs)
        finally:
            active_launch.kernel = active_launch.spec = None
        if not targets.compiling_only():
            self.binaries.take(spec, binary, binary_key.layout)
        return binary


def _adopt_declaration(cls: type) -> None:
    """Make, for a class whose ``CompileKey`` declares its fields, what they give: its
    ``dispatch`` and ``get_warmup_keys`` unless it writes them, and its ``__call__`` around
    a launcher that takes ``compile_key``."""
    writes_dispatch = "dispatch" in cls.__dict__
    if "CompileKey" not in cls.__dict__ and "__call__" not in cls.__dict__ and not writes_dispatch:
        return
    build = getattr(cls.__dict__.get("__call__"), "launch_spec", None)
    if build is None and writes_dispatch:  # a subclass keying otherwise: the launcher made anew around its dispatch
        build = getattr(cls, "_author_launcher", None)
    key_class = getattr(cls, "CompileKey", None)
    declared = key_class is not None and any(METADATA in field.metadata for field in dataclasses.fields(key_class))
    takes_key = build is not None and list(inspect.signature(build).parameters)[1:2] == ["compile_key"]
    if takes_key and not declared:
        raise DeclarationError(f"{cls.__qualname__}.__call__ takes compile_key, but its CompileKey declares no "
                               "field (dtype_of, size_of, argument, computed, derived, fixed, tuned)")
    if not declared:
        return
    declaration = Declaration(cls, key_class, build or cls._build_launch_spec, getattr(cls, "tuning", None))
    declaration.check(cls, writes_warmup_keys=cls.get_warmup_keys is not JitKernel.get_warmup_keys,
                      writes_warmup_inputs=cls.warmup_inputs is not TritonJitKernel.warmup_inputs)
    if declaration.winners is not None and (not takes_key or writes_dispatch):
        raise DeclarationError(f"{cls.__qualname__}: a tuned kernel's __call__ takes compile_key and it writes no "
                               "dispatch: the key's tuned fields are its bucket's winner")
    cls._declaration = declaration
    if "dispatch" not in cls.__dict__:
        cls.dispatch = _memoised(lambda self, **fields: declaration.key_of(fields))
    if cls.get_warmup_keys is JitKernel.get_warmup_keys:
        cls.get_warmup_keys = declaration.get_warmup_keys()
    if takes_key:
        source, namespace = declaration.launcher_source(writes_dispatch)
        namespace.update(MAKE=declaration.make, BUILD=build, RECORDING=recording, ACTIVE=active_launch)
        exec(compile(source, f"<launcher of {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 - our own source
        for name in ("__call__", "launch_spec", "reads"):
            functools.update_wrapper(namespace[name], build)
        cls.__call__ = namespace["__call__"]
        cls._build_launch_spec, cls._reads = namespace["launch_spec"], namespace["reads"]
        cls._author_launcher = build


def _names(cls: type, attribute: str) -> frozenset[str]:
    """A class attribute naming arguments, as a frozenset (any iterable of names is taken);
    each must be an argument of ``__call__`` (a tensor, ``ring`` or one of its
    dimensions, ``mean.1``) or, for ``pinned_by_key``, a runtime parameter of ``kernel``."""
    value = getattr(cls, attribute)
    at = f"{cls.__qualname__}.{attribute}"
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(n, str) for n in value):
        raise DeclarationError(f"{at} = {value!r}: expected names (a set, list or tuple of strings)")
    names = frozenset(value)
    if attribute in cls.__dict__:
        build = getattr(cls.__dict__.get("__call__"), "launch_spec", None) or getattr(cls, "_build_launch_spec", None)
        kernel = getattr(cls, "kernel", None)
        if attribute == "pinned_by_key":
            known = {param.name for param in runtime_params(kernel)} if kernel is not None else None
        else:
            known = set(inspect.signature(build).parameters) - {"self", "compile_key"} if build else None
        for name in sorted(names):
            tensor, _, dim = name.partition(".")
            if known is not None and (tensor if attribute != "pinned_by_key" else name) not in known:
                what = "a runtime parameter of the kernel" if attribute == "pinned_by_key" else "an argument of __call__"
                raise DeclarationError(f"{at}: {name!r} is not {what} ({', '.join(sorted(known))})")
            if dim and (attribute != "fixed_strides" or not dim.isdigit()):
                raise DeclarationError(f"{at}: {name!r}: only fixed_strides names a dimension, as TENSOR.DIM")
    return names
