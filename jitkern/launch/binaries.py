"""The binaries a process holds for one kernel, and its launch path.

Every ``TritonJitKernel`` has one ``BinaryTable`` (``kernel.binaries``): for each compile
key the binaries this process holds, one per layout, each with its direct launch
(``jitkern.launch.direct``) and, for a key of several layouts, a layout picker
(``jitkern.launch.picker``). ``launch(spec)`` takes the direct launch of a binary that
fits and otherwise Triton's own path, where the guard sees any compile. Warmup and
``load()`` fill the table (``take``); the load memo fills it without Triton's front end
(``adopt``, ``adopt_picker``) and reads back what it holds (``direct_of``, ``pickers``).
"""

from __future__ import annotations

from typing import Any, Callable

from jitkern import settings, targets
from jitkern.launch.direct import DirectLaunch, bind_direct_launch, build_direct_launch
from jitkern.launch.picker import bind_layout_picker, layout_picker
from jitkern.launch.plans import forget_plans
from jitkern.launch.spec import LaunchSpec, active_launch
from jitkern.layouts.binary_key import BinaryKey
from jitkern.layouts.specialisation import parse_layout, stand_ins_for

Launch = Callable[[dict, tuple], bool]
"""A direct launch: ``launch(kwargs, grid)``, False (launching nothing) for arguments its binary cannot take."""


def _no_direct_launch(kwargs: dict, grid: tuple) -> bool:
    return False


_UNKNOWN = (None, _no_direct_launch)
MAX_REMEMBERED_KEYS = 4096  # keys dispatch's cache dropped would pile up


