"""The direct launch: a warmed binary launched without Triton's per-call binding.

Triton's ``kernel[grid](...)`` binds and specialises every argument, rebuilds its cache
key and re-reads its settings on every launch. Here that happens once per binary: from
the specialisation Triton gave each argument, straight-line code is generated that
checks, per launch, just enough to know that Triton would pick this same binary, then
calls the compiled launcher.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Any, Callable

import torch
from triton.runtime.driver import driver as _triton_driver

if TYPE_CHECKING:
    from jitkern.kernel import LaunchSpec


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
    ``launch_guarded(grid, *arguments)`` takes the runtime arguments in ``arg_names``'
    order and checks all but the tensors' class, dtype and device, which its caller
    checked (a public call's plan, ``jitkern.call_plan``).
    """

    __slots__ = ("binary", "launch", "source", "launch_guarded", "arg_names", "recipe")

    def __init__(self, binary: Any, launch: Callable[[dict, tuple], bool], source: str,
                 launch_guarded: Callable[..., bool], arg_names: tuple[str, ...], recipe: dict[str, Any]):
        self.binary, self.launch, self.source = binary, launch, source
        self.launch_guarded, self.arg_names, self.recipe = launch_guarded, arg_names, recipe


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
    recipe = direct_launch_recipe(jit_function, spec, constants, binary)
    return None if recipe is None else bind_direct_launch(jit_function, binary, recipe, constants)


def direct_launch_recipe(jit_function: Any, spec: LaunchSpec, constants: dict[str, Any],
                         binary: Any) -> dict[str, Any] | None:
    """What a direct launch of ``binary`` is made of, as plain data (``jitkern.load_memo``
    keeps it): its generated source, the runtime arguments' names, the dtypes its checks
    name, the kind of each tensor its guard checks, the constexprs it passes and the
    launcher options it was generated for. None as for ``build_direct_launch``."""
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
    binary._init_handles()  # load onto the GPU now, not on the first request
    _, run_options = _launcher(binary.run)
    namespace: dict[str, Any] = {}  # what the checks name: dtypes
    unchanged_globals = []  # Triton refuses to launch once a global the kernel read has changed:
    for j, (name, _) in enumerate(jit_function.used_global_vals):
        unchanged_globals.append(f" or GLOBALS{j}.get({name!r}) is not GLOBAL{j}")  # any other object: Triton's path
    on_cuda = active.get_active_torch_device().type == "cuda"
    checks, values, launch_args = [], [], []
    i32_checks, multiples_of_16, unspecialised = [], [], []  # i32 arguments: checked together, in the common case
    tensor_checks, pointers, guarded = [], [], []  # tensors: class, dtype and device checked together
    aligned = []  # addresses that must be multiples of 16: checked together
    arguments = []  # (variable, argument name) of each runtime argument
    for i, param in enumerate(jit_function.params):
        if param.name in constants:  # a constexpr: fixed by the key, passed as it is
            values.append(f"c{i}")
            launch_args.append(f"c{i}")
            continue
        arg, value = f"a{i}", kwargs[param.name]
        arguments.append((arg, param.name))
        values.append(arg)
        specialise, align = not param.do_not_specialize, not param.do_not_specialize_on_alignment
        try:
            kind, key = native_specialize_impl(backend, value, param.is_const, specialise, align)
        except (TypeError, OverflowError):
            return None
        divisible = specialise and align  # Triton tells multiples of 16 apart
        lines = _argument_checks(i, value, (kind, key), divisible, on_cuda, namespace)
        if lines is None:
            return None
        lines = [f"# {param.name}: {(kind, key)!r}", *lines]
        if kind.startswith("*"):
            tensor_checks += lines[:-1]
            pointers.append(lines[-1])
            if key == "D" and divisible:
                aligned.append(f"p{i}")
            guarded.append((arg, (str(value.dtype).removeprefix("torch."), len(value.shape))))
        elif kind == "i32" and (key == "D" and divisible or key is None):
            (multiples_of_16 if key == "D" else unspecialised).append(arg)
            i32_checks += lines
        else:
            checks += lines
        launch_args.append(f"p{i}" if kind.startswith("*") else arg)
    tensor_guard = []
    if guarded:
        tensors = ", ".join(arg for arg, _ in guarded)
        tensor_guard = [f"if not GUARDS.now.check({tensors}):  # else each on its own, then GUARDS learns them",
                        *(f"    {line}" for line in tensor_checks), f"    GUARDS.learn({tensors})"]
    checks += pointers
    if aligned:
        checks.append(f"if ({' | '.join(aligned)}) & 15: return False")
    if i32_checks:
        checks += _i32_checks(multiples_of_16, unspecialised, i32_checks)
    device_query = _device_getter(active) is not None
    device_check = " or get_device() != DEVICE" if device_query else ""
    state_check = f"drivers._active is not ACTIVE or PRE_RUN_HOOKS{device_check}{''.join(unchanged_globals)}"
    launch = [  # the checks of everything but the tensors' class, dtype and device, then the launch
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
    ]
    source = "\n".join([
        "def launch(kwargs, grid):",
        f"    if len(kwargs) != {len(kwargs)} or {state_check}:",
        "        return False",
        "    try:",
        f"        {''.join(f'{arg}, ' for arg, _ in arguments)}= GET(kwargs)  # one C call: operator.itemgetter"
        if arguments else "        pass",
        "    except KeyError:",
        "        return False",
        *(f"    {line}" for line in tensor_guard),
        *launch,
        "",
        f"def launch_guarded(grid, {', '.join(arg for arg, _ in arguments)}):",
        "    # the caller checked each tensor's class, dtype and device (jitkern.call_plan)",
        f"    if {state_check}:",
        "        return False",
        *launch,
    ])
    return {"source": source, "arg_names": tuple(name for _, name in arguments), "dtypes": tuple(sorted(namespace)),
            "guarded": tuple(kind for _, kind in guarded), "constants": tuple(sorted(constants)),
            "globals": tuple(name for name, _ in jit_function.used_global_vals), "run_options": tuple(run_options),
            "device_query": device_query}


