"""A serving schedule: requests arrive, prefill in chunks, decode, verify drafts, finish.

After every step the store and then the compressor run, as an engine runs them (fused in
one launch, ``decode_step``, when every request brings one token); every window closed by
a committed token must equal the straightforward sequence reference
(``compress_sequence_ref`` over the request's whole token sequence). Blocks of finished
requests go back to the pool and are reused, so stale rows of old requests sit in the
cache; rejected draft tokens leave junk rows that later steps overwrite.

Inputs have deployment shapes (head_dim 512 and 128, both ratios), so the launched keys
can be checked against the shipped manifest: serving would compile nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from dsv4_helpers import assert_rel_close, manifest_keys, poison

from deepseek_v4 import compress_windows, decode_step, save_partial_states
from deepseek_v4.common import RATIOS
from deepseek_v4.reference import compress_sequence_ref
from jitkern.testing import record_launches

# A deployment whose kv, score and out come in several layouts (the file declares them).
VIEWS_MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "deepseek_v4-views.json"


@dataclass(eq=False)  # identity: requests are compared as objects
class Request:
    kv: torch.Tensor  # the request's true rows, [length, W]
    score: torch.Tensor
    prompt: int
    row: int = -1  # block table row while running
    done: int = 0  # committed positions
    blocks: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.kv.shape[0]


class Schedule:
    """Drives requests through steps and checks the compressed windows after each."""

    def __init__(self, ratio: int, head_dim: int, *, requests: int, lengths: tuple[int, int], max_chunk: int,
                 index_dtype: torch.dtype, views: bool = False):
        """``views``: each step lays kv, score and out out differently (``_views``), with
        ``index_dtype`` for every index; else as the shipped deployment does."""
        geometry = RATIOS[ratio]
        self.views = views
        self.ratio, self.head_dim, self.bs = ratio, head_dim, geometry.block_size
        self.width = geometry.state_width(head_dim)
        self.max_chunk, self.index_dtype = max_chunk, index_dtype
        self.ape = torch.randn(ratio, self.width)
        self.waiting = []
        for _ in range(requests):
            length = random.randint(*lengths)
            kv, score = torch.randn(length, self.width), torch.randn(length, self.width)
            self.waiting.append(Request(kv, score, prompt=random.randint(length // 2, length)))
        self.references = {id(r): compress_sequence_ref(r.kv, r.score, self.ape, ratio, head_dim)[1]
                           for r in self.waiting}
        self.checked: dict[int, set[int]] = {id(r): set() for r in self.waiting}
        self.all_requests = list(self.waiting)
        max_blocks = -(-lengths[1] // self.bs) + random.randint(0, 3)  # a multiple of 16 or not
        self.rows = max(1, requests - 1)  # fewer rows than requests: rows and blocks get reused
        self.block_table = torch.full((self.rows, max_blocks), -1, dtype=torch.int32)
        pool = self.rows * max_blocks + 2
        self.free_blocks = random.sample(range(pool), pool)
        self.cache = poison((pool, self.bs, 2 * self.width))
        self.running: list[Request] = []

    def _admit(self) -> None:
        free_rows = sorted(set(range(self.rows)) - {r.row for r in self.running})
        while self.waiting and free_rows and random.random() < 0.7:
            request = self.waiting.pop(0)
            request.row = free_rows.pop(0)
            self.running.append(request)

    def _slot(self, request: Request, q: int) -> int:
        index = q // self.bs
        while len(request.blocks) <= index:  # allocate lazily, as an engine does
            block = self.free_blocks.pop()
            self.block_table[request.row, len(request.blocks)] = block
            request.blocks.append(block)
        return request.blocks[index] * self.bs + q % self.bs

    def step(self) -> None:
        self._admit()
        if not self.running:
            return
        kv_rows, score_rows, positions, slots, reqs, committed = [], [], [], [], [], []
        for request in self.running:
            n, accepted = self._plan(request)
            for k in range(n):
                q = request.done + k
                true = k < accepted
                kv_rows.append(request.kv[q] if true else torch.randn(self.width))  # junk: rejected draft
                score_rows.append(request.score[q] if true else torch.randn(self.width))
                positions.append(q)
                slots.append(self._slot(request, q))
                reqs.append(request.row)
                committed.append(request if true else None)
            request.done += accepted
        padding = random.randint(0, 3)
        for _ in range(padding):  # CUDA-graph padding
            kv_rows.append(torch.randn(self.width))
            score_rows.append(torch.randn(self.width))
            positions, slots, reqs, committed = positions + [0], slots + [-1], reqs + [0], committed + [None]

        kv, score, out = self._views(torch.stack(kv_rows), torch.stack(score_rows))
        positions_t = torch.tensor(positions, dtype=self.index_dtype)
        slots_t = torch.tensor(slots, dtype=self.index_dtype)
        reqs_dtype = self.index_dtype if self.views else random.choice([torch.int32, torch.int64])
        reqs_t = torch.tensor(reqs, dtype=reqs_dtype)
        if len(kv_rows) - padding == len(self.running):  # one token per request: the fused decode step
            decode_step(kv, score, self.ape, positions_t, self.cache, slots_t, self.block_table, reqs_t, out,
                        self.ratio, self.head_dim, self.bs, self.width)
        else:
            save_partial_states(kv, score, self.ape, positions_t, self.cache, slots_t, self.bs, self.width, self.ratio)
            compress_windows(self.cache, self.block_table, positions_t, reqs_t, out, self.ratio, self.head_dim, self.bs)
        for i, (p, request) in enumerate(zip(positions, committed)):
            if (p + 1) % self.ratio:
                assert out[i].isnan().all(), f"token at position {p} closes no window but was written"
            elif request is not None:
                window = p // self.ratio
                assert_rel_close(out[i], self.references[id(request)][window], f"window {window}")
                self.checked[id(request)].add(window)
        self._retire()

    def _views(self, kv_rows: torch.Tensor, score_rows: torch.Tensor):
        """kv and score as views of one ``[tokens, 2W]`` projection, and a poisoned ``out``;
        with ``views``, also: a projection padded by a column in front and two behind (both
        4 bytes off 16, odd row stride), two separate tensors, and ``out`` a view at an odd
        column of a wider tensor."""
        tokens, width = kv_rows.shape
        layout = random.choice(["fused", "padded", "separate"]) if self.views else "fused"
        if layout == "separate":
            kv, score = kv_rows.clone(), score_rows.clone()
        else:
            front, back = (1, 2) if layout == "padded" else (0, 0)
            projection = torch.randn(tokens, front + 2 * width + back)
            kv, score = projection[:, front : front + width], projection[:, front + width : front + 2 * width]
            kv.copy_(kv_rows)
            score.copy_(score_rows)
        if self.views and random.random() < 0.5:
            return kv, score, poison((tokens, self.head_dim + 1))[:, 1:]
        return kv, score, poison((tokens, self.head_dim))

    def _plan(self, request: Request) -> tuple[int, int]:
        """(tokens this step, of which accepted): a prefill chunk, a decode, or a verify."""
        left = request.length - request.done
        if request.done < request.prompt:
            n = min(random.randint(1, self.max_chunk), request.prompt - request.done)
            return n, n
        if left > 1 and random.random() < 0.5:  # speculative verify: k drafts + 1
            n = random.randint(2, min(4, left))
            return n, random.randint(1, n)
        return 1, 1

    def _retire(self) -> None:
        for request in [r for r in self.running if r.done == r.length]:
            self.running.remove(request)
            self.free_blocks.extend(request.blocks)  # reused with their stale rows
            random.shuffle(self.free_blocks)
            self.block_table[request.row] = -1

    def run(self) -> None:
        while self.waiting or self.running:
            self.step()
        for request in self.all_requests:
            windows = set(range(request.length // self.ratio))
            assert self.checked[id(request)] == windows, "some closed windows were never checked"


DEPLOYMENTS = pytest.mark.parametrize(
    "ratio,head_dim,requests,lengths,max_chunk",
    [
        (4, 128, 6, (9, 60), 12),
        (4, 512, 3, (9, 20), 8),
        (128, 128, 4, (130, 400), 110),
        (128, 512, 2, (128, 140), 100),
    ],
    ids=["ratio4-head128", "ratio4-head512", "ratio128-head128", "ratio128-head512"],
)


def run_schedule(ratio, head_dim, requests, lengths, max_chunk, views: bool = False) -> None:
    """The deployment's schedule; with ``views``, in the layouts of tests/manifests/deepseek_v4-views.json."""
    index_dtype = torch.int64 if views else random.choice([torch.int32, torch.int64])
    Schedule(ratio, head_dim, requests=requests, lengths=lengths, max_chunk=max_chunk, index_dtype=index_dtype,
             views=views).run()


