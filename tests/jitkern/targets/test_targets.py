"""GPU targets: names, what kernels may use on each, PDL where a target has none, every
shipped kernel for every supported target, AMD caches from another install location, and
AMD launches finding the binaries warmup built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from warmup_testing import EXAMPLE, REPO, cache_entries, example_manifest, report_of, totals, warmup

from jitkern import settings
from jitkern.targets import (
    INTERPRETER,
    SUPPORTED_TARGETS,
    Target,
    target_of,
    fit_launch_options,
    parse_target,
    parse_targets,
)

MANIFESTS = REPO / "warmup_manifests"
AXPY = "jitkern.example.axpy"


def target(name: str, portable: bool = False) -> Target:
    return target_of(parse_target(name), portable)


def small_manifest(path: Path, dtype: str, targets: list[str] = ["cuda:90"]) -> Path:  # noqa: B006
    """The example kernel in one dtype, every pointer aligned: 3 keys (n_elements 1, i32/16, i32)."""
    document = dict(json.loads(EXAMPLE.read_text()), targets=targets)
    document.pop("layout")
    document["kernels"][0]["config"] = {"dtypes": [dtype]}
    path.write_text(json.dumps(document))
    return path


# --- names and features (no compiling) ----------------------------------------------------


def test_every_supported_target_parses_with_its_warp_size():
    warps = {name: parse_target(name).warp_size for name in SUPPORTED_TARGETS}
    assert warps == {"cuda:80": 32, "cuda:86": 32, "cuda:89": 32, "cuda:90": 32, "cuda:100": 32, "cuda:120": 32,
                     "hip:gfx942": 64, "hip:gfx950": 64}
    assert parse_target("hip:gfx1100").warp_size == 32  # RDNA: wave32, as Triton's AMD backend has it
    assert parse_target("hip:gfx90a").arch == "gfx90a"


@pytest.mark.parametrize("bad", ["cuda:90a", "cuda:", "cuda:x", "CUDA:90", "cuda:٩٠", "rocm:90", "hip:942",
                                 "hip:gfx9", "hip:GFX942", "cuda:90,cuda:80", ""])
def test_a_bad_target_name_is_refused_with_the_expected_forms(bad):
    with pytest.raises(ValueError, match=r"expected cuda:<compute capability> \(e\.g\. cuda:90\) or hip:<gfx arch>"):
        parse_target(bad)


@pytest.mark.parametrize("unknown", ["cuda:999", "cuda:88", "cuda:10", "hip:gfx000", "hip:gfx940", "hip:gfx9ff"])
def test_a_target_triton_cannot_compile_for_is_refused_naming_those_it_can(unknown):
    """Of the right form but no GPU Triton compiles for: each key would fail (or end the worker)."""
    backend = unknown.split(":")[0]
    with pytest.raises(ValueError, match=rf"target '{unknown}': Triton 3\.6\.0 compiles for no such GPU; "
                                         rf"its {backend} targets: {backend}:") as refused:
        parse_targets(f"cuda:90,{unknown}")
    assert all(name in str(refused.value) for name in SUPPORTED_TARGETS if name.startswith(backend))


def test_a_target_list_is_checked_and_deduplicated():
    assert parse_targets("cuda:80, hip:gfx942,cuda:80") == ["cuda:80", "hip:gfx942"]
    with pytest.raises(ValueError, match="an empty name"):
        parse_targets("cuda:80,,hip:gfx942")
    with pytest.raises(ValueError, match="'hip:mi300'"):
        parse_targets("cuda:80,hip:mi300")


def test_what_eachtarget_offers_kernels():
    offers = lambda t: (t.ptx, t.cuda_at_least(89), t.pdl)  # noqa: E731
    assert offers(target("cuda:80")) == offers(target("cuda:86")) == (True, False, False)
    assert offers(target("cuda:89")) == (True, True, False)
    assert offers(target("cuda:90")) == offers(target("cuda:100")) == offers(target("cuda:120")) == (True, True, True)
    assert offers(target("hip:gfx942")) == offers(target("hip:gfx950")) == (False, False, False)
    assert offers(target("cuda:90", portable=True)) == (False, False, False)
    assert offers(INTERPRETER) == (False, False, False)


def test_launch_options_are_fitted_to_the_target():
    asked = dict(BLOCK=16, num_warps=1, maxnreg=200, launch_pdl=True, enable_fp_fusion=False)
    assert fit_launch_options(asked, target("cuda:90")) == (asked, [])
    on_a100, notes = fit_launch_options(asked, target("cuda:80"))
    assert on_a100 == dict(asked, launch_pdl=False)
    assert notes == ["launch_pdl=True built without PDL: cuda:80 has no programmatic dependent launch "
                     "(NVIDIA sm_90 and newer have it)"]
    on_mi300, notes = fit_launch_options(asked, target("hip:gfx942"))
    assert on_mi300 == dict(BLOCK=16, num_warps=1, enable_fp_fusion=False)  # maxnreg, launch_pdl: CUDA options
    assert len(notes) == 1 and "hip:gfx942 has no programmatic dependent launch" in notes[0]
    portable, notes = fit_launch_options(asked, target("cuda:90", portable=True))
    assert not portable["launch_pdl"] and "JITKERN_PORTABLE_PATHS=1" in notes[0]
    assert fit_launch_options(dict(typo_option=1), target("hip:gfx942"))[0] == dict(typo_option=1)  # Triton refuses it


def test_the_amd_key_holds_library_contents_not_their_folder(tmp_path):
    from triton.backends.amd.compiler import HIPOptions

    options = HIPOptions(arch="gfx942")
    libraries = dict(options.extern_libs)
    for name, path in libraries.items():
        shutil.copy(path, tmp_path / os.path.basename(path))
    moved = HIPOptions(arch="gfx942")
    object.__setattr__(moved, "extern_libs", tuple((name, str(tmp_path / os.path.basename(path)))
                                                   for name, path in libraries.items()))
    assert HIPOptions.hash.triton_hash(moved) != HIPOptions.hash.triton_hash(options)  # Triton's: the path
    assert moved.hash() == options.hash()
    (tmp_path / "ocml.bc").write_bytes((tmp_path / "ocml.bc").read_bytes() + b"\0")
    assert moved.hash() != options.hash()


# --- the CLI: targets kept apart -------------------------------------------------------------


@pytest.mark.compiled
def test_targets_are_compiled_checked_and_listed_apart(tmp_path):
    cache = tmp_path / "cache"
    manifest = small_manifest(tmp_path / "axpy.json", "float32")
    first = report_of([manifest, "--target", "cuda:80,hip:gfx942", "--jobs", "1"], cache, tmp_path)
    assert [(row["target"], row["keys"], row["compiled"]) for row in first["kernels"]] == \
        [("cuda:80", 3, 3), ("hip:gfx942", 3, 3)]
    assert sorted(maker["target"] for maker in json.loads((cache / "jitkern-identity.json").read_text())["makers"]) \
        == ["cuda:80", "hip:gfx942"]
    assert len([e for e in cache_entries(cache) if list(e.glob("*.hsaco"))]) == 3
    assert len([e for e in cache_entries(cache) if list(e.glob("*.cubin"))]) == 3

    listed = warmup(manifest, "--target", "cuda:80,hip:gfx942", "--list", cache_dir=cache).stdout.splitlines()
    assert listed[-1] == "6 binary keys: 3 for cuda:80, 3 for hip:gfx942"
    assert sum(line.split("  # ")[0].endswith("] for hip:gfx942") for line in listed) == 3

    check = warmup(manifest, "--target", "hip:gfx942,cuda:80", "--check", cache_dir=cache)
    assert check.returncode == 0 and "all 6 keys in the cache, whole" in check.stdout
    (victim,) = [e for e in cache_entries(cache) if list(e.glob("*.hsaco"))][:1]
    shutil.rmtree(victim)
    check = warmup(manifest, "--target", "cuda:80,hip:gfx942", "--check", cache_dir=cache)
    assert check.returncode == 1 and "1 of 6 keys cannot be used from the cache" in check.stdout
    (missing,) = [line for line in check.stdout.splitlines() if line.startswith(f"  {AXPY}[")]
    assert missing.endswith("for hip:gfx942: not in the cache")
    assert warmup(manifest, "--target", "cuda:80", "--check", cache_dir=cache).returncode == 0
    another = warmup(manifest, "--target", "cuda:90", "--jobs", "1", cache_dir=cache).stdout.splitlines()
    assert another[-1].endswith("): 3 keys of this run, 9 in all"), another[-3:]  # the lock holds every target's


@pytest.mark.compiled
def test_load_takes_this_gpus_target_from_a_multi_target_cache(triton_cache, tmp_path):
    from jitkern import hooks
    from jitkern.kernel import registry
    from jitkern.examples import axpy  # noqa: F401 - registers the kernel
    from jitkern.testing import dry_run_gpu
    from jitkern.serve import MissingBinary, load

    manifest = small_manifest(tmp_path / "axpy.json", "float16", ["cuda:80", "hip:gfx942"])
    assert warmup(manifest, "--jobs", "1", cache_dir=triton_cache).returncode == 0
    fresh = []
    with hooks.watching(on_compile=lambda *, cache_hit, **_: fresh.append(not cache_hit)):
        for gpu in ("hip:gfx942", "cuda:80"):
            registry.get_kernel(AXPY).binaries.forget()
            with dry_run_gpu(gpu):
                (loaded,) = load([str(manifest)])
            assert loaded.binaries == 3
    assert fresh and not any(fresh)
    registry.get_kernel(AXPY).binaries.forget()
    with dry_run_gpu("cuda:90"), pytest.raises(MissingBinary) as missing:
        load([str(manifest)])
    assert "3 of 3 keys are not usable in the cache" in str(missing.value) and "for cuda:90" in str(missing.value)
    assert f"{manifest} do not list cuda:90 among their targets: build with --target cuda:90" in str(missing.value)


@pytest.mark.compiled
def test_load_on_a_machine_with_no_gpu_says_so_in_one_line(triton_cache, tmp_path):
    """A serving process started where there is no GPU (a CPU node, a container without the
    driver): one error naming the problem, not Triton's traceback about active drivers."""
    from jitkern.serve import load

    manifest = small_manifest(tmp_path / "axpy.json", "float32")
    assert warmup(manifest, "--jobs", "1", cache_dir=triton_cache).returncode == 0
    with pytest.raises(RuntimeError) as refused:  # jitkern.warmup.NoGPU
        load([str(manifest)])
    assert type(refused.value).__name__ == "NoGPU"
    assert str(refused.value).startswith("load() loads the binaries onto this machine's GPU, and there is none here")
    assert len(str(refused.value).splitlines()) == 1


