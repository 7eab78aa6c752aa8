"""A restarted process's ``load()`` from the memo of its deployment (``jitkern.serve.memo``):
the same binaries, direct launches and layout pickers as the full path, without Triton's
front end; and the full path whenever anything the memo vouches for changed."""

import gc
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from triton.compiler.compiler import CompiledKernel
from reliability_testing import forget_all_binaries, warm
from warmup_testing import example_manifest

from jitkern.serve import compiled, memo as load_memo
from jitkern.kernel import registry
from jitkern import settings
from jitkern.cache import DamagedCacheEntry
from jitkern.examples.axpy import axpy
from jitkern.kernel import key_name
from jitkern.build.compile import tasks_of
from jitkern.build.probe import build_lock
from jitkern.cache.share import write_lock
from jitkern.testing import DryRunDriver
from jitkern.serve import MissingBinary, load
from jitkern.manifest import resolve

pytestmark = [pytest.mark.compiled, pytest.mark.usefixtures("dry_run_gpu")]

AXPY = "jitkern.example.axpy"


def deployment_manifest(folder: Path) -> Path:
    return example_manifest(folder / "m.json", layout={"unaligned": ["x", "y", "out"]}, dtypes=["float32", "bfloat16"])


@pytest.fixture(scope="module")
def warmed_caches(tmp_path_factory):
    """The deployment's cache, compiled once a module for each ``keep_ir``: each test warms
    a copy (the same bytes a compile of its own would write) -> (cache, key -> entry folder)."""
    made = {}

    def warmed(keep_ir: bool) -> tuple[Path, dict]:
        if keep_ir not in made:
            folder = tmp_path_factory.mktemp("warmed")
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("TRITON_CACHE_DIR", str(folder / "cache"))
                entries = warm(deployment_manifest(folder), keep_ir)
            made[keep_ir] = folder / "cache", {key: entry.relative_to(folder / "cache") for key, entry in entries.items()}
        return made[keep_ir]

    return warmed


@pytest.fixture
def deployment(request, tmp_path, monkeypatch, triton_cache, warmed_caches):
    """A warmed example deployment of several layouts a key, a private state directory,
    and the arguments each launch passes to its launcher. Its entries are binary-only, or
    keep their IR files when the test parametrizes it (indirectly) with True."""
    manifest = deployment_manifest(tmp_path)
    warmed, folders = warmed_caches(getattr(request, "param", False))
    shutil.copytree(warmed, triton_cache, dirs_exist_ok=True)
    entries = {key: triton_cache / folder for key, folder in folders.items()}
    calls = []

    def launcher_cls(self, src, metadata):
        def launch(grid_0, grid_1, grid_2, stream, function, packed_metadata, launch_metadata, enter, exit, *args):
            calls.append((src.fn.__name__, (grid_0, grid_1, grid_2), packed_metadata, args))
        return launch

    monkeypatch.setattr(DryRunDriver, "launcher_cls", launcher_cls)
    with settings.scope(state_dir=str(tmp_path / "state")):
        forget_all_binaries()
        yield manifest, entries, calls


def full_paths(monkeypatch) -> list[str]:
    """Records each binary Triton's front end looks up from here on."""
    from triton.runtime.jit import JITFunction

    looked_up, warmup = [], JITFunction.warmup

    def counting_warmup(self, *args, **kwargs):
        looked_up.append(self.__name__)
        return warmup(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "warmup", counting_warmup)
    return looked_up


def held(kernel_name: str) -> dict:
    """What a kernel holds after a load: each binary's direct launch source and binary
    identity, and each key's picker recipe."""
    kernel = registry.get_kernel(kernel_name)
    binaries = {(key_name(binary.key), binary.layout): (direct.source, direct.binary.hash, direct.arg_names)
                for binary in kernel.binaries.held() for direct in [kernel.binaries.direct_of(binary)]}
    pickers = {key_name(key): recipe for key, recipe, _layouts in kernel.binaries.pickers()}
    return {"binaries": binaries, "pickers": pickers}


def every_layout() -> list[tuple]:
    """axpy arguments for each alignment of x (and out), in each dtype."""
    calls = []
    for dtype in (torch.float32, torch.bfloat16):
        for offset in (0, 1):
            x = torch.randn(64 + offset, dtype=dtype)[offset:]
            calls.append((x, x, 0.5, torch.empty(64 + offset, dtype=dtype)[offset:]))
    return calls


