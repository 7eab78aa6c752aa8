"""What a warmup run reports: a row per target and kernel, as a table and as JSON; and
what ``--list`` prints of a deployment: every binary, and why it exists."""

from __future__ import annotations

from collections import Counter
from typing import Any

from jitkern.build.compile import CACHED, COMPILED, FAILED, CompileOutcome
from jitkern.kernel import registry
from jitkern.layouts.binary_key import key_fields, key_name
from jitkern.manifest import Deployment


def summarise(outcomes: list[CompileOutcome]) -> list[dict[str, Any]]:
    """One row per target and kernel: keys, compiled, cached, failed, seconds, and how
    many keys had each note (a request the target could not grant, e.g. PDL on sm_80)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for outcome in outcomes:
        task = outcome.task
        row = rows.setdefault((task.target, task.kernel_name), {
            "target": task.target, "kernel": task.kernel_name, "keys": 0, COMPILED: 0, CACHED: 0, FAILED: 0,
            "seconds": 0.0, "notes": {},
        })
        row["keys"] += 1
        row[outcome.status] += 1
        row["seconds"] += outcome.seconds
        for note in outcome.notes:
            row["notes"][note] = row["notes"].get(note, 0) + 1
    return list(rows.values())


def report(outcomes: list[CompileOutcome], wall_seconds: float, manifests: list[str], targets: list[str]
           ) -> dict[str, Any]:
    """The JSON written by ``--report``: the table, each failure, and the wall time."""
    return {
        "manifests": manifests,
        "targets": targets,
        "wall_seconds": round(wall_seconds, 3),
        "kernels": [dict(row, seconds=round(row["seconds"], 3)) for row in summarise(outcomes)],
        "failures": [
            {"kernel": o.task.kernel_name, "key": key_fields(o.task.key), "target": o.task.target, "error": o.error}
            for o in outcomes if o.status == FAILED
        ],
    }


_COUNTS = ("keys", COMPILED, CACHED, FAILED, "seconds")


def format_table(rows: list[dict[str, Any]]) -> str:
    """The report as a table: a row per target and kernel, a total per target when there
    are several targets, a total; a note column counts the keys with a note (listed
    below the table by ``format_notes``)."""
    cell = lambda row, c: f"{row[c]:.2f}" if c == "seconds" else str(row[c])  # noqa: E731
    header = ("target", "kernel", *_COUNTS, "notes")
    lines, per_target = [], {}
    for row in rows:
        noted = sum(row.get("notes", {}).values())
        lines.append((row["target"], row["kernel"], *(cell(row, c) for c in _COUNTS), f"{noted} noted" if noted else ""))
        per_target.setdefault(row["target"], Counter()).update({c: row[c] for c in _COUNTS})
    totals = sum(per_target.values(), Counter())
    if len(per_target) > 1:
        lines += [(target, "total", *(cell(counts, c) for c in _COUNTS), "") for target, counts in per_target.items()]
    lines.append(("all", "total", *(cell(totals, c) for c in _COUNTS), ""))
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines)]
    render = lambda cells: "  ".join(  # noqa: E731
        cell.ljust(width) if i < 2 or i == len(cells) - 1 else cell.rjust(width)
        for i, (cell, width) in enumerate(zip(cells, widths))
    ).rstrip()
    return "\n".join([render(header), render(tuple("-" * w for w in widths))] + [render(line) for line in lines])


def format_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per target, kernel and note: ``note: K for T: N keys: ...``."""
    return [f"note: {row['kernel']} for {row['target']}: {count} key{'s' if count > 1 else ''}: {note}"
            for row in rows for note, count in row.get("notes", {}).items()]


def binary_list(deployment: Deployment) -> list[str]:
    """``--list``: every binary, with the declaration that made each class it differs in
    from its key's stand-ins; per kernel, how many binaries each declaration multiplies;
    last, the count."""
    domains = {}  # (kernel, binary) -> the layout domain it was enumerated in
    factors: dict[str, dict[str, set]] = {}  # kernel -> declaration -> the class counts it gave
    for loaded in deployment.manifests:
        for entry in loaded.entries:
            for binary in entry.keys:
                domains.setdefault((entry.kernel.name, binary), entry.domain)
            for key in dict.fromkeys(binary.key for binary in entry.keys):
                for reason, count in entry.kernel.layouts.factors(key, entry.domain).items():
                    factors.setdefault(entry.kernel.name, {}).setdefault(reason, set()).add(count)
    lines = []
    for target, entries in deployment.by_target.items():
        for name, key in entries:
            domain = domains.get((name, key))
            reasons = registry.get_kernel(name).layouts.reasons(key, domain) if domain is not None else {}
            lines.append(f"{name}[{key_name(key)}] for {target}" + (f"  # {'; '.join(reasons.values())}" if reasons else ""))
    for name, made in factors.items():
        keys = len({key.key for entries in deployment.by_target.values() for kernel, key in entries if kernel == name})
        lines.append(f"{name}: {keys_of(keys, 'compile key')}, each multiplied by " + ", ".join(
            f"{reason} x{'/'.join(map(str, sorted(counts)))}" for reason, counts in made.items()))
    counts = {target: len(entries) for target, entries in deployment.by_target.items()}
    total = sum(counts.values())
    lines.append(f"{keys_of(total, 'binary key')} for {deployment.targets[0]}" if len(counts) == 1 else
                 f"{keys_of(total, 'binary key')}: " + ", ".join(f"{count} for {target}" for target, count in counts.items()))
    return lines


def keys_of(count: int, kind: str = "key") -> str:
    """``1 key``, ``2 compile keys``: the CLI's counts read as English (``key``: a lock's, a
    binary or a table)."""
    return f"{count} {kind}" if count == 1 else f"{count} {kind}s"
