"""Start a real sim server subprocess for a test (port 0; the URL is read from its log)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from actors.contracts.shapes import get_preset
from actors.sim.config import SimServerConfig, parse_fault
from actors.sim.perf import SimConfig
from tests.conftest import ROOT


def sim_config(profile: str = "vllm", hardware: str = "h100-sxm", time_scale: float = 0.05,
               fault: str | None = None, trace: bool = False, max_model_len: int = 4096,
               stream_interval: int = 1, **settings) -> SimServerConfig:
    return SimServerConfig(profile=profile, hardware=hardware,
                           shape=get_preset("llama-3.1-8b"), settings=SimConfig(**settings),
                           served_name="sim-model", max_model_len=max_model_len,
                           time_scale=time_scale, fault=parse_fault(fault), trace=trace,
                           stats_interval_s=1.0, stream_interval=stream_interval)


@contextlib.contextmanager
def sim_server(cfg: SimServerConfig, tmp: Path) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """Yields (base_url, process, log path); kills the process group afterwards."""
    conf = tmp / f"sim-{time.monotonic_ns()}.json"
    conf.write_text(cfg.model_dump_json())
    log = conf.with_suffix(".log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "actors.sim.server", "--config", str(conf)],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        url = None
        while url is None:
            if proc.poll() is not None:
                raise RuntimeError(f"sim exited {proc.returncode}: {log.read_text()[-2000:]}")
            m = re.search(r"(?:on|running on) (https?://127\.0\.0\.1:\d+)", log.read_text())
            if m:
                url = m.group(1)
            elif time.monotonic() > deadline:
                raise RuntimeError("sim did not start in 20 s")
            else:
                time.sleep(0.05)
        yield url, proc, log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