@pytest.mark.compiled
def test_a_launch_on_a_machine_with_no_gpu_says_so_in_one_line():
    """CPU tensors passed to a public function outside the interpreter, where no GPU is:
    the error says what is missing and how to run on the CPU, not Triton's driver count."""
    import torch

    from jitkern.examples.axpy import axpy
    from jitkern.targets import NoGPU

    with pytest.raises(NoGPU, match=r"^jitkern\.example\.axpy: a launch needs a GPU, and there is none here "
                                    r"\(on the CPU, Triton's interpreter runs kernels: TRITON_INTERPRET=1"):
        axpy(torch.randn(8), torch.randn(8), 2.0)


@pytest.mark.compiled
def test_without_a_target_each_manifest_is_compiled_for_its_own_targets(tmp_path):
    a100 = small_manifest(tmp_path / "a100.json", "float32", ["cuda:80"])
    mi300 = small_manifest(tmp_path / "mi300.json", "float16", ["hip:gfx942", "hip:gfx950"])
    report = report_of([a100, mi300, "--jobs", "1"], tmp_path / "cache", tmp_path)
    assert report["targets"] == ["cuda:80", "hip:gfx942", "hip:gfx950"]
    assert {row["target"]: row["keys"] for row in report["kernels"]} == {"cuda:80": 3, "hip:gfx942": 3, "hip:gfx950": 3}