def bind_direct_launch(jit_function: Any, binary: Any, recipe: dict[str, Any],
                       constants: dict[str, Any]) -> DirectLaunch | None:
    """The direct launch ``recipe`` describes, bound to ``binary`` (loaded onto the GPU
    here) and the key's ``constants``; None when this process differs from the one the
    recipe was made in (another launcher, other globals, another set of constexprs)."""
    import triton

    active = _triton_driver.active
    binary._init_handles()  # load onto the GPU now, not on the first request
    run, run_options = _launcher(binary.run)
    if tuple(run_options) != recipe["run_options"] or tuple(sorted(constants)) != recipe["constants"] \
            or tuple(name for name, _ in jit_function.used_global_vals) != recipe["globals"]:
        return None
    get_device = _device_getter(active)
    if (get_device is not None) != recipe["device_query"]:
        return None
    runtime = triton.knobs.runtime
    device = active.get_current_device()
    namespace = {
        "drivers": _triton_driver, "ACTIVE": active, "DEVICE": device, "get_device": get_device,
        "get_stream": active.get_current_stream, "RUNTIME": runtime, "RUNTIME_SET": runtime.__dict__,
        "RUNTIME_CLASS": type(runtime), "DEBUG": runtime.debug, "PRE_RUN_HOOKS": jit_function.pre_run_hooks,
        "NO_ENTER": type(runtime).launch_enter_hook, "NO_EXIT": type(runtime).launch_exit_hook,
        "ENTER_HOOKS": type(runtime).launch_enter_hook.calls, "EXIT_HOOKS": type(runtime).launch_exit_hook.calls,
        "FUNCTION": binary.function, "PACKED": binary.packed_metadata, "launch_metadata": binary.launch_metadata,
        "TENSORS": (torch.Tensor, torch.nn.Parameter), "run": run,
        "DATA_PTR": torch.Tensor.data_ptr,  # the method itself: no lookup on each tensor
    }
    for j, (_, globals_dict) in enumerate(jit_function.used_global_vals.values()):
        name = recipe["globals"][j]
        namespace[f"GLOBALS{j}"], namespace[f"GLOBAL{j}"] = globals_dict, globals_dict.get(name)
    for i, param in enumerate(jit_function.params):
        if param.name in constants:
            namespace[f"c{i}"] = constants[param.name]
    names = recipe["arg_names"]
    if names:  # the runtime arguments, as a tuple: operator.itemgetter gives one value alone
        namespace["GET"] = operator.itemgetter(*names) if len(names) > 1 else lambda kwargs: (kwargs[names[0]],)
    for dtype in recipe["dtypes"]:  # torch_bfloat16
        namespace[dtype] = getattr(torch, dtype.removeprefix("torch_"))
    if recipe["guarded"]:
        namespace["GUARDS"] = TensorKinds(recipe["guarded"], active)
    exec(generated_code(recipe["source"], f"<direct launch of {binary.name}>"), namespace)
    return DirectLaunch(binary, namespace["launch"], recipe["source"], namespace["launch_guarded"],
                        recipe["arg_names"], recipe)