def test_a_second_load_takes_every_binary_from_the_memo_as_the_full_path_did(deployment, monkeypatch):
    manifest, entries, calls = deployment
    looked_up = full_paths(monkeypatch)
    (first,) = load([str(manifest)])
    calls.clear()  # load()'s rehearsal
    assert len(looked_up) == first.binaries == len(entries) and first.binaries > 2 * 2  # several layouts a key
    full = held(AXPY)
    assert full["pickers"], "the example's keys should have several layouts"
    arguments = every_layout()
    for x, y, alpha, out in arguments:
        axpy(x, y, alpha, out=out)
    full_calls = list(calls)

    forget_all_binaries()
    looked_up.clear()
    calls.clear()
    (again,) = load([str(manifest)])
    calls.clear()
    assert looked_up == [] and again.binaries == first.binaries
    assert held(AXPY) == full
    table = registry.get_kernel(AXPY).binaries
    for held_binary in table.held():  # as Triton makes them of those files
        for binary in [table.direct_of(held_binary).binary]:
            by_triton = CompiledKernel(binary.src, binary.metadata_group, binary.hash)
            for field in ("metadata", "packed_metadata", "name", "hash", "kernel", "asm", "metadata_group"):
                assert getattr(binary, field) == getattr(by_triton, field), field
    for x, y, alpha, out in arguments:
        axpy(x, y, alpha, out=out)
    assert calls == full_calls and len(calls) == 4


def rewrite_manifest(manifest, _memo):
    manifest.write_text(manifest.read_text() + "\n")


def change_a_code_file(_manifest, memo):
    """As if a kernel's module had been edited since: its recorded size differs."""
    memo["code"][0] = (memo["code"][0][0], -1, *memo["code"][0][2:])


def make_it_group_writable(_manifest, memo):
    memo["mode"] = 0o664


def garble_it(_manifest, memo):
    memo["garbage"] = True


@pytest.mark.parametrize("change", [rewrite_manifest, change_a_code_file, make_it_group_writable, garble_it])
def test_anything_the_memo_vouches_for_changed_takes_the_full_path(deployment, monkeypatch, change):
    manifest, entries, _calls = deployment
    load([str(manifest)])
    (path,) = [entry.path for entry in os.scandir(os.path.join(settings.current().state_dir, load_memo.MEMO_FOLDER))]
    memo = load_memo.marshal.loads(open(path, "rb").read())
    change(manifest, memo)
    with open(path, "wb") as file:
        file.write(b"not a memo" if memo.pop("garbage", False) else load_memo.marshal.dumps(memo))
    os.chmod(path, memo.pop("mode", 0o600))

    forget_all_binaries()
    looked_up = full_paths(monkeypatch)
    (loaded,) = load([str(manifest)])
    assert len(looked_up) == loaded.binaries == len(entries)


def test_a_triton_whose_compiled_kernel_holds_more_is_never_remembered(deployment, monkeypatch):
    """The memo makes Triton's ``CompiledKernel`` itself; its writer checks each one
    against Triton's own and writes nothing when they differ."""
    manifest, entries, _calls = deployment
    made_by_triton = CompiledKernel.__init__

    def holding_more(self, *args):
        made_by_triton(self, *args)
        self.occupancy = 0.5

    monkeypatch.setattr(CompiledKernel, "__init__", holding_more)
    load([str(manifest)])
    assert not os.path.exists(os.path.join(settings.current().state_dir, load_memo.MEMO_FOLDER))
    forget_all_binaries()
    looked_up = full_paths(monkeypatch)
    (loaded,) = load([str(manifest)])
    assert len(looked_up) == loaded.binaries == len(entries)


def test_a_binary_held_with_a_launch_built_for_another_is_never_remembered(deployment, monkeypatch):
    """The memo pairs each loaded binary with the direct launch its table holds for that
    key and layout. A launch built for another binary (the slot taken since) would bind
    its argument list to this binary in the next process: nothing is written."""
    manifest, entries, _calls = deployment
    table = registry.get_kernel(AXPY).binaries
    held = table.direct_of
    monkeypatch.setattr(table, "direct_of", lambda binary_key: SimpleNamespace(binary=object(),
                                                                                recipe=held(binary_key).recipe))
    load([str(manifest)])
    assert not os.path.exists(os.path.join(settings.current().state_dir, load_memo.MEMO_FOLDER))
    monkeypatch.delattr(table, "direct_of")  # the class's own again
    forget_all_binaries()
    looked_up = full_paths(monkeypatch)
    (loaded,) = load([str(manifest)])
    assert len(looked_up) == loaded.binaries == len(entries)