# --- every shipped kernel, every target ---------------------------------------------------


def _one_key_of_each_kernel():
    """(kernel, binary key) of each shipped kernel (both PDL variants of DeepSeek V4's)."""
    from jitkern.manifest import load_manifest

    chosen = {}
    for path in ("step5-bs256-mtp3.json", "deepseek_v4-h200.json", "jitkern-example.json"):
        for entry in load_manifest(MANIFESTS / path).entries:
            key = entry.keys[0]
            chosen.setdefault((entry.kernel.name, getattr(key.key, "launch_pdl", None)), (entry.kernel, key))
    return list(chosen.values())


@pytest.mark.compiled
@pytest.mark.parametrize("name", SUPPORTED_TARGETS)
def test_every_shipped_kernel_compiles_for_every_target_with_its_own_code_paths(name, triton_cache):
    """Hardware conversions, inline PTX and PDL where the target has them, the portable
    paths where it does not: never a compiler failure."""
    from jitkern.build.compile import target_notes
    from jitkern.targets import compile_only

    gpu = parse_target(name)
    offers = target(name)
    with compile_only(gpu):
        for kernel, key in _one_key_of_each_kernel():
            binary = kernel.compile(key)
            code = binary.asm["ptx"] if gpu.backend == "cuda" else binary.asm["amdgcn"]
            pdl = getattr(key.key, "launch_pdl", False)
            assert binary.metadata.target == gpu
            assert ("griddepcontrol" in code) == (pdl and offers.pdl), kernel.name
            assert bool(target_notes(kernel, key)) == (pdl and not offers.pdl)
            if gpu.backend == "cuda":
                assert getattr(binary.metadata, "launch_pdl") == (pdl and offers.pdl)
            if kernel.name == "step5.update_decode":
                # sm_89 converts through f16 (round to zero, exact for bf16 values up to 65504; beyond, both saturate)
                assert ("cvt.rn.satfinite.e4m3x2" in code) == offers.cuda_at_least(89)
                assert ("ex2.approx.ftz.f32" in code) == ("fence.acq_rel.cta" in code) == offers.ptx
                if gpu.backend == "hip":
                    assert "fp8" not in code.lower()  # AMD's fp8 is fnuz; the cache stores OCP e4m3


