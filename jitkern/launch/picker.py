"""The layout picker: which of a key's binaries (one per layout) a launch's arguments need."""

from __future__ import annotations

from typing import Any, Callable

from jitkern.launch.direct import generated_code
from jitkern.layouts.specialisation import runtime_params


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
    """A layout picker as plain data (``jitkern.serve.memo`` keeps it): its source and the
    class of each candidate's arguments, in ``candidates``' order."""
    classes = {}  # argument -> expression of its class, in terms of ``value``
    for param in runtime_params(jit_function):
        value = candidates[0].get(param.name)
        in_i32 = f"-{2**31} <= value < {2**31}"
        if hasattr(value, "data_ptr") and not param.do_not_specialize_on_alignment:
            classes[param.name] = "value.data_ptr() & 15 == 0"
        elif type(value) is int:
            classes[param.name] = (in_i32 if param.do_not_specialize else
                                   f"(value == 1, {in_i32})" if param.do_not_specialize_on_alignment else
                                   f"(value == 1, value & 15 == 0, {in_i32})")
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