@DEPLOYMENTS
def test_schedule_matches_sequence_reference_and_manifest(ratio, head_dim, requests, lengths, max_chunk):
    with record_launches() as launches:
        run_schedule(ratio, head_dim, requests, lengths, max_chunk)
    launched = [(kernel, kernel.layouts.binary_key(spec)) for kernel, spec in launches]

    known = manifest_keys()
    missing = {k.describe(key) for k, key in launched if key not in known.get(k.name, set())}
    assert {"deepseek_v4.save_partial_states", "deepseek_v4.compress_windows"} <= {k.name for k, _ in launched} <= {
        "deepseek_v4.save_partial_states", "deepseek_v4.compress_windows", "deepseek_v4.decode_step"}
    assert not missing, "launched keys no shipped manifest warms:\n  " + "\n  ".join(sorted(missing))


@DEPLOYMENTS
def test_a_schedule_of_mixed_views_hits_the_manifest_that_declares_them(ratio, head_dim, requests, lengths, max_chunk):
    from jitkern.manifest import load_manifest
    from jitkern.manifest import manifest_keys as loaded_keys
    from jitkern.testing import missing_from

    with record_launches() as launches:
        run_schedule(ratio, head_dim, requests, lengths, max_chunk, views=True)
    missing = missing_from(launches, loaded_keys(load_manifest(VIEWS_MANIFEST)))
    assert not missing, "launches the views manifest does not enumerate:\n  " + "\n  ".join(missing)
