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
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generic, Iterable, TypeVar

from jitkern import registry, settings, targets
from jitkern.call_plan import forget_plans, _recording
from jitkern.direct_launch import bind_direct_launch, bind_layout_picker, build_direct_launch, layout_picker
from jitkern.settings import interpreting
from jitkern.settle import settle_cache_key
from jitkern.specialisation import (
    LARGE,
    BinaryKey,
    Layout,
    argument_domains,
    enumerate_layouts,
    explain_miss,
    key_fields,  # noqa: F401 (named from here by the rest of jitkern)
    key_name,
    layout_text,
    name_stand_ins,
    origins,
    parse_layout,
    runtime_params,
    specialisation,
    specialising_backend,
    stand_ins_for,
)
from jitkern.warmup_inputs import TritonWarmupTensor

CompileKeyT = TypeVar("CompileKeyT")
MAX_LAYOUTS = 1024  # binaries of one compile key a layout domain may give


class WarmupMismatch(RuntimeError):
    """``warmup_inputs(key)`` produced a launch whose key is not ``key``."""


class TooManyLayouts(ValueError):
    """A layout domain would give more binaries of one key than ``MAX_LAYOUTS``."""


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
    """The kernel and spec being launched, so compile hooks can name its binary; and whether
    launches are rehearsed (``jitkern.rehearsal``), which must never take Triton's path."""

    kernel: "TritonJitKernel | None" = None
    spec: "LaunchSpec | None" = None
    rehearsing: bool = False


active_launch = _ActiveLaunch()


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
            _check_jit_function(cls)
            settle_cache_key(cls.__dict__["kernel"])
        if hasattr(cls.__dict__.get("__call__"), "launch_spec"):  # kept apart: profilers may wrap __call__
            cls._build_launch_spec = cls.__dict__["__call__"].launch_spec

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._binaries = {}  # compile key -> {layout: DirectLaunch or None} (TritonJitKernel)
            cls._instance._prepared = set()  # ids of the binaries in _binaries (TritonJitKernel)
            cls._instance._pickers = {}  # compile key -> layout_picker of its binaries, when several
            cls._instance._launches_by_key_id = {}  # id(key) -> (key, its direct launch) (TritonJitKernel)
            cls._instance._last_launch = _UNKNOWN  # (the key launched last, its direct launch) (TritonJitKernel)
            cls._instance._constants = {}  # (compile key, target) -> constants(key), checked (TritonJitKernel)
            cls._instance._stand_ins = {}  # (compile key, backend) -> stand-in kwargs, their specialisation
        return cls._instance

    def dispatch(self, **values: Any) -> CompileKeyT:
        """Map the values a call sees to the key of the binary it needs."""
        raise NotImplementedError

    def get_warmup_keys(self, **config: Any) -> list[CompileKeyT]:
        """Every key a deployment with this config launches."""
        raise NotImplementedError

    def binary_keys(self, keys: list[CompileKeyT], layout: Layout = Layout()) -> list[BinaryKey]:
        """Every binary the ``keys`` need for launches inside ``layout``."""
        return [BinaryKey(key) for key in keys]

    def tensor_dims(self, key: CompileKeyT) -> dict[str, int]:
        """The tensors a layout may name (``__call__`` arguments), with their dimensions."""
        return {}

    def check_layout(self, binary: BinaryKey, domain: Layout = Layout(), large_storage: bool = False) -> BinaryKey:
        """``binary`` with its layout in canonical form; ValueError if no launch inside
        ``domain`` has it (a pointer to storage over 2 GiB only where ``large_storage``)."""
        if binary.layout:
            raise ValueError(f"{self.name} has no runtime arguments to lay out")
        return binary

    def compile(self, key: BinaryKey | CompileKeyT) -> Any:
        """Compile (or load from the cache) the binary of ``key`` (a compile key alone: the
        binary of its stand-ins' layout)."""
        raise NotImplementedError

    def warmup(self, layout: Layout = Layout(), **config: Any) -> list[Any]:
        """Compile every binary of ``config`` inside ``layout``."""
        return [self.compile(key) for key in self.binary_keys(self.get_warmup_keys(**config), layout)]

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
        launched = self.launch(spec)
        if _recording.launches is not None:  # a public call records its launches (jitkern.call_plan)
            _recording.launches.append((self, spec, launched))
        return spec.result

    launch.launch_spec = build
    return launch


