"""A whole serving schedule per shipped deployment, checked after every step.

Requests arrive and finish; prompts are prefilled in chunks of random lengths, mixed with
decode tokens of other requests in the same (prefill-path) batch; pure decode steps and
speculative verify steps with random acceptance follow, with CUDA-graph padding. After
every step the spec's invariant must hold: the summary of every region closed by
accepted tokens equals the reference summary of the accepted rows, and the ring holds
the accepted rows of every open region. Every launch's key must be one the
deployment's manifest enumerates (cache hits after warmup). A compiled-mode test
compiles the manifests for cuda:90 and checks the same launches at Triton's level.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from jitkern.manifest import ManifestError, load_manifest, manifest_keys
from jitkern.testing import missing_from, record_launches
from step5 import Step5CSATailRing, Step5SparseSummaryCache
from step5.ops.summary_update import build_prefill_groups
from step5.reference import ReferenceSchedule, assert_summaries_close, gather_summaries
from step5_testing import BlockTables, poisoned_mean, random_rows

MANIFESTS = sorted((Path(__file__).resolve().parents[2] / "warmup_manifests").glob("step5-*.json"))
# A deployment whose key and z come in several layouts (tests/manifests/step5-views.json declares them).
VIEWS_MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "step5-views.json"
VALUES_MANIFEST = VIEWS_MANIFEST.with_name("step5-values.json")  # the same deployment, declared by values
CONFIG_MANIFESTS = sorted(VIEWS_MANIFEST.with_name("step5-configs").glob("*.json"))  # by values, one per configuration
MIXED_ROWS = ["contiguous", "fused", "odd_rows", "z_offset"]


def deployment(path: Path) -> tuple[int, int, int]:
    """(block size, draft tokens, ring capacity) of a manifest, read from its entries."""
    configs = {entry["kernel"]: entry["config"] for entry in json.loads(path.read_text())["kernels"]}
    decode = configs["step5.update_decode"]
    draft_tokens = configs.get("step5.update_verify", {}).get("draft_tokens", 0)
    return decode["block_size"], draft_tokens, decode["ring_capacity"]


class Schedule:
    """The engine's side of the schedule: requests, their KV blocks and ring rows."""

    def __init__(self, block_size: int, draft_tokens: int, capacity: int, max_requests: int = 5,
                 rows: str | None = None, chunks: tuple[int, int] = (1, 48), prompts: tuple[int, int] = (9, 150)):
        """``rows``: the layout of every step's key and z (``random_rows``), or ``"mixed"``
        for a random one each step; by default each kind of step has its own. ``chunks`` and
        ``prompts``: the range of a request's prefill chunk and of its prompt, in tokens; by
        default a mixed step has at most 243 tokens, and with longer chunks it may reach the
        256 that take the prefill in two launches (``step5.ops.prefill_fused``)."""
        self.block_size, self.k = block_size, draft_tokens
        self.rows = rows
        self.chunks, self.prompts = chunks, prompts
        blocks = max_requests * (-(-(prompts[1] + 50) // block_size) + 1)
        self.tables = BlockTables(num_blocks=blocks, block_size=block_size)
        self.ring = Step5CSATailRing(max_requests, max(256, max_requests * chunks[1] + 3), draft_tokens=draft_tokens,
                                     capacity=capacity)
        self.ring.rows.fill_(-7.0)  # poison: rows nobody stored show up
        self.cache = Step5SparseSummaryCache(poisoned_mean(len(self.tables.free), block_size, strided=True))
        self.reference = ReferenceSchedule(block_size)
        self.prompt: dict[int, int] = {}  # request -> prompt length (prefill until reached)
        self.next_id = 0

    def _rows(self, default: str) -> str:
        if self.rows == "mixed":
            return random.choice(MIXED_ROWS)
        return self.rows or default

    # --- requests ------------------------------------------------------------------------

    def arrive(self) -> None:
        request = self.next_id
        self.next_id += 1
        self.ring.allocate(request)
        self.reference.add(request, [])
        self.prompt[request] = random.randint(*self.prompts)

    def finish(self, request: int) -> None:
        self.ring.free(request)
        self.tables.give_back(self.reference.requests[request].block_table)
        self.reference.remove(request)
        del self.prompt[request]

    def _slots(self, request: int, first: int, count: int) -> list[int]:
        state = self.reference.requests[request]
        while len(state.block_table) * self.block_size < first + count:
            state.block_table += self.tables.take(1)
        return [state.slot(p) for p in range(first, first + count)]

    def length(self, request: int) -> int:
        return self.reference.requests[request].length

    def prefilling(self) -> list[int]:
        return [r for r in self.prompt if self.length(r) < self.prompt[r]]

    # --- steps -----------------------------------------------------------------------------

    def mixed_step(self) -> None:
        """Chunked prefill and decode tokens in one batch, through the prefill path."""
        requests = list(self.prompt)
        random.shuffle(requests)
        firsts = [self.length(r) for r in requests]
        counts = [min(random.randint(*self.chunks), self.prompt[r] - self.length(r)) if r in self.prefilling() else 1
                  for r in requests]
        padding = random.choice([0, 3])
        tokens = sum(counts) + padding
        slots, positions, owners = [], [], []
        for index, (request, first, count) in enumerate(zip(requests, firsts, counts)):
            slots += self._slots(request, first, count)
            positions += range(first, first + count)
            owners += [index] * count
        slots += [-1] * padding
        positions += [0] * padding
        owners += [0] * padding
        starts = torch.tensor([0] + list(torch.tensor(counts).cumsum(0)), dtype=torch.int32)
        key, z = random_rows(tokens, self._rows("fused"))
        self.ring.prepare(requests, firsts, counts, num_tokens=tokens)
        slots_t, positions_t = torch.tensor(slots, dtype=torch.int64), torch.tensor(positions, dtype=torch.int64)
        groups = build_prefill_groups(slots_t, positions_t, torch.tensor(owners, dtype=torch.int32), starts)
        self.cache.update_prefill(key, z, groups, positions_t, self.ring)
        for index, (request, count) in enumerate(zip(requests, counts)):
            start = int(starts[index])
            self.reference.requests[request].accept(key[start : start + count, 0], z[start : start + count, 0])

    def decoding(self) -> list[int]:
        return [r for r in self.prompt if self.length(r) >= self.prompt[r]]

    def decode_step(self) -> None:
        """One token for each request past its prompt (prefilling ones wait)."""
        requests = self.decoding()
        padding = random.choice([0, 2])
        firsts = [self.length(r) for r in requests]
        slots = [self._slots(r, p, 1)[0] for r, p in zip(requests, firsts)] + [-1] * padding
        key, z = random_rows(len(slots), self._rows("contiguous"))
        self.ring.prepare(requests, firsts, [1] * len(requests), num_tokens=len(slots))
        slots_t = torch.tensor(slots, dtype=torch.int64)  # maybe empty: a step with no token is valid
        positions_t = torch.tensor(firsts + [0] * padding, dtype=torch.int64)
        self.cache.update_decode(key, z, slots_t, positions_t, self.ring)
        for index, request in enumerate(requests):
            self.reference.requests[request].accept(key[index : index + 1, 0], z[index : index + 1, 0])

    def verify_step(self) -> None:
        """q = 1 + k tokens per request; a random number of them is accepted."""
        q = 1 + self.k
        requests = self.decoding()
        firsts = [self.length(r) for r in requests]
        slots = [s for r, p in zip(requests, firsts) for s in self._slots(r, p, q)] + [-1] * q  # a padding request
        seq_lens = [p + q for p in firsts] + [0]
        key, z = random_rows(len(slots), self._rows("fused"))
        self.ring.prepare(requests + [None], firsts + [0], [q] * (len(requests) + 1))
        self.cache.update_verify(
            key, z, torch.tensor(slots, dtype=torch.int64), torch.arange(len(seq_lens) + 1, dtype=torch.int32) * q,
            torch.tensor(seq_lens, dtype=torch.int32), self.ring,
        )
        for index, request in enumerate(requests):
            accepted = random.randint(1, q)
            rows = slice(index * q, index * q + accepted)
            self.reference.requests[request].accept(key[rows, 0], z[rows, 0])

    # --- the invariant -------------------------------------------------------------------------

    def check(self, step: int) -> None:
        slots, expected = self.reference.expected()
        assert_summaries_close(gather_summaries(self.cache.mean, slots), expected, f"step {step}: closed regions")
        for request, state in self.reference.requests.items():
            base = self.ring.base_of(request)
            for position in range(state.length // 8 * 8, state.length):
                row = self.ring.rows[base + position % self.ring.capacity]
                assert torch.equal(row, torch.cat([state.key[position], state.z[position]])), (
                    f"step {step}: ring row of request {request} position {position}"
                )


def run_schedule(schedule: Schedule, steps: int) -> list[str]:
    """At least ``steps`` random steps, and more (up to 4x) until every kind of step the
    deployment has (mixed prefill, decode, and verify with speculation) has run."""
    wanted = {"mixed", "decode"} | ({"verify"} if schedule.k else set())
    kinds: list[str] = []
    step = 0
    while step < steps or (not wanted <= set(kinds) and step < 4 * steps):
        for request in list(schedule.prompt):
            if request not in schedule.prefilling() and random.random() < 0.12:
                schedule.finish(request)
        if not schedule.prompt or (schedule.ring.live_requests < schedule.ring.max_requests and random.random() < 0.3):
            schedule.arrive()
        kind = "mixed"
        if schedule.decoding() and random.random() < 0.6:
            kind = random.choice(["decode", "verify"] if schedule.k else ["decode"])
        getattr(schedule, f"{kind}_step")()
        kinds.append(kind)
        schedule.check(step)
        step += 1
    return kinds


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_serving_schedule_keeps_the_invariant_and_hits_the_manifest(manifest):
    block_size, draft_tokens, capacity = deployment(manifest)
    schedule = Schedule(block_size, draft_tokens, capacity)
    with record_launches() as launches:
        kinds = run_schedule(schedule, steps=24)
    assert "mixed" in kinds and "decode" in kinds and ("verify" in kinds or not draft_tokens), kinds
    missing = missing_from(launches, manifest_keys(load_manifest(manifest)))
    assert not missing, f"launches whose key {manifest.name} does not enumerate:\n  " + "\n  ".join(missing)
    launched = {kernel.name for kernel, _ in launches}
    assert {"step5.update_decode", "step5.prefill_summary", "step5.write_ring", "step5.build_prefill_groups"} <= launched


@pytest.mark.compiled
@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
@pytest.mark.parametrize("manifest", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_manifest_compiles_and_covers_the_schedule_launches(manifest, target, triton_cache):
    """Compile every key for the target with no GPU, each filed under the key that
    ``warmed_lookup_key`` names without compiling; then, launching nothing, record a few
    steps of each kind and check each launch looks up a binary that warmup built."""
    from warmup_testing import compile_as_named

    from jitkern.kernel.registry import get_kernel
    from jitkern.targets import compile_only, parse_target
    from jitkern.testing import uncovered_by_warmup

    block_size, draft_tokens, capacity = deployment(manifest)
    launches = a_few_steps_of_each_kind(Schedule(block_size, draft_tokens, capacity))
    keys = manifest_keys(load_manifest(manifest))
    with compile_only(parse_target(target)):
        for name, binaries in keys.items():
            for binary in binaries:
                compile_as_named(get_kernel(name), binary)
        uncovered = uncovered_by_warmup(launches, keys)
    assert not uncovered, "launches no warmed binary serves:\n  " + "\n  ".join(uncovered)


def a_few_steps_of_each_kind(schedule: Schedule):
    """The launches (recorded, not run) of a mixed, a decode and, with draft tokens, a verify step."""
    with record_launches(dry_run=True) as launches:
        for _ in range(3):
            schedule.arrive()
        schedule.prompt[0] = 1  # one request decodes from the second step on, whatever its chunk
        schedule.mixed_step()
        schedule.decode_step()
        if schedule.k:
            schedule.verify_step()
    expected = {"step5.update_decode", "step5.prefill_summary", "step5.write_ring", "step5.build_prefill_groups"}
    assert expected | ({"step5.update_verify"} if schedule.k else set()) == {k.name for k, _ in launches}
    return launches


@pytest.mark.parametrize("manifest", [VIEWS_MANIFEST, VALUES_MANIFEST], ids=["any-strides", "by-values"])
def test_a_schedule_of_mixed_layouts_hits_the_manifest_that_declares_them(manifest):
    """Declared by "strided" (any stride) or by the values the deployment's strides take, the
    manifest serves every launch of the schedule; by values it warms 51 binaries, not 111."""
    block_size, draft_tokens, capacity = deployment(manifest)
    schedule = Schedule(block_size, draft_tokens, capacity, rows="mixed")
    with record_launches() as launches:
        run_schedule(schedule, steps=16)
    keys = manifest_keys(load_manifest(manifest))
    missing = missing_from(launches, keys)
    assert not missing, f"launches {manifest.name} does not enumerate:\n  " + "\n  ".join(missing)
    assert sum(map(len, keys.values())) == {VIEWS_MANIFEST: 111, VALUES_MANIFEST: 51}[manifest]


def long_prefills(block_size: int, draft_tokens: int, capacity: int, rows: str | None) -> Schedule:
    """A schedule whose first step prefills five requests in chunks of 64 tokens or more: at
    least 320 tokens, which take the prefill in two launches (``step5.ops.prefill_fused``)."""
    schedule = Schedule(block_size, draft_tokens, capacity, rows=rows, chunks=(64, 200), prompts=(300, 600))
    for _ in range(schedule.ring.max_requests):
        schedule.arrive()
    return schedule


def test_one_manifest_per_configuration_covers_the_schedule_with_long_prefills_too():
    """The deployment of step5-values.json as its four configurations, one manifest each
    (``tests/manifests/step5-configs/``), warmed together: the mixed schedule hits them,
    prefills in two launches too. Each declares where z starts (``"z": [8]`` where it is a
    slice 8 bytes off 16), so they warm 33 of step5-values.json's 51 binaries."""
    block_size, draft_tokens, capacity = deployment(VALUES_MANIFEST)
    long = long_prefills(block_size, draft_tokens, capacity, rows="mixed")
    with record_launches() as launches:
        run_schedule(Schedule(block_size, draft_tokens, capacity, rows="mixed"), steps=16)
        long.mixed_step()  # about 8 s of the interpreter: one step only
        long.check(0)
    assert {"step5.prefill_update", "step5.build_prefill_groups_filled"} <= {kernel.name for kernel, _ in launches}
    assert [path.stem for path in CONFIG_MANIFESTS] == ["fused", "odd-rows", "separate", "z-offset"]
    keys = manifest_keys(*map(load_manifest, CONFIG_MANIFESTS))
    missing = missing_from(launches, keys)
    assert not missing, "launches the per-configuration manifests do not enumerate:\n  " + "\n  ".join(missing)
    by_values = manifest_keys(load_manifest(VALUES_MANIFEST))
    assert all(set(found) <= set(by_values[name]) for name, found in keys.items())
    assert sum(map(len, keys.values())) == 33


@pytest.mark.compiled
def test_z_sliced_off_a_16_byte_boundary_is_served_by_a_manifest_that_declares_it(tmp_path, triton_cache):
    """The deployment that compiled at serve time before layouts were derived: z a slice of a
    wider projection (8 bytes off 16, odd row stride) while key is aligned. Declared in the
    manifest's layout, every launch finds its binary; left out, the miss names z."""
    from jitkern.targets import compile_only, parse_target
    from jitkern.testing import uncovered_by_warmup

    document = json.loads((MANIFESTS[0].parent / "step5-bs256-mtp3.json").read_text())
    for entry in document["kernels"]:  # one index dtype each: fewer binaries to compile here
        entry["config"] = {name: value[-1:] if isinstance(value, list) else value
                           for name, value in entry["config"].items()}
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(document))
    declared = tmp_path / "declared.json"
    declared.write_text(json.dumps({**document, "layout": {"unaligned": ["z"], "strided": ["z.0"]}}))
    block_size, draft_tokens, capacity = deployment(declared)
    random.seed(7)
    launches = a_few_steps_of_each_kind(Schedule(block_size, draft_tokens, capacity, rows="z_offset"))
    with compile_only(parse_target("cuda:90")):
        assert uncovered_by_warmup(launches, manifest_keys(load_manifest(declared))) == []
        uncovered = uncovered_by_warmup(launches, manifest_keys(load_manifest(plain)))
    kernels = {line.split("[", 1)[0] for line in uncovered}
    assert kernels == {"step5.update_decode", "step5.prefill_summary", "step5.write_ring", "step5.update_verify"}
    assert all("z: a bf16 tensor not 16-byte aligned; warmed binaries all assume a bf16 tensor 16-byte aligned"
               in line for line in uncovered), uncovered


@pytest.mark.parametrize("config, problem", [
    ({"block_size": 60, "ring_capacity": 8}, "block_size: 60 is not a positive multiple of 8"),
    ({"block_size": 64, "ring_capacity": 6}, "ring_capacity: 6 is less than 7 + 0"),
    ({"block_size": 64, "ring_capacity": 8, "slot_dtypes": ["int16"]}, "slot_dtypes: ['int16'] not supported"),
])
def test_a_manifest_config_no_deployment_could_have_fails_when_loading(tmp_path, config, problem):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format_version": 1, "name": "bad", "targets": ["cuda:90"], "modules": ["step5"],
                                "kernels": [{"kernel": "step5.update_decode", "config": config}]}))
    with pytest.raises(ManifestError, match=re.escape(f"kernels[0].config: {problem}")):
        load_manifest(path)