def test_a_kernel_of_another_triton_key_takes_the_full_path(deployment, monkeypatch):
    """A kernel whose Triton key differs from the recorded one, as it does when a
    ``constexpr`` global it reads has another value in this process (read from the
    environment, say), is looked up by that key: none of the recorded binaries is its."""
    manifest, _entries, _calls = deployment
    load([str(manifest)])
    forget_all_binaries()
    monkeypatch.setattr(registry.get_kernel(AXPY).kernel, "hash", "f" * 64)  # as another value would hash
    looked_up = full_paths(monkeypatch)
    with pytest.raises(MissingBinary):
        load([str(manifest)])
    assert looked_up and not registry.get_kernel(AXPY).binaries.held()


@pytest.mark.parametrize("tuned", [dict(num_warps=8), dict(enable_fp_fusion=0)],
                         ids=["an option added", "False become 0"])
def test_a_key_whose_constants_changed_loads_its_new_binaries(deployment, monkeypatch, tuned):
    """``constants(key)`` may read what no code file of the memo holds (a tuning table in a
    module of its own). After the table changes and a new warmup, a restarted process
    loads the new binaries, even where the new value equals the old one by ``==``."""
    from jitkern.examples.axpy import AxpyKernel

    manifest, entries, _calls = deployment
    load([str(manifest)])
    kernel, constants = registry.get_kernel(AXPY), AxpyKernel.constants
    monkeypatch.setattr(AxpyKernel, "constants", lambda self, key: {**constants(self, key), **tuned})
    monkeypatch.setattr(kernel, "_constants", {})  # computed anew, as in a restarted process
    warm(manifest)
    forget_all_binaries()
    looked_up = full_paths(monkeypatch)
    (loaded,) = load([str(manifest)])
    assert len(looked_up) == loaded.binaries == len(entries)
    metadata = [kernel.binaries.direct_of(binary).binary.metadata for binary in kernel.binaries.held()]
    assert len(metadata) == len(entries)
    for name, value in tuned.items():
        assert all(type(getattr(each, name)) is type(value) and getattr(each, name) == value for each in metadata)

    forget_all_binaries()  # the memo the full path wrote holds the new binaries
    looked_up.clear()
    load([str(manifest)])
    assert looked_up == [] and [kernel.binaries.direct_of(binary).binary.metadata
                                for binary in kernel.binaries.held()] == metadata


def test_a_triton_setting_or_jitkern_setting_is_another_deployment(deployment, monkeypatch):
    manifest, _entries, _calls = deployment
    fingerprint = load_memo.deployment_fingerprint([str(manifest)])
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    assert load_memo.deployment_fingerprint([str(manifest)]) != fingerprint
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION")
    with settings.scope(lock_digest="0" * 64):
        assert load_memo.deployment_fingerprint([str(manifest)]) != fingerprint
    assert load_memo.deployment_fingerprint([str(manifest)]) == fingerprint


def damage_binary(entry):
    (binary,) = entry.glob("*.cubin")
    binary.write_bytes(binary.read_bytes()[:100])


def damage_an_ir_file(entry):
    (ptx,) = entry.glob("*.ptx")
    ptx.unlink()


def damage_the_metadata(entry):
    (group,) = entry.glob("__grp__*.json")
    (entry / group.name.removeprefix("__grp__")).unlink()


@pytest.mark.parametrize("damage,deployment", [(damage_binary, False), (damage_the_metadata, False),
                                               (damage_an_ir_file, True)], indirect=["deployment"])
def test_an_entry_damaged_since_the_memo_is_never_loaded(deployment, damage):
    """The memo's path checks each entry as the cache manager does; on a problem the full
    path runs and names the key, as it would without a memo."""
    manifest, entries, _calls = deployment
    load([str(manifest)])
    victim = sorted(entries, key=str)[0]
    damage(entries[victim])
    forget_all_binaries()
    with pytest.raises(MissingBinary, match=rf"{AXPY}\[{key_name(victim)}\]"), pytest.warns(DamagedCacheEntry):
        load([str(manifest)])
    assert victim.layout not in registry.get_kernel(AXPY).binaries.layouts_of(victim.key)


