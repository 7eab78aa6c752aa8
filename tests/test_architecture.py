"""The architecture's contract (``docs/architecture.md``), read from the source.

Counting every import (module level, type-only, inside functions): jitkern's packages
import one way, down the stages of a binary's life; nothing forms a cycle; nothing
imports another module's private name; no framework module passes 400 lines; every
module opens with a docstring saying what it is for.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("jitkern", "step5", "deepseek_v4")

LAYERS = [
    # bottom first: a module imports from its own layer or below
    ("jitkern.settings", "jitkern.hooks", "jitkern.memo"),
    ("jitkern.targets",),
    ("jitkern.layouts",),
    ("jitkern.launch",),
    ("jitkern.kernel",),
    ("jitkern.manifest",),
    ("jitkern.cache",),
    ("jitkern.build",),
    ("jitkern.tuning",),
    ("jitkern.serve",),
    ("jitkern.guard",),
    ("jitkern.testing",),
    ("jitkern.warmup", "jitkern.tune"),  # the CLI, its tune command apart
    ("jitkern",),
    ("jitkern.examples",),  # written as a user writes a kernel: with jitkern's public API
]
MAX_LINES = 400


def modules(package: str) -> dict[str, Path]:
    """Module name -> file, a package's ``__init__`` named as the package."""
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, list[str], int]]:
    """Each import of a known module: (module imported, names taken from it, line)."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(_known(alias.name, known), [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                submodule = _known(f"{base}.{alias.name}", known)
                if submodule == f"{base}.{alias.name}":
                    found.append((submodule, [], node.lineno))
                else:
                    found.append((_known(base, known), [alias.name], node.lineno))
    return [(module, names, line) for module, names, line in found if module and module != name]


def _known(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def layer(module: str) -> int:
    """The layer of the longest prefix a table entry names."""
    best = max(((len(prefix), index) for index, names in enumerate(LAYERS) for prefix in names
                if module == prefix or module.startswith(prefix + ".")), default=None)
    if best is None:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it where it belongs")
    return best[1]


def graph(package: str) -> dict[str, list[tuple[str, list[str], int]]]:
    known = {name: path for each in PACKAGES for name, path in modules(each).items()}
    return {name: imports(name, path, known) for name, path in modules(package).items()}


def test_jitkern_imports_point_down_the_stages():
    upward = [f"{module}:{line} imports {target} (layer {layer(target)} above {layer(module)})"
              for module, edges in graph("jitkern").items() for target, _names, line in edges
              if target.startswith("jitkern") and layer(target) > layer(module)]
    assert not upward, "imports against the layers of docs/architecture.md:\n  " + "\n  ".join(upward)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package):
    edges = {module: {target for target, _names, _line in found} for module, found in graph(package).items()}
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n  " + "\n  ".join(" -> ".join(cycle) for cycle in cycles)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_another_modules_private_name(package):
    private = [f"{module}:{line} imports {target}.{name}" for module, edges in graph(package).items()
               for target, names, line in edges for name in names
               if name.startswith("_") and not name.startswith("__")]
    assert not private, "private names taken from other modules:\n  " + "\n  ".join(private)


def test_no_framework_module_is_over_400_lines():
    long = {name: lines for name, path in modules("jitkern").items()
            if (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (each a sign it holds two things): {long}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_opens_with_a_docstring(package):
    missing = [name for name, path in modules(package).items()
               if path.read_text().strip() and ast.get_docstring(ast.parse(path.read_text())) is None]
    assert not missing, f"modules with no docstring saying what they are for: {missing}"