_code_by_source: dict[str, Any] = {}


def generated_code(source: str, filename: str) -> Any:
    """The code of a generated source: binaries of one kernel often share it (the names in
    it are bound per binary), and compiling it was half of preparing a binary at load.
    ``jitkern.load_memo`` hands in the code an earlier process compiled (``known_code``)."""
    code = _code_by_source.get(source)
    if code is None:
        if len(_code_by_source) >= 4096:
            _code_by_source.clear()
        code = _code_by_source[source] = compile(source, filename, "exec")
    return code


def known_code(sources: list[str] | None = None, codes: dict[str, Any] | None = None) -> dict[str, Any]:
    """The compiled code of each of ``sources``; with ``codes``, take those as compiled."""
    if codes:
        _code_by_source.update(codes)
    return {source: generated_code(source, "<generated>") for source in sources or ()}


def _argument_checks(i: int, value: Any, specialisation: tuple[Any, Any], divisibility: bool, on_cuda: bool,
                     namespace: dict[str, Any]) -> list[str] | None:
    """Lines returning False unless argument ``a{i}`` specialises as ``value`` did (to
    ``specialisation``, Triton's type and key); None for a kind of argument not covered.

    Mirrors Triton's native rules: a tensor's type is its dtype, its key whether its
    address is a multiple of 16; an int's type is its class (1 is the constexpr 1) and
    its key whether it is a multiple of 16; bools and floats are not specialised. A
    tensor's address ``p{i}`` goes to the launcher as an int, which it takes as is
    (``is_cuda``, as ``on_cuda`` wants it, stands in for the check the launcher makes on
    a tensor's address: a CPU tensor's address would run on the GPU). The caller checks
    the addresses that must be multiples of 16 together, in one line.
    """
    arg, (kind, key) = f"a{i}", specialisation
    if not isinstance(kind, str):
        return None
    if kind.startswith("*"):  # the class, dtype and device check, then the address line
        if not isinstance(getattr(value, "dtype", None), torch.dtype):
            return None
        dtype = str(value.dtype).replace(".", "_")  # torch_bfloat16
        namespace[dtype] = value.dtype
        condition = f"type({arg}) not in TENSORS or {arg}.dtype is not {dtype} or {'not ' if on_cuda else ''}{arg}.is_cuda"
        if divisibility and key != "D":  # an address that must be 16-byte aligned: the caller checks them together
            return [f"if {condition}: return False", f"if not (p{i} := DATA_PTR({arg})) & 15: return False"]
        return [f"if {condition}: return False", f"p{i} = DATA_PTR({arg})"]
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


class TensorKinds:
    """Torch's C++ check (``TensorGuards``, as ``torch.compile`` guards its inputs) that each
    tensor of a launch is of the kind the binary takes: its class, dtype, device, number
    of dimensions and autograd state, any sizes and strides. About 65 ns a tensor, where
    reading class, dtype and device in Python takes 160.

    A guard also holds torch's thread state when it was made: one made at ``load()``
    refuses tensors made under ``torch.inference_mode()``, as serving engines make them.
    When it refuses tensors that pass the checks one attribute at a time, it ``learn``s
    them: the guard is made again from those tensors, in the caller's state (at most
    ``RELEARN`` times, so that alternating kinds cost the slow checks, not a new guard
    each launch).
    """

    RELEARN = 4
    __slots__ = ("now", "_left")

    def __init__(self, kinds: tuple[tuple[str, int], ...], active: Any):
        """``kinds``: each tensor's dtype name (``bfloat16``) and number of dimensions."""
        device = active.get_active_torch_device()
        self.now = self._guards([_example(getattr(torch, dtype), dims, device) for dtype, dims in kinds])
        self._left = self.RELEARN

    def learn(self, *tensors: Any) -> None:
        if self._left:
            self._left -= 1
            self.now = self._guards(tensors)

    @staticmethod
    def _guards(tensors: Any) -> Any:
        from torch._C._dynamo.guards import TensorGuards

        return TensorGuards(*tensors, dynamic_dims_sizes=[[None] * tensor.dim() for tensor in tensors],
                            dynamic_dims_strides=[[None] * tensor.dim() for tensor in tensors])