class BinaryTable:
    """What this process holds for one kernel (see the module docstring). ``kernel`` is the
    ``TritonJitKernel``: the table asks it for its ``@triton.jit`` function, its constants
    per key (``constants_for``), Triton's arguments of a spec (``triton_kwargs``) and its
    layouts (``kernel.layouts``)."""

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self._binaries: dict[Any, dict[str, DirectLaunch | None]] = {}  # key -> {layout: its direct launch}
        self._prepared: set[int] = set()  # ids of the binaries in _binaries
        self._pickers: dict[Any, Callable[[dict], Launch | None]] = {}  # key -> picker of its layouts, when several
        self._by_key_id: dict[int, tuple[Any, Launch]] = {}  # id(key) -> (key, its direct launch)
        self._last: tuple[Any, Launch] = _UNKNOWN  # (the key launched last, its direct launch)

    # --- launching ----------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> Launch | None:
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
        last_key, launch = self._last
        if last_key is not key:
            launch = self._launch_of_key(key)
        if launch(spec.kwargs, spec.grid):
            return launch
        launched = self._launch_another_layout(spec)
        if launched is None:
            self._launch_through_triton(spec)
        return launched

    def _launch_of_key(self, key: Any) -> Launch:
        """The key's direct launch, by its id or else by its hash; remembered as the last."""
        known_key, launch = self._by_key_id.get(id(key), _UNKNOWN)
        if known_key is not key:
            launch = self._direct_launch_of(key)
        if launch is not _no_direct_launch:
            self._last = (key, launch)
        return launch

    def _direct_launch_of(self, key: Any) -> Launch:
        """The key's direct launch, remembered by the key's id once the key has a binary."""
        binaries = self._binaries.get(key)
        if binaries is None:
            return _no_direct_launch  # not compiled yet: Triton's path, then ask again
        launch = self._launch_of_layouts(key, binaries)
        if len(self._by_key_id) >= MAX_REMEMBERED_KEYS:
            self._by_key_id.clear()
        self._by_key_id[id(key)] = (key, launch)
        return launch

    def _launch_another_layout(self, spec: LaunchSpec) -> Launch | None:
        """With binaries of several layouts, the key's remembered launch is the last one
        used: a launch of another layout is picked by its argument classes, launched, and
        remembered for the next launches of the key (so a steady layout costs nothing).
        Returns the launch that launched, or None."""
        pick = self._pickers.get(spec.key)
        launch = pick(spec.kwargs) if pick is not None else None
        if launch is None or not launch(spec.kwargs, spec.grid):
            return None
        self._by_key_id[id(spec.key)] = self._last = (spec.key, launch)
        return launch

    def _launch_through_triton(self, spec: LaunchSpec) -> None:
        kernel = self.kernel
        if active_launch.rehearsing:
            raise LookupError(f"{kernel.name}: no binary held takes this launch, and a rehearsal never compiles")
        kwargs = kernel.triton_kwargs(spec)
        active_launch.kernel, active_launch.spec = kernel, spec
        try:
            binary = kernel.kernel.run(grid=spec.grid, warmup=False, **kwargs)
        except RuntimeError as error:  # Triton's "0 active drivers" on a machine with no GPU, from deep inside
            if targets.current() is targets.NO_TARGET:
                raise targets.NoGPU(f"{kernel.name}: a launch needs a GPU, and there is none here (on the CPU, "
                                    "Triton's interpreter runs kernels: TRITON_INTERPRET=1 before importing triton)"
                                    ) from error
            raise
        finally:
            active_launch.kernel = active_launch.spec = None
        if binary is not None and id(binary) not in self._prepared:
            self.take(spec, binary, kernel.layouts.binary_key(spec).layout)

    def _launch_of_layouts(self, key: Any, binaries: dict[str, DirectLaunch | None]) -> Launch:
        """The direct launch of a key's first binary; with binaries of several layouts, also
        the picker of the others (``layout_picker``)."""
        ready = {layout: direct for layout, direct in binaries.items() if direct is not None}
        if not ready:
            return _no_direct_launch
        if len(ready) > 1 and key not in self._pickers:  # a new binary drops the key's picker
            kwargs, _ = self.kernel.layouts.stand_ins(key)
            self._pickers[key] = layout_picker(self.kernel.kernel, [
                (stand_ins_for(self.kernel.kernel, kwargs, parse_layout(layout)), direct.launch)
                for layout, direct in ready.items()])
        return next(iter(ready.values())).launch

    def direct_launch(self, spec: LaunchSpec, launched: Launch | None = None) -> DirectLaunch | None:
        """The ``DirectLaunch`` of the binary ``spec`` needs, if this process prepared one; with
        ``launched`` (what ``launch(spec)`` returned), the one that launched, found without
        Triton's specialiser (whose first use imports Gluon, 0.1 s, in a process ``load()``ed
        from its memo)."""
        if launched is None:
            return self._binaries.get(spec.key, {}).get(self.kernel.layouts.binary_key(spec).layout)
        return next((direct for direct in self._binaries.get(spec.key, {}).values()
                     if direct is not None and direct.launch is launched), None)

    # --- filling the table --------------------------------------------------------------

    def take(self, spec: LaunchSpec, binary: Any, layout: str) -> None:
        """Hold ``binary``, Triton's binary of ``spec``'s key and ``layout``, with its direct
        launch built for ``spec``'s arguments (when direct launches are on and kernels are
        compiled; else it is built on a later launch)."""
        direct = None
        if settings.current().direct_launch and not settings.interpreting():
            direct = build_direct_launch(self.kernel.kernel, spec, self.kernel.constants_for(spec.key), binary)
            self._prepared.add(id(binary))
        self._hold(spec.key, layout, direct)

    def adopt(self, binary_key: BinaryKey, binary: Any, recipe: dict[str, Any]) -> None:
        """Hold ``binary``, Triton's binary of ``binary_key`` found without Triton's front end,
        with the recipe of its direct launch (``jitkern.serve.memo``), as ``take`` would have;
        a recipe this process cannot bind is made anew."""
        constants = self.kernel.constants_for(binary_key.key)
        direct = bind_direct_launch(self.kernel.kernel, binary, recipe, constants)
        if direct is None:
            spec = LaunchSpec((1,), self.kernel.layouts.stand_in_kwargs(binary_key), binary_key.key)
            self.take(spec, binary, binary_key.layout)
            return
        self._prepared.add(id(binary))
        self._hold(binary_key.key, binary_key.layout, direct)

    def adopt_picker(self, key: Any, recipe: dict[str, Any], layouts: list[str]) -> None:
        """Take the layout picker of ``key``'s binaries from its recipe (``jitkern.serve.memo``):
        ``layouts`` in the recipe's order, each adopted already."""
        binaries = self._binaries.get(key, {})
        if list(binaries) == layouts and all(binaries.values()):
            self._pickers[key] = bind_layout_picker(recipe, [binaries[layout].launch for layout in layouts])

    def _hold(self, key: Any, layout: str, direct: DirectLaunch | None) -> None:
        self._binaries.setdefault(key, {})[layout] = direct
        self._pickers.pop(key, None)
        self._forget_launches()  # the key's launches changed

    def _forget_launches(self) -> None:
        self._by_key_id.clear()
        self._last = _UNKNOWN

    def prepare(self) -> None:
        """Prepare, for every key held, what its first launch would: its direct launch and,
        with several layouts, its layout picker (``load()`` calls it, so that the first
        request costs no more than the next)."""
        for key, binaries in self._binaries.items():
            self._launch_of_layouts(key, binaries)

    def forget(self) -> None:
        """Drop every binary this process holds for the kernel, Triton's too (tests start clean)."""
        self.kernel.kernel.device_caches.clear()
        self._binaries.clear()
        self._prepared.clear()
        self._pickers.clear()
        self._forget_launches()
        forget_plans()

    # --- what the table holds -----------------------------------------------------------

    def keys(self) -> list[Any]:
        """The compile keys this process holds binaries of."""
        return list(self._binaries)

    def directly_launched_keys(self) -> list[Any]:
        """The compile keys of which a binary held has a direct launch."""
        return [key for key, binaries in self._binaries.items() if any(binaries.values())]

    def layouts_of(self, key: Any) -> list[str]:
        """The layouts of ``key`` whose binaries this process holds."""
        return list(self._binaries.get(key, ()))

    def held(self) -> list[BinaryKey]:
        """Every binary this process holds, by its binary key."""
        return [BinaryKey(key, layout) for key, layouts in self._binaries.items() for layout in layouts]

    def direct_of(self, binary_key: BinaryKey) -> DirectLaunch | None:
        """The direct launch of a binary held, or None (none held, or none prepared)."""
        return self._binaries.get(binary_key.key, {}).get(binary_key.layout)

    def pickers(self) -> list[tuple[Any, dict[str, Any], list[str]]]:
        """Each key's layout picker as ``(key, its recipe, the layouts in its order)``."""
        return [(key, pick.recipe, list(self._binaries[key])) for key, pick in self._pickers.items()]