@pytest.mark.parametrize("rewritten,deployment", [("cubin", False), ("ptx", True)], indirect=["deployment"])
def test_an_entry_that_no_longer_matches_the_pinned_lock_is_refused(deployment, triton_cache, rewritten):
    manifest, entries, _calls = deployment
    plan, _note = resolve([str(manifest)], "cuda:90")
    _path, digest, _held = write_lock(str(triton_cache), build_lock(tasks_of(plan)).lock)
    with settings.scope(lock_digest=digest):
        load([str(manifest)])
        victim = sorted(entries, key=str)[0]
        (file,) = entries[victim].glob(f"*.{rewritten}")
        text = file.read_bytes()
        file.write_bytes(text[:-1] + (b" " if text[-1:] != b" " else b"\n"))  # same size, other bytes
        forget_all_binaries()
        with pytest.raises(MissingBinary, match="does not match the lock"), pytest.warns(DamagedCacheEntry):
            load([str(manifest)])


@pytest.mark.parametrize("memo", [False, True], ids=["full path", "from the memo"])
def test_load_never_collects_the_whole_heap_and_leaves_the_collector_as_it_was(deployment, memo):
    """``load()`` builds thousands of lasting objects: with the collector on, they could set
    off a full collection of every object in the process. Thresholds of 1 make a
    collection due at almost every allocation: none may run inside ``load()``."""
    manifest, _entries, _calls = deployment
    if memo:
        load([str(manifest)])
        forget_all_binaries()
    collected, loading = [], []

    def on_collect(phase, info):
        if phase == "start" and loading:
            collected.append(info["generation"])

    def load_and_note_collections():
        gc.collect()  # the collector's counts at zero: what ran before this test cannot set one off
        loading.append(True)
        load([str(manifest)])
        loading.clear()

    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(on_collect)
    try:
        load_and_note_collections()
        assert gc.isenabled()
        gc.disable()
        load_and_note_collections()
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.callbacks.remove(on_collect)
        gc.set_threshold(*thresholds)
    # The first load: the few allocations of entering the pause, then, at its end, the young
    # generations (its own objects) once (unpaused: hundreds); the second load, collector off: none.
    assert 2 not in collected and collected[-1:] == [1] and len(collected) <= 4, collected


@pytest.mark.parametrize("memo", [False, True], ids=["full path", "from the memo"])
def test_load_rehearses_each_kernel_with_an_empty_grid_and_never_with_a_hook_set(deployment, memo):
    """The rehearsal (``jitkern.serve.rehearsal``) runs one launch of a binary held, whose grid is
    empty (Triton's launcher then returns before the driver), and goes nowhere else:
    Triton's own path would look the binary up, or compile."""
    import triton

    from jitkern.launch import BinaryTable

    manifest, _entries, calls = deployment
    if memo:
        load([str(manifest)])
        forget_all_binaries()
    calls.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BinaryTable, "_launch_through_triton", lambda *args: pytest.fail("Triton's path ran"))
        load([str(manifest)])
    assert [(name, grid) for name, grid, *_ in calls] == [("_axpy_kernel", (0, 1, 1))]  # one rehearsal: one key, one launch

    forget_all_binaries()
    calls.clear()
    seen = []
    triton.knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        load([str(manifest)])
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(seen.append)
    assert calls == [] and seen == []

    forget_all_binaries()
    calls.clear()
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.launch_enter_hook = None  # how users clear a hook: none is set
        load([str(manifest)])
    assert [(name, grid) for name, grid, *_ in calls] == [("_axpy_kernel", (0, 1, 1))]


