"""Where vLLM's processes spend their time at a given load: py-spy stacks, sampled on the node.

Issue 30 asks what causes the step-time cliff at 256 running requests. This runs beside a sweep
(``node.sh start``) on the GPU node and, whenever vLLM's ``/metrics`` report at least
``--min-running`` running requests, records the engine core's and the API server's Python
stacks with py-spy for a few seconds (``--nonblocking``: the processes are not paused), tagged
with the running count before and after. ``summarise`` folds the raw stacks into the functions
each thread spends its samples in, small enough to come back from the node.

    python3 deploy/h200/stacks.py install WHEEL          # py-spy from the carried wheel
    python3 deploy/h200/stacks.py watch --out DIR &      # samples while the sweep runs
    python3 deploy/h200/stacks.py summarise DIR > summary.txt

Only the standard library: the node's python3 runs it without the carried site.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

PYSPY = Path("/tmp/servesweep-node/py-spy/py-spy")
JOB_PID = Path("/tmp/servesweep-node/job/job.pid")


def install(wheel: str) -> None:
    dest = PYSPY.parent
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith("/scripts/py-spy"))
        PYSPY.write_bytes(z.read(name))
    PYSPY.chmod(0o755)
    print(subprocess.run([str(PYSPY), "--version"], capture_output=True, text=True).stdout.strip())


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def processes() -> tuple[int | None, int | None, int | None]:
    """(API server pid, its port, engine core pid) of the vLLM server running now."""
    api = port = core = None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        line = cmdline(int(entry.name))
        if "VLLM::EngineCore" in line or "EngineCore_DP" in line:
            core = int(entry.name)
        elif "vllm.entrypoints" in line and " serve " in f"{line} ":
            m = re.search(r"--port (\d+)", line)
            if m:
                api, port = int(entry.name), int(m.group(1))
    return api, port, core


def running(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    vals = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("vllm:num_requests_running")]
    return sum(vals) if vals else None


def record(pid: int, seconds: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy for ``seconds`` (whole: py-spy 0.4.3 panics on "4.0") on ``pid``'s threads."""
    argv = [str(PYSPY), "record", "--pid", str(pid), "--duration", str(max(1, seconds)),
            "--rate", "200", "--format", "raw", "--idle", "--nonblocking", "--threads",
            "--output", str(out)]
    with open(f"{out}.err", "w") as err:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)


def alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def watch(out: Path, min_running: int, seconds: int, per_bucket: int, limit_s: float) -> None:
    """Sample each server per_bucket times at each load (running rounded to a multiple of 32)."""
    out.mkdir(parents=True, exist_ok=True)
    taken: collections.Counter[tuple[int, int]] = collections.Counter()
    t0 = time.time()
    while time.time() - t0 < limit_s and (alive(JOB_PID) or time.time() - t0 < 60):
        api, port, core = processes()
        now = running(port) if port else None
        if api and core and now is not None and now >= min_running:
            bucket = 32 * round(now / 32)
            if taken[(api, bucket)] < per_bucket:
                n = taken[(api, bucket)]
                stem = out / f"api{api}-r{bucket}-{n}"
                procs = [record(core, seconds, Path(f"{stem}-core.txt")),
                         record(api, seconds, Path(f"{stem}-api.txt"))]
                for p in procs:
                    p.wait()
                after = running(port)
                Path(f"{stem}.json").write_text(json.dumps(
                    {"api": api, "core": core, "running_before": now, "running_after": after,
                     "seconds": seconds, "at": time.strftime("%H:%M:%S"),
                     "server": cmdline(api)}))
                taken[(api, bucket)] += 1
                print(f"{stem.name}: running {now:.0f} -> {after}", flush=True)
                continue
        time.sleep(1.0)


_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{m['fn']} ({Path(m['file']).name})"


def fold(path: Path) -> dict[str, tuple[int, collections.Counter[str], collections.Counter[str]]]:
    """Per thread: (samples, self samples per leaf function, inclusive samples per function)."""
    threads: dict[str, tuple[int, collections.Counter[str], collections.Counter[str]]] = {}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        parts = stack.split(";")
        thread = next((p for p in parts if p.startswith("thread")), "thread ?")
        frames = [frame_name(p) for p in parts if not p.startswith(("process", "thread"))]
        total, own, incl = threads.get(thread, (0, collections.Counter(), collections.Counter()))
        total += int(count)
        if frames:
            own[frames[-1]] += int(count)
            for f in set(frames):
                incl[f] += int(count)
        threads[thread] = (total, own, incl)
    return threads


def summarise(folder: Path, top: int) -> None:
    for meta_file in sorted(folder.glob("*.json")):
        meta = json.loads(meta_file.read_text())
        print(f"## {meta_file.stem}: running {meta['running_before']:.0f} -> "
              f"{meta['running_after']}, {meta['seconds']} s at {meta['at']}")
        print(f"server: {meta['server'][:300]}")
        for role in ("core", "api"):
            raw = folder / f"{meta_file.stem}-{role}.txt"
            if not raw.is_file():
                err = Path(f"{raw}.err")
                print(f"### {role}: no stacks ({err.read_text()[-300:] if err.is_file() else '?'})")
                continue
            for thread, (total, own, incl) in sorted(fold(raw).items(), key=lambda t: -t[1][0]):
                if total < 50:
                    continue
                print(f"### {role} {thread}: {total} samples")
                print("self:      " + "; ".join(f"{f} {100 * n / total:.1f}%"
                                                for f, n in own.most_common(top)))
                deep = [(f, n) for f, n in incl.most_common(4 * top) if n < 0.97 * total]
                print("inclusive: " + "; ".join(f"{f} {100 * n / total:.1f}%"
                                                for f, n in deep[:top]))
        print()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("install").add_argument("wheel")
    w = sub.add_parser("watch")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--min-running", type=int, default=100)
    w.add_argument("--seconds", type=int, default=5)
    w.add_argument("--per-bucket", type=int, default=1)
    w.add_argument("--limit-s", type=float, default=900)
    s = sub.add_parser("summarise")
    s.add_argument("folder", type=Path)
    s.add_argument("--top", type=int, default=12)
    a = p.parse_args(argv)
    if a.verb == "install":
        install(a.wheel)
    elif a.verb == "watch":
        watch(a.out, a.min_running, a.seconds, a.per_bucket, a.limit_s)
    else:
        summarise(a.folder, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
