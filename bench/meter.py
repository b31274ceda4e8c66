"""Peak resident memory of a benchmark process: the kernel's high-water mark (Linux VmHWM, reset through
/proc/self/clear_refs), with a watchdog thread that ends the process (exit OOM_EXIT) past a limit."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from pathlib import Path

OOM_EXIT = 75


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class PeakMeter:
    """Peak resident memory since `reset()`: the kernel's VmHWM when it can be reset, else sampled."""

    def __init__(self, limit_bytes: int | None = None, period_s: float = 0.005):
        self.limit, self.period = limit_bytes, period_s
        self.sampled = 0
        self.method = "sampled RSS every 5 ms"
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.is_set():
            rss = rss_bytes()
            self.sampled = max(self.sampled, rss)
            if self.limit and rss > self.limit:
                sys.stderr.write(f"resident memory {rss / 2**30:.1f} GiB passed the job's limit "
                                 f"{self.limit / 2**30:.1f} GiB\n")
                os._exit(OOM_EXIT)
            time.sleep(self.period)

    def reset(self) -> int:
        gc.collect()
        now = rss_bytes()
        self.sampled = now
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
            self.method = "VmHWM (kernel high-water mark, reset after loading)"
        except OSError:
            pass
        return now

    def peak(self) -> int:
        hwm = _status_kb("VmHWM") if self.method.startswith("VmHWM") else None
        return max(hwm or 0, self.sampled)
