"""The direct launch: a warmed binary launched without Triton's per-call binding.

Triton's ``kernel[grid](...)`` binds and specialises every argument, rebuilds its cache
key and re-reads its settings on every launch. Here that happens once per binary: from
the specialisation Triton gave each argument comes a plan of what to check, per launch,
to know that Triton would pick this same binary; one C call (``jitkern.launch.c_module``)
checks the arguments against it and calls the compiled launcher.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import torch
from triton.runtime.driver import driver as _triton_driver

from jitkern.launch.spec import LaunchSpec


class DirectLaunch:
    """One key's binary and the launch function generated for it.

    Triton's ``kernel[grid](...)`` binds and specialises every argument, rebuilds its cache
    key and re-reads its settings on every launch. Here that happens once, on the key's
    first launch (or warmup): from the specialisation Triton gave each argument, a plan of
    checks (``recipe["codes"]``) that tell, per launch, that Triton would pick this same
    binary; the generated ``source`` checks Triton's state and hooks, then hands the
    arguments to the C call that checks them and launches. ``launch(kwargs, grid)``
    returns False for a call outside the binary, which then takes Triton's normal
    path, where the guard sees it. Launches use the current stream, so CUDA graphs capture
    them; Triton's launch hooks are read per launch and fire as in Triton.
    ``launch_guarded(grid, *arguments)`` takes the runtime arguments in ``arg_names``'
    order and checks all but the tensors' class, dtype and device, which its caller
    checked (a public call's plan, ``jitkern.launch.plans``).
    """

    __slots__ = ("binary", "launch", "source", "launch_guarded", "arg_names", "recipe")

    def __init__(self, binary: Any, launch: Callable[[dict, tuple], bool], source: str,
                 launch_guarded: Callable[..., bool], arg_names: tuple[str, ...], recipe: dict[str, Any]):
        self.binary, self.launch, self.source = binary, launch, source
        self.launch_guarded, self.arg_names, self.recipe = launch_guarded, arg_names, recipe


# Triton's integer classes (``native_specialize_impl``), in the order of their C codes.
_INT_CLASSES = ("i32", "i64", "u64")


def build_direct_launch(jit_function: Any, spec: LaunchSpec, constants: dict[str, Any],
                        binary: Any) -> DirectLaunch | None:
    """The direct launch of ``binary``, built for ``spec``'s arguments and its key's ``constants``.

    None when an argument is of a kind the checks do not cover (tuples, tensor
    descriptors, a default left out, a backend with its own specialisation rules), or the
    C module cannot be had: that key always takes Triton's path.
    """
    recipe = direct_launch_recipe(jit_function, spec, constants, binary)
    return None if recipe is None else bind_direct_launch(jit_function, binary, recipe, constants)


def direct_launch_recipe(jit_function: Any, spec: LaunchSpec, constants: dict[str, Any],
                         binary: Any) -> dict[str, Any] | None:
    """What a direct launch of ``binary`` is made of, as plain data (``jitkern.serve.memo``
    keeps it): its generated source, the runtime arguments' names, each parameter's check
    (``jitkern.launch.c_module``: code, tensor dtype), the constexprs it passes and the launcher
    options it was made for. None as for ``build_direct_launch``."""
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
    codes, dtypes, arg_names = bytearray(), [], []
    for param in jit_function.params:
        if param.name in constants:  # a constexpr: fixed by the key, passed as it is
            codes += b"c\0\0\0"
            dtypes.append(None)
            continue
        value = kwargs[param.name]
        specialise, align = not param.do_not_specialize, not param.do_not_specialize_on_alignment
        try:
            kind, key = native_specialize_impl(backend, value, param.is_const, specialise, align)
        except (TypeError, OverflowError):
            return None
        code = _argument_code(value, kind, key, divisible=specialise and align)
        if code is None:
            return None
        codes += code
        arg_names.append(param.name)
        dtypes.append(str(value.dtype).removeprefix("torch.") if code[:1] == b"t" else None)
    unchanged_globals = "".join(  # Triton refuses to launch once a global the kernel read has changed
        f" or GLOBALS{j}.get({name!r}) is not GLOBAL{j}" for j, (name, _) in enumerate(jit_function.used_global_vals))
    device_query = _device_getter(active) is not None
    device_check = " or get_device() != DEVICE" if device_query else ""
    state_check = f"drivers._active is not ACTIVE or PRE_RUN_HOOKS{device_check}{unchanged_globals}"
    source = "\n".join([
        "def launch(arguments, grid):  # arguments: the runtime arguments by name",
        *_launch_body(state_check, "LAUNCH_BY_NAME"),
        "",
        "def launch_guarded(grid, *arguments):",
        "    # the arguments in arg_names' order; the caller checked each tensor's class, dtype and device",
        *_launch_body(state_check, "LAUNCH_CHECKED"),
    ])
    return {"source": source, "arg_names": tuple(arg_names), "codes": bytes(codes), "dtypes": tuple(dtypes),
            "on_gpu": active.get_active_torch_device().type == "cuda", "constants": tuple(sorted(constants)),
            "globals": tuple(name for name, _ in jit_function.used_global_vals), "run_options": tuple(run_options),
            "device_query": device_query}


def _launch_body(state_check: str, launch: str) -> list[str]:
    """The lines of a generated launch: Triton's state as the binary was made for, the
    stream, the launch hooks as Triton reads them, then the C call that checks the
    arguments and launches (False, launching nothing, when they do not fit)."""
    return [
        f"    if {state_check}:",
        "        return False",
        "    stream = get_stream(DEVICE)",
        "    metadata = enter = exit = None  # no hooks: as Triton, but without building their metadata",
        "    if RUNTIME_SET or ENTER_HOOKS or EXIT_HOOKS or RUNTIME_CLASS.debug is not DEBUG:",
        "        if RUNTIME.debug is not DEBUG:  # a knob set or a hook added: read them as Triton does",
        "            return False",
        "        if not (RUNTIME.launch_enter_hook is NO_ENTER and RUNTIME.launch_exit_hook is NO_EXIT",
        "                and not (ENTER_HOOKS or EXIT_HOOKS)):",
        "            values = HOOK_VALUES(arguments)",
        "            if values is None:",
        "                return False",
        "            enter, exit = RUNTIME.launch_enter_hook, RUNTIME.launch_exit_hook",
        "            metadata = launch_metadata(grid, stream, *values)",
        f"    return {launch}(PLAN, arguments, grid, stream, metadata, enter, exit)",
    ]


def bind_direct_launch(jit_function: Any, binary: Any, recipe: dict[str, Any],
                       constants: dict[str, Any]) -> DirectLaunch | None:
    """The direct launch ``recipe`` describes, bound to ``binary`` (loaded onto the GPU
    here) and the key's ``constants``; None when this process differs from the one the
    recipe was made in (another launcher, other globals, another set of constexprs), or
    the C module cannot be had."""
    import triton

    from jitkern.launch import c_module

    active = _triton_driver.active
    binary._init_handles()  # load onto the GPU now, not on the first request
    run, run_options = _launcher(binary.run)
    if tuple(run_options) != recipe["run_options"] or tuple(sorted(constants)) != recipe["constants"] \
            or tuple(name for name, _ in jit_function.used_global_vals) != recipe["globals"]:
        return None
    get_device = _device_getter(active)
    if (get_device is not None) != recipe["device_query"]:
        return None
    try:
        launcher = c_module.module()
    except Exception as error:  # no host C compiler, say: Triton's path launches, and says why once
        _warn_no_c_launch(error)
        return None
    params = [param.name for param in jit_function.params]
    extras = tuple(constants[name] if name in constants else dtype and getattr(torch, dtype)
                   for name, dtype in zip(params, recipe["dtypes"]))
    plan = (tuple(params), recipe["codes"], extras, (torch.Tensor, torch.nn.Parameter), torch.Tensor.data_ptr,
            recipe["on_gpu"], run, (binary.function, *run_options, binary.packed_metadata), len(recipe["arg_names"]))
    runtime = triton.knobs.runtime
    device = active.get_current_device()
    namespace = {
        "drivers": _triton_driver, "ACTIVE": active, "DEVICE": device, "get_device": get_device,
        "get_stream": active.get_current_stream, "RUNTIME": runtime, "RUNTIME_SET": runtime.__dict__,
        "RUNTIME_CLASS": type(runtime), "DEBUG": runtime.debug, "PRE_RUN_HOOKS": jit_function.pre_run_hooks,
        "NO_ENTER": type(runtime).launch_enter_hook, "NO_EXIT": type(runtime).launch_exit_hook,
        "ENTER_HOOKS": type(runtime).launch_enter_hook.calls, "EXIT_HOOKS": type(runtime).launch_exit_hook.calls,
        "launch_metadata": binary.launch_metadata, "PLAN": plan,
        "LAUNCH_BY_NAME": launcher.launch_by_name, "LAUNCH_CHECKED": launcher.launch_checked,
        "HOOK_VALUES": functools.partial(_hook_values, tuple(params), recipe["arg_names"], constants),
    }
    for j, (_, globals_dict) in enumerate(jit_function.used_global_vals.values()):
        name = recipe["globals"][j]
        namespace[f"GLOBALS{j}"], namespace[f"GLOBAL{j}"] = globals_dict, globals_dict.get(name)
    exec(generated_code(recipe["source"], f"<direct launch of {binary.name}>"), namespace)
    return DirectLaunch(binary, namespace["launch"], recipe["source"], namespace["launch_guarded"],
                        recipe["arg_names"], recipe)


def _hook_values(params: tuple[str, ...], runtime: tuple[str, ...], constants: dict[str, Any],
                 arguments: dict | tuple) -> list | None:
    """Every parameter's value, in order, as Triton hands them to a launch hook's metadata;
    None when ``arguments`` (by name, or in ``runtime``'s order) lack one."""
    if isinstance(arguments, dict):
        if arguments.keys() != set(runtime):
            return None
        given = arguments
    elif len(arguments) == len(runtime):
        given = dict(zip(runtime, arguments))
    else:
        return None
    return [constants[name] if name in constants else given[name] for name in params]


_warned: list[str] = []


def _warn_no_c_launch(error: Exception) -> None:
    if not _warned:
        _warned.append(str(error))
        warnings.warn(f"jitkern: no direct launches in this process, every launch takes Triton's path: its C module "
                      f"could not be built or loaded ({type(error).__name__}: {error})", RuntimeWarning, stacklevel=3)


_code_by_source: dict[str, Any] = {}


def generated_code(source: str, filename: str) -> Any:
    """The code of a generated source: binaries of one kernel often share it (the names in
    it are bound per binary), and compiling it was half of preparing a binary at load.
    ``jitkern.serve.memo`` hands in the code an earlier process compiled (``known_code``)."""
    code = _code_by_source.get(source)
    if code is None:
        if len(_code_by_source) >= 4096:
            _code_by_source.clear()
        code = _code_by_source[source] = compile(source, filename, "exec")
    return code


def parameters_source(parameters: Any) -> tuple[list[str], dict[str, Any]]:
    """The parameters of a generated function (``def f(...)``) as ``parameters``
    (``inspect.Parameter``s) declare them, each default the name ``DEFAULT_<name>`` of the
    namespace returned beside them."""
    parts, defaults = [], {}
    for parameter in parameters:
        text = parameter.name
        if parameter.default is not parameter.empty:
            defaults[f"DEFAULT_{parameter.name}"] = parameter.default
            text += f"=DEFAULT_{parameter.name}"
        if parameter.kind is parameter.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        parts.append(text)
    return parts, defaults


def known_code(sources: list[str] | None = None, codes: dict[str, Any] | None = None) -> dict[str, Any]:
    """The compiled code of each of ``sources``; with ``codes``, take those as compiled."""
    if codes:
        _code_by_source.update(codes)
    return {source: generated_code(source, "<generated>") for source in sources or ()}


def _argument_code(value: Any, kind: Any, key: Any, divisible: bool) -> bytes | None:
    """The C check (``jitkern.launch.c_module``) of a runtime argument that specialised as
    ``value`` did, to Triton's ``(kind, key)``; None for a kind of argument not covered.

    Mirrors Triton's native rules: a tensor's type is its dtype, its key whether its
    address is a multiple of 16; an int's type is its class (1 is the constexpr 1) and
    its key whether it is a multiple of 16 (``divisible``: when Triton tells them apart);
    bools and floats are not specialised. A tensor goes to the launcher as its address,
    which the launcher takes as is, so the check of its device stands in for the one the
    launcher makes on a tensor: a CPU tensor's address would run on the GPU.
    """
    if not isinstance(kind, str):
        return None
    multiple = (1 if key == "D" else 2) if divisible else 0
    if kind.startswith("*"):
        return bytes([ord("t"), 0, 0, multiple]) if isinstance(getattr(value, "dtype", None), torch.dtype) else None
    if kind in _INT_CLASSES:
        return bytes([ord("i"), _INT_CLASSES.index(kind), kind == "i32" and key == "", multiple])
    if kind == "constexpr":  # None, or the int 1
        return b"n\0\0\0" if value is None else b"1\0\0\0" if type(value) is int and value == 1 else None
    if kind in ("u1", "fp32"):
        return b"b\0\0\0" if kind == "u1" else b"f\0\0\0"
    return None


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
