"""What a warmup run reports: a row per target and kernel, as a table and as JSON."""

from __future__ import annotations

from collections import Counter
from typing import Any

from jitkern.build.compile import CACHED, COMPILED, FAILED, CompileOutcome
from jitkern.layouts.binary_key import key_fields


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