@pytest.mark.compiled
def test_portable_paths_on_an_nvidia_target(triton_cache):
    """JITKERN_PORTABLE_PATHS=1: cuda:90 compiles what sm_80 and AMD do, as other binaries."""
    from jitkern.targets import compile_only

    kernels = {(kernel.name, getattr(key.key, "launch_pdl", None)): (kernel, key)
               for kernel, key in _one_key_of_each_kernel()}
    decode, decode_key = kernels[("step5.update_decode", None)]
    store, pdl_key = kernels[("deepseek_v4.save_partial_states", True)]
    with compile_only(parse_target("cuda:90")):
        native = decode.compile(decode_key)
        with settings.scope(portable_paths=True):
            portable = decode.compile(decode_key)
            plain = store.compile(pdl_key)
            assert decode.constants_for(decode_key.key)["NVIDIA"] is False
        assert decode.constants_for(decode_key.key)["NVIDIA"] is True  # kept per target
    assert native.hash != portable.hash
    assert "ex2.approx.ftz.f32" in native.asm["ptx"] and "cvt.rn.satfinite.e4m3x2.f32" in native.asm["ptx"]
    for marker in ("ex2.approx.ftz.f32", "fence.acq_rel.cta", "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.bf16.f32"):
        assert marker not in portable.asm["ptx"], marker
    assert "griddepcontrol" not in plain.asm["ptx"] and not plain.metadata.launch_pdl