def test_a_rehearsal_no_binary_takes_never_reaches_triton(deployment, monkeypatch):
    """When no binary held takes the rehearsal's launch, the kernel's launch would go to
    Triton (a lookup, or a compile): in a rehearsal it raises instead, the kernel is not
    rehearsed, and launches after ``load()`` take Triton's path again as usual."""
    from jitkern.examples.axpy import AxpyKernel
    from jitkern.launch import BinaryTable
    from jitkern.launch.spec import active_launch

    manifest, entries, calls = deployment
    triton_runs, run = [], AxpyKernel.kernel.run

    def counted_run(*args, **kwargs):  # load()'s own lookups are warmups
        if not kwargs.get("warmup"):
            triton_runs.append(kwargs)
        return run(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(BinaryTable, "_direct_launch_of", lambda self, key: lambda kwargs, grid: False)
        patch.setattr(BinaryTable, "_launch_another_layout", lambda self, spec: None)
        patch.setattr(AxpyKernel.kernel, "run", counted_run)
        (loaded,) = load([str(manifest)])
        assert loaded.binaries == len(entries) and calls == [] and triton_runs == []
        assert not active_launch.rehearsing
        x = torch.randn(64)
        axpy(x, x, 0.5, out=torch.empty(64))
        assert len(triton_runs) == 1  # outside a rehearsal, Triton's path as ever


def test_a_rehearsal_that_fails_leaves_load_whole(deployment, monkeypatch):
    """A kernel whose checks refuse the rehearsal's tensors (any error) is simply not
    rehearsed: ``load()`` still loads everything, and launches work."""
    from jitkern.examples.axpy import AxpyKernel

    manifest, entries, calls = deployment

    def refusing(self, *args, **inputs):
        raise RuntimeError("not on these tensors")

    with monkeypatch.context() as patch:
        patch.setattr(AxpyKernel, "launch_spec", refusing)
        (loaded,) = load([str(manifest)])
    assert loaded.binaries == len(entries) and calls == []
    x = torch.randn(64)
    axpy(x, x, 0.5, out=torch.empty(64))
    assert [grid for _name, grid, *_ in calls] == [(1, 1, 1)]


def test_a_memo_load_writes_each_cuda_launcher_source_once_per_signature(monkeypatch):
    """CUDA's ``make_launcher`` writes the same C source for binaries whose argument types
    match, whatever their constants' values; a memo ``load()`` asks it once per signature."""
    from triton.backends.nvidia import driver as cuda_driver

    signature = {"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    other_types = {**signature, "n": "i64"}
    written = []
    make_launcher = cuda_driver.make_launcher
    monkeypatch.setattr(cuda_driver, "make_launcher", lambda *args: written.append(args) or make_launcher(*args))
    assert make_launcher({(3,): 128}, signature, None) == make_launcher({(3,): 256, (2,): 16}, signature, None)
    with compiled.sharing_identical_work():
        sources = [cuda_driver.make_launcher(constants, types, None)
                   for constants, types in [({(3,): 128}, signature), ({(3,): 256}, signature), ({(3,): 128}, other_types)]]
    assert sources[0] == sources[1] != sources[2]
    assert [types for _, types, _ in written] == [signature, other_types]
    assert cuda_driver.make_launcher.__name__ == "<lambda>"  # put back as it was


def test_a_host_module_kept_for_a_source_stays_that_source_s_module(triton_cache):
    """Every launcher is one extension module name, ``__triton_launcher``: CPython imports a
    file of it loaded before into the one module object ``sys.modules`` holds under that
    name, and replaces its attributes with that file's. The module a memo ``load()`` keeps
    for a source must still be that source's once another launcher is imported again."""
    from triton.runtime import build

    def source(value: int) -> str:
        return f"""
#include <Python.h>
static PyObject *value(PyObject *self, PyObject *args) {{ return PyLong_FromLong({value}); }}
static PyMethodDef methods[] = {{{{"value", value, METH_NOARGS, NULL}}, {{NULL, NULL, 0, NULL}}}};
static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "jitkern_same_name", NULL, -1, methods}};
PyMODINIT_FUNC PyInit_jitkern_same_name(void) {{ return PyModule_Create(&def); }}
"""

    sources = {value: source(value) for value in (1, 2)}
    for text in sources.values():  # loaded once before, as an earlier load() or launch does
        build.compile_module_from_src(text, "jitkern_same_name")
    with compiled.sharing_identical_work():  # which keeps one module a source
        one = build.compile_module_from_src(sources[1], "jitkern_same_name")
        two = build.compile_module_from_src(sources[2], "jitkern_same_name")
        assert build.compile_module_from_src(sources[1], "jitkern_same_name") is one
    assert one.value() == 1 and two.value() == 2
