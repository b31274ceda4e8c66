"""The machine a benchmark ran on: CPU, cores, library versions, memory and the load average."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path


def machine_info() -> dict:
    import numpy
    import torch
    import transformers

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__, "numpy": numpy.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "memory_total_bytes": _meminfo("MemTotal"),
        "memory_available_bytes": _meminfo("MemAvailable"), "cuda": torch.cuda.is_available(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "loadavg_start": list(os.getloadavg()),
    }


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