@pytest.mark.compiled
def test_pdl_keys_on_a_target_without_pdl_are_the_plain_variant_with_a_note(tmp_path):
    """The H200 manifest for cuda:80: its launch_pdl keys compile, without PDL, to the
    binaries of their plain twins (so: found in the cache), and the report says so."""
    document = json.loads((MANIFESTS / "deepseek_v4-h200.json").read_text())
    document["kernels"] = [entry for entry in document["kernels"]
                           if entry["config"]["head_dim"] == 128 and entry["config"]["compress_ratio"] == 4
                           and entry["kernel"] == "deepseek_v4.save_partial_states"]
    manifest = tmp_path / "pdl.json"
    manifest.write_text(json.dumps(document))
    report = tmp_path / "report.json"
    run = warmup(manifest, "--target", "cuda:80", "--jobs", "1", "--report", report, cache_dir=tmp_path / "cache")
    assert run.returncode == 0, run.stdout + run.stderr
    (row,) = json.loads(report.read_text())["kernels"]
    assert (row["keys"], row["compiled"], row["cached"], row["failed"]) == (8, 4, 4, 0)
    assert row["notes"] == {"launch_pdl=True built without PDL: cuda:80 has no programmatic dependent launch "
                            "(NVIDIA sm_90 and newer have it)": 4}
    assert "4 noted" in run.stdout
    assert ("note: deepseek_v4.save_partial_states for cuda:80: 4 keys: launch_pdl=True built without PDL"
            in run.stdout)


# --- AMD: a cache built at one install location, used from another ---------------------------


def _triton_elsewhere(folder: Path) -> Path:
    """A copy of the installed ``triton`` package under ``folder``: its sources, their
    bytecode (valid there: the copies keep their times) and device libraries copied, its
    large binaries (libtriton, ptxas) linked."""
    import triton

    source = Path(triton.__file__).parent
    for root, _directories, files in os.walk(source):
        here = folder / "triton" / Path(root).relative_to(source)
        here.mkdir(parents=True, exist_ok=True)
        for name in files:
            path = Path(root) / name
            if path.stat().st_size > 1 << 20:
                (here / name).symlink_to(path)
            else:
                shutil.copy2(path, here / name)
    return folder