def _no_direct_launch(kwargs: dict, grid: tuple) -> bool:
    return False


_UNKNOWN = (None, _no_direct_launch)


class TritonJitKernel(JitKernel[CompileKeyT]):
    """A ``JitKernel`` owning one ``@triton.jit`` function, set as ``kernel``.

    Its ``CompileKey`` names what the kernel decides: constexprs, dtypes, launch options.
    How Triton specialises the runtime arguments (each tensor's 16-byte alignment, each
    integer's class) is derived by jitkern (``jitkern.specialisation``): a binary is a
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

    def constants(self, key: CompileKeyT) -> dict[str, Any]:
        """The constexpr arguments of ``kernel`` and Triton's launch options (``num_warps``,
        ...) for ``key``.

        They come from the key alone, so that a key names one binary whatever the call:
        a direct launch passes the key's constants as they are and checks none of them.
        """
        return {}

    def warmup_inputs(self, key: CompileKeyT) -> dict[str, Any]:
        """Keyword arguments for ``__call__`` that launch with ``key``: any valid launch.

        Tensors are ``TritonWarmupTensor`` stand-ins; nothing is allocated. Their layout is
        the deployment's usual one (aligned, contiguous): jitkern varies it per layout.
        """
        raise NotImplementedError

    def launch_spec(self, *args: Any, **inputs: Any) -> LaunchSpec[CompileKeyT]:
        """The spec ``__call__`` would launch for these inputs, without launching."""
        return type(self)._build_launch_spec(self, *args, **inputs)

    def triton_kwargs(self, spec: LaunchSpec[CompileKeyT]) -> dict[str, Any]:
        """Everything ``kernel[grid](...)`` takes for ``spec``: its arguments and its key's constants."""
        constants = self._key_constants(spec.key)
        misplaced = spec.kwargs.keys() & (constants.keys() | self._constexpr_names)
        if misplaced:
            raise TypeError(f"{self.name}: the LaunchSpec passes {sorted(misplaced)}; constexprs and launch "
                            f"options come from constants(key)")
        unknown = spec.kwargs.keys() - self._runtime_names
        if unknown:  # Triton would take a launch option for its own, and the direct launch ignores the rest
            raise TypeError(f"{self.name}: the LaunchSpec passes {sorted(unknown)}, not runtime parameters of "
                            f"{self.kernel.__name__} (those are {', '.join(self._runtime_names)})")
        return {**spec.kwargs, **constants}

    # --- layouts ------------------------------------------------------------------------

    def binary_keys(self, keys: list[CompileKeyT], layout: Layout = Layout()) -> list[BinaryKey]:
        """Every binary the ``keys`` need for launches inside ``layout``, as Triton specialises them."""
        binaries = []
        for key in keys:
            kwargs, base = self.stand_ins(key)
            domains = argument_domains(self, kwargs, base, layout)
            if math.prod(len(domain) for domain in domains.values()) > MAX_LAYOUTS:
                raise TooManyLayouts(f"{self.name}: this layout domain gives more than {MAX_LAYOUTS} binaries of one "
                                     "key; declare fewer strided or unaligned tensors, or mark arguments "
                                     "do_not_specialize")
            binaries += [BinaryKey(key, text) for text in enumerate_layouts(domains, base)]
        return list(dict.fromkeys(binaries))

    def tensor_dims(self, key: CompileKeyT) -> dict[str, int]:
        kwargs, _ = self.stand_ins(key)
        return {value.name: value.ndim for value in kwargs.values()
                if isinstance(value, TritonWarmupTensor) and value.name}

    def check_layout(self, binary: BinaryKey, domain: Layout = Layout(), large_storage: bool = False) -> BinaryKey:
        kwargs, base = self.stand_ins(binary.key)
        layout = parse_layout(binary.layout)
        unknown = sorted(layout.keys() - base.keys())
        if unknown:
            raise ValueError(f"{unknown} not among the runtime arguments of {self.name}: {', '.join(base)}")
        domains = argument_domains(self, kwargs, base, domain)
        for name, text in layout.items():
            possible = domains[name]
            if large_storage and possible[0].startswith("*"):
                possible += tuple(pointer + LARGE for pointer in possible)
            if text not in possible:  # Triton never specialises a launch so, or no launch inside domain is
                argument = origins(kwargs).describe(name)
                large = " (storage over 2 GiB: for targets that specialise on it, AMD's, alone)" \
                    if text.startswith("*") and text.endswith(LARGE) and not large_storage else ""
                raise ValueError(f"{name}{f' ({argument})' if argument != name else ''}: no launch of this key "
                                 f"specialises as {text!r}{large}, only as {' or '.join(map(repr, possible))}")
        canonical = {name: layout[name] for name in base if name in layout and layout[name] != base[name]}
        return BinaryKey(binary.key, layout_text(canonical))

    def binary_key(self, spec: LaunchSpec[CompileKeyT]) -> BinaryKey:
        """The binary a launch needs: its key, and how its arguments differ from the key's stand-ins."""
        _, base = self.stand_ins(spec.key)
        launched = specialisation(self.kernel, spec.kwargs)
        return BinaryKey(spec.key, layout_text({n: text for n, text in launched.items() if text != base.get(n)}))

    def stand_ins(self, key: CompileKeyT) -> tuple[dict[str, Any], dict[str, str]]:
        """The runtime arguments of ``warmup_inputs(key)`` (its tensors named after their
        ``__call__`` arguments) and Triton's specialisation of them. ``WarmupMismatch``
        when they dispatch to another key."""
        memo = (key, specialising_backend())
        found = self._stand_ins.get(memo)
        if found is None:
            spec = self.launch_spec(**name_stand_ins(self.warmup_inputs(key)))
            if spec.key != key:
                raise WarmupMismatch(f"{self.name}: warmup_inputs({key_name(key)}) dispatches to {key_name(spec.key)}")
            found = self._stand_ins[memo] = (spec.kwargs, specialisation(self.kernel, spec.kwargs))
        return found

    def warmed_layouts(self, key: CompileKeyT) -> list[str]:
        """The layouts of ``key`` whose binaries this process holds."""
        return list(self._binaries.get(key, ()))

    def warmed_keys(self) -> list[CompileKeyT]:
        """The compile keys this process holds binaries of."""
        return list(self._binaries)

    def explain_miss(self, binary: BinaryKey, warmed_layouts: list[str]) -> str:
        """Why ``binary`` is none of the ``warmed_layouts`` of its key, argument by argument."""
        kwargs, base = self.stand_ins(binary.key)
        full = lambda layout: {**base, **parse_layout(layout)}  # noqa: E731
        return explain_miss(full(binary.layout), [full(layout) for layout in warmed_layouts], origins(kwargs))

    @staticmethod
    def explain_unwarmed_key(key: Any, warmed_keys: Iterable[Any]) -> str:
        """Why no binary of compile key ``key`` was warmed, in the fields that tell it from
        the nearest of ``warmed_keys`` (the fewest differ), so the manifest's config to
        change is named, not left to compare key by key."""
        fields = key_fields(key)
        others = [key_fields(other) for other in warmed_keys]
        if not others:
            return "its compile key was not warmed (no key of this kernel was)"
        differing = lambda other: [name for name in fields if other.get(name) != fields[name]]  # noqa: E731
        nearest = min(others, key=lambda other: len(differing(other)))
        parts = ", ".join(f"{name} {fields[name]!r} (warmed: {nearest.get(name)!r})" for name in differing(nearest))
        return f"its compile key was not warmed; the nearest warmed key differs in {parts}"

    # --- launching ----------------------------------------------------------------------

    def launch(self, spec: LaunchSpec[CompileKeyT]) -> Callable[[dict, tuple], bool] | None:
        """Launch through a binary of the key directly when one fits (returning the direct
        launch that did), else through Triton (None).

        ``dispatch`` is memoised, so a key object usually repeats: the key launched last
        and its direct launch are one tuple (read whole, so threads never pair a key with
        another's launch); other keys' launches are found by the key's id (an entry holds
        its key, checked to be this one), and by its hash, which a frozen dataclass
        computes field by field, only otherwise. A key with binaries of several layouts
        remembers the last one used (``_launch_another_layout``); each checks its own layout.
        """
        key = spec.key
        last_key, launch = self._last_launch
        if last_key is not key:
            launch = self._launch_of_key(key)
        if launch(spec.kwargs, spec.grid):
            return launch
        launched = self._launch_another_layout(spec)
        if launched is None:
            self._launch_through_triton(spec)
        return launched

    def _launch_of_key(self, key: CompileKeyT) -> Callable[[dict, tuple], bool]:
        """The key's direct launch, by its id or else by its hash; remembered as the last."""
        known_key, launch = self._launches_by_key_id.get(id(key), _UNKNOWN)
        if known_key is not key:
            launch = self._direct_launch_of(key)
        if launch is not _no_direct_launch:
            self._last_launch = (key, launch)
        return launch

    def _launch_another_layout(self, spec: LaunchSpec[CompileKeyT]) -> Callable[[dict, tuple], bool] | None:
        """With binaries of several layouts, the key's remembered launch is the last one
        used: a launch of another layout is picked by its argument classes, launched, and
        remembered for the next launches of the key (so a steady layout costs nothing).
        Returns the launch that launched, or None."""
        pick = self._pickers.get(spec.key)
        launch = pick(spec.kwargs) if pick is not None else None
        if launch is None or not launch(spec.kwargs, spec.grid):
            return None
        self._launches_by_key_id[id(spec.key)] = self._last_launch = (spec.key, launch)
        return launch

    def direct_launch(self, spec: LaunchSpec[CompileKeyT], launched: Callable | None = None) -> Any:
        """The ``DirectLaunch`` of the binary ``spec`` needs, if this process prepared one; with
        ``launched`` (what ``launch(spec)`` returned), the one that launched, found without
        Triton's specialiser (whose first use imports Gluon, 0.1 s, in a process ``load()``ed
        from its memo)."""
        if launched is None:
            return self._binaries.get(spec.key, {}).get(self.binary_key(spec).layout)
        return next((direct for direct in self._binaries.get(spec.key, {}).values()
                     if direct is not None and direct.launch is launched), None)

    def _launch_through_triton(self, spec: LaunchSpec[CompileKeyT]) -> None:
        if active_launch.rehearsing:
            raise LookupError(f"{self.name}: no binary held takes this launch, and a rehearsal never compiles")
        kwargs = self.triton_kwargs(spec)
        active_launch.kernel, active_launch.spec = self, spec
        try:
            binary = self.kernel.run(grid=spec.grid, warmup=False, **kwargs)
        finally:
            active_launch.kernel = active_launch.spec = None
        if binary is not None and id(binary) not in self._prepared:
            self._prepare_direct_launch(spec, binary, self.binary_key(spec).layout)

    def forget_binaries(self) -> None:
        """Drop every binary this process holds for the kernel (tests start clean)."""
        self.kernel.device_caches.clear()
        self._binaries.clear()
        self._prepared.clear()
        self._pickers.clear()
        self._forget_launches()
        forget_plans()

    def prepare_launches(self) -> None:
        """Prepare, for every key whose binaries this process holds, what its first launch
        would: its direct launch and, with several layouts, its layout picker (``load``
        calls it, so that the first request costs no more than the next)."""
        for key, binaries in self._binaries.items():
            self._launch_of_layouts(key, binaries)

    def _key_constants(self, key: CompileKeyT) -> dict[str, Any]:
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

    def _direct_launch_of(self, key: CompileKeyT) -> Callable[[dict, tuple], bool]:
        """The key's direct launch, remembered by the key's id once the key has a binary."""
        binaries = self._binaries.get(key)
        if binaries is None:
            return _no_direct_launch  # not compiled yet: Triton's path, then ask again
        launch = self._launch_of_layouts(key, binaries)
        if len(self._launches_by_key_id) >= 4096:  # keys dispatch's cache dropped would pile up
            self._launches_by_key_id.clear()
        self._launches_by_key_id[id(key)] = (key, launch)
        return launch

    def _launch_of_layouts(self, key: CompileKeyT, binaries: dict[str, Any]) -> Callable[[dict, tuple], bool]:
        """The direct launch of a key's first binary; with binaries of several layouts, also
        the picker of the others (``layout_picker``)."""
        ready = {layout: direct for layout, direct in binaries.items() if direct is not None}
        if not ready:
            return _no_direct_launch
        if len(ready) > 1 and key not in self._pickers:  # a new binary drops the key's picker
            kwargs, _ = self.stand_ins(key)
            self._pickers[key] = layout_picker(self.kernel, [
                (stand_ins_for(self.kernel, kwargs, parse_layout(layout)), direct.launch)
                for layout, direct in ready.items()])
        return next(iter(ready.values())).launch

    def _prepare_direct_launch(self, spec: LaunchSpec[CompileKeyT], binary: Any, layout: str) -> None:
        direct = None
        if settings.current().direct_launch and not interpreting():  # else prepared on a later launch
            direct = build_direct_launch(self.kernel, spec, self._key_constants(spec.key), binary)
            self._prepared.add(id(binary))
        self._hold(spec.key, layout, direct)

    def _hold(self, key: CompileKeyT, layout: str, direct: Any) -> None:
        self._binaries.setdefault(key, {})[layout] = direct
        self._pickers.pop(key, None)
        self._forget_launches()  # the key's launches changed

    def _forget_launches(self) -> None:
        self._launches_by_key_id.clear()
        self._last_launch = _UNKNOWN

    def compile(self, key: BinaryKey | CompileKeyT) -> Any:
        """Compile the binary of ``key`` from stand-ins of its layout; nothing runs. None when
        interpreting. ``WarmupMismatch`` if Triton would specialise them otherwise."""
        binary_key = key if isinstance(key, BinaryKey) else BinaryKey(key)
        spec = self._stand_in_spec(binary_key)
        built = self.binary_key(spec)
        if parse_layout(built.layout) != parse_layout(binary_key.layout):
            raise WarmupMismatch(f"{self.name}: stand-ins of layout {binary_key.layout!r} specialise as "
                                 f"{built.layout!r}")
        kwargs = self.triton_kwargs(spec)
        if interpreting():
            return None
        active_launch.kernel, active_launch.spec = self, spec
        try:
            binary = self.kernel.warmup(grid=(1,), **kwargs)
        finally:
            active_launch.kernel = active_launch.spec = None
        if not _compiling_only():
            self._prepare_direct_launch(spec, binary, binary_key.layout)
        return binary

    def adopt(self, binary_key: BinaryKey, binary: Any, recipe: dict[str, Any]) -> None:
        """Take ``binary``, Triton's binary of ``binary_key`` found without Triton's front end,
        with the recipe of its direct launch (``jitkern.load_memo``), as ``compile`` would
        have taken it; a recipe this process cannot bind is made anew."""
        direct = bind_direct_launch(self.kernel, binary, recipe, self._key_constants(binary_key.key))
        if direct is None:
            self._prepare_direct_launch(self._stand_in_spec(binary_key), binary, binary_key.layout)
            return
        self._prepared.add(id(binary))
        self._hold(binary_key.key, binary_key.layout, direct)

    def adopt_picker(self, key: CompileKeyT, recipe: dict[str, Any], layouts: list[str]) -> None:
        """Take the layout picker of ``key``'s binaries from its recipe (``jitkern.load_memo``):
        ``layouts`` in the recipe's order, each adopted already."""
        binaries = self._binaries.get(key, {})
        if list(binaries) == layouts and all(binaries.values()):
            self._pickers[key] = bind_layout_picker(recipe, [binaries[layout].launch for layout in layouts])

    def _stand_in_spec(self, binary_key: BinaryKey) -> LaunchSpec[CompileKeyT]:
        kwargs, _ = self.stand_ins(binary_key.key)
        try:
            return LaunchSpec((1,), stand_ins_for(self.kernel, kwargs, parse_layout(binary_key.layout)), binary_key.key)
        except ValueError as error:
            raise WarmupMismatch(f"{self.name}: {error}") from None


def _check_jit_function(cls: type) -> None:
    """``kernel`` is a ``@triton.jit`` function itself. Wrapped in ``@triton.heuristics`` or
    ``@triton.autotune``, it would choose constexprs per launch, which jitkern takes from
    ``constants(key)`` (so a key names one binary); refused here in one line, not with an
    AttributeError from deep inside the first compile or launch."""
    from triton.runtime.jit import JITFunction

    kernel = cls.__dict__["kernel"]
    if isinstance(kernel, JITFunction):
        return
    if interpreting():  # imported only then: 10 ms of a serving process's start otherwise
        from triton.runtime.interpreter import InterpretedFunction

        if isinstance(kernel, InterpretedFunction):
            return
    raise TypeError(f"{cls.__qualname__}.kernel must be a @triton.jit function, got {type(kernel).__name__}; "
                    "choose constexprs and launch options in constants(key), not with triton.heuristics or "
                    "triton.autotune")


def _compiling_only() -> bool:
    from triton.runtime.driver import driver

    from jitkern.targets import CompileOnlyDriver

    return type(driver.active) is CompileOnlyDriver