@functools.lru_cache(maxsize=256)
def _example(dtype: torch.dtype, dims: int, device: torch.device) -> torch.Tensor:
    """An empty tensor of this kind: what the guards are built from."""
    return torch.empty((0,) * dims, dtype=dtype, device=device)


def _i32_checks(multiples_of_16: list[str], unspecialised: list[str], exact: list[str]) -> list[str]:
    """The checks of i32 arguments: one condition for the common case, in which the values
    are not negative, then the ``exact`` checks of each argument when it fails."""
    condition = [" is ".join([*(f"type({arg})" for arg in multiples_of_16 + unspecialised), "int"])]
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


def layout_picker(jit_function: Any, candidates: list[tuple[dict[str, Any], Callable[[dict, tuple], bool]]]
                  ) -> Callable[[dict], Callable[[dict, tuple], bool] | None]:
    """For a key with binaries of several layouts: a function of a launch's arguments that
    names the launch of its layout's binary, or None.

    ``candidates``: each binary's launch, with arguments it was built for. The generated
    code reads only the arguments that tell the layouts apart, and of them only their
    class (a pointer's 16-byte alignment; an integer's being 1, a multiple of 16, beyond
    i32). The launch it names still checks everything, as every direct launch does.
    """
    recipe = layout_picker_recipe(jit_function, [kwargs for kwargs, _ in candidates])
    return bind_layout_picker(recipe, [launch for _, launch in candidates])


def layout_picker_recipe(jit_function: Any, candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """A layout picker as plain data (``jitkern.load_memo`` keeps it): its source and the
    class of each candidate's arguments, in ``candidates``' order."""
    from jitkern.specialisation import runtime_params

    classes = {}  # argument -> expression of its class, in terms of ``value``
    for param in runtime_params(jit_function):
        value = candidates[0].get(param.name)
        in_i32 = f"-{2**31} <= value < {2**31}"
        if hasattr(value, "data_ptr") and not param.do_not_specialize_on_alignment:
            classes[param.name] = "value.data_ptr() & 15 == 0"
        elif type(value) is int:
            classes[param.name] = in_i32 if param.do_not_specialize else f"(value == 1, value & 15 == 0, {in_i32})"
    telling = [name for name, expression in classes.items()
               if len({eval(expression, {"value": kwargs[name]}) for kwargs in candidates}) > 1]  # noqa: S307
    reads = [f"value = kwargs[{name!r}]\n    c{i} = {classes[name]}" for i, name in enumerate(telling)]
    signature = f"({''.join(f'c{i}, ' for i in range(len(telling)))})"
    source = "\n".join([
        "def classify(kwargs):", *(f"    {read}" for read in reads), f"    return {signature}",
        "def pick(kwargs):",
        "    try:", *(f"        {read}".replace("\n", "\n    ") for read in reads),
        "    except (KeyError, TypeError, AttributeError):  # a missing argument, another kind of value",
        "        return None",
        f"    return TABLE.get({signature})",
    ])
    namespace: dict[str, Any] = {}
    exec(generated_code(source, f"<layout picker of {jit_function.__name__}>"), namespace)
    return {"source": source, "classes": tuple(namespace["classify"](kwargs) for kwargs in candidates),
            "name": jit_function.__name__}


def bind_layout_picker(recipe: dict[str, Any], launches: list[Callable[[dict, tuple], bool]]
                       ) -> Callable[[dict], Callable[[dict, tuple], bool] | None]:
    """The picker of ``recipe``, naming ``launches`` (in its candidates' order)."""
    namespace: dict[str, Any] = {"TABLE": {}}
    exec(generated_code(recipe["source"], f"<layout picker of {recipe['name']}>"), namespace)
    for signature, launch in zip(recipe["classes"], launches):
        namespace["TABLE"].setdefault(signature, launch)
    pick = namespace["pick"]
    pick.recipe = recipe
    return pick