_FROM_THE_COPY = """
import sys, triton, jitkern
assert triton.__file__.startswith(sys.argv[1]), triton.__file__
if sys.argv[2] == "triton-key":  # Triton's own key of AMD binaries, which holds its install path
    from triton.backends.amd.compiler import HIPOptions
    HIPOptions.hash = HIPOptions.hash.triton_hash
from jitkern.warmup import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.compiled
def test_an_amd_cache_is_found_by_a_triton_installed_elsewhere(tmp_path):
    manifest = small_manifest(tmp_path / "axpy.json", "bfloat16")
    cache = tmp_path / "cache"
    built = report_of([manifest, "--target", "hip:gfx942", "--jobs", "1"], cache, tmp_path)
    assert totals(built) == {"keys": 3, "compiled": 3, "cached": 0, "failed": 0}

    elsewhere = _triton_elsewhere(tmp_path / "elsewhere")
    environment = dict(os.environ, PYTHONPATH=str(elsewhere), TRITON_CACHE_DIR=str(cache), TRITON_INTERPRET="0")

    def check(key: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _FROM_THE_COPY, str(elsewhere), key, str(manifest),
                               "--target", "hip:gfx942", "--check", "--no-progress"],
                              cwd=REPO, env=environment, capture_output=True, text=True)

    found = check("jitkern-key")
    assert found.returncode == 0 and "all 3 keys in the cache, whole" in found.stdout, found.stdout + found.stderr
    missed = check("triton-key")  # what this test guards against: with Triton's key, nothing is found
    assert missed.returncode == 1 and "3 of 3 keys cannot be used from the cache" in missed.stdout, missed.stdout


@pytest.mark.compiled
def test_an_amd_cache_keyed_by_install_path_is_named_in_one_line(tmp_path):
    """A cache an AMD compiler made with Triton's own key (a jitkern before the path-free
    key): --check says so, with the count, instead of listing every key."""
    from jitkern.cache.identity import compiler_identity, record_identity

    manifest = small_manifest(tmp_path / "axpy.json", "float32", ["hip:gfx942"])
    cache = tmp_path / "cache"
    cache.mkdir()
    maker = compiler_identity("hip:gfx942")
    del maker["amd_key"]
    record_identity(str(cache), maker)
    check = warmup(manifest, "--check", cache_dir=cache)
    assert check.returncode == 1
    (line,) = [line for line in check.stdout.splitlines() if line.startswith("this cache was made by")]
    assert "AMD keys holding Triton's install path" in line.split("; this process is ")[0]
    assert "path-free AMD keys" in line.split("; this process is ")[1] and line.endswith("3 of 3 keys would recompile")


# --- AMD: real launches look up the binaries warmup built -------------------------------------


@pytest.mark.compiled
def test_hip_launches_look_up_the_binaries_warmup_built(triton_cache):
    """Triton's AMD backend also specialises a pointer on whether its storage spans at most
    2 GiB (buffer loads): warmup's stand-ins must specialise as a real tensor does. A tensor
    over 2 GiB needs another binary, and the miss says why."""
    import torch

    from jitkern import TritonWarmupTensor, testing
    from jitkern.kernel import registry
    from jitkern.examples.axpy import AxpyKernel, axpy
    from jitkern.manifest import load_manifest, manifest_keys

    kernel = AxpyKernel()
    kernel.binaries.forget()
    every_offset = {"unaligned": ["x", "y", "out"]}
    warmed = manifest_keys(load_manifest(example_manifest(triton_cache.parent / "fp16.json", every_offset,
                                                          dtypes=["float16"])))
    with testing.record_launches(dry_run=True) as launches:
        for n in (1, 16, 17, 1000):
            for offset in (0, 1):
                x, y = torch.randn(n + offset, dtype=torch.float16)[offset:], torch.randn(n, dtype=torch.float16)
                axpy(x, y, 0.5, out=torch.empty(n + 2 * offset, dtype=torch.float16)[offset: n + offset])
    with testing.dry_run_gpu("hip:gfx942"):
        assert testing.uncovered_by_warmup(launches, warmed) == []
        big = TritonWarmupTensor(torch.float16, (16,), storage_bytes=2**31)
        with testing.record_launches(dry_run=True) as large:
            kernel(x=TritonWarmupTensor(torch.float16, (16,)), y=TritonWarmupTensor(torch.float16, (16,)), out=big,
                   alpha=0.5)
        (miss,) = testing.uncovered_by_warmup(large, warmed)
        assert "out: a fp16 tensor 16-byte aligned, its storage over 2 GiB; warmed binaries cover " in miss, miss
        # what the README says to do: the binary as an explicit key, for the AMD targets
        explicit = triton_cache.parent / "large.json"
        explicit.write_text(json.dumps({
            "format_version": 1, "name": "large", "targets": ["hip:gfx942"], "modules": ["jitkern.examples.axpy"],
            "kernels": [{"kernel": AXPY, "keys": [{"dtype": "float16", "block_size": 1024,
                                                   "layout": "Out_ptr:*fp16/16/large"}]}]}))
        (large_key,) = manifest_keys(load_manifest(explicit))[AXPY]
        assert testing.uncovered_by_warmup(large, {AXPY: warmed[AXPY] + [large_key]}) == []
    assert registry.get_kernel(AXPY) is kernel


@pytest.mark.compiled
def test_compile_only_takes_a_target_by_name_and_cpu_tensors_have_pdl_as_it_does():
    import torch

    from jitkern.kernel.validation import device_has_pdl
    from jitkern.targets import compile_only, current

    for name, pdl in (("cuda:90", True), ("cuda:80", False), ("hip:gfx942", False)):
        with compile_only(name):
            assert (current().name, device_has_pdl(torch.device("cpu"))) == (name, pdl)
