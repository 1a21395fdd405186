"""Shared pieces of the benchmark scripts: models, timing, results files."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """What the numbers were measured on."""
    info = {
        "date": datetime.date.today().isoformat(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        if names:
            info["processor"] = names[0]
    except OSError:
        pass
    return info


def time_call(fn: Callable[[], object], min_time: float = 0.5, repeats: int = 5) -> float:
    """Median seconds per call over ``repeats`` batches, each lasting at least ``min_time``."""
    fn()
    fn()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time / repeats or n > 1_000_000:
            break
        n *= 2
    batches = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter() - start) / n)
    return statistics.median(batches)


def write_results(name: str, payload: dict, table: str) -> tuple[Path, Path]:
    """``results/<name>.json`` and ``results/<name>.md`` (the table plus the machine)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    js, md = RESULTS / f"{name}.json", RESULTS / f"{name}.md"
    js.write_text(json.dumps(payload, indent=2, default=str))
    m = payload["machine"]
    md.write_text(f"{table}\n\nMeasured {m['date']} on {m['processor']} ({m['cpus']} CPUs), "
                  f"Python {m['python']}, torch {m['torch']} ({m['torch_threads']} threads).\n")
    return js, md


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return "–" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
