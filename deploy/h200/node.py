#!/usr/bin/env python3
"""The GPU node's side of deploy/h200: the carried payload, the model, a sweep in the background.

Run from the repository root on the node (``bash deploy/h200/node.sh VERB``); standard library
only, so it works before anything is installed. Every verb returns within seconds except
``install`` (about 30 s, once, with its import check) and ``wait`` (as long as it is told):

    stash            keep the chunk folder(s) this call carried (.payload/cN/) for a later call
    install          check every part against MANIFEST.json and SHA256SUMS, unpack the site,
                     check that vLLM, Ray, Optuna, pydantic and servesweep import
    model [--size S] [DEST]
                     start making the model at DEST (default /tmp/model); returns at once.
                     S: 8b (default), 3b, 1b: random weights; arith: install, then train
                     the arithmetic model (deploy/quality, about 3 min on the GPU) and
                     write its lm-eval task into DEST/eval (what a `quality:` spec reads)
    start SPEC       install if needed, then start the sweep detached; returns at once
    profile SPEC     the same for `servesweep profile-model SPEC` (a short profile of the
                     spec's model; the fit lands in the sweep as model-profile-<profile>.json)
    resume [PATH]    finish a sweep brought back from a lost node (PATH: its tarball or folder;
                     default: the one tarball carried in .payload/sweep/), detached
    poll             the progress so far; the finished trials' results to $OUT (< 10 s)
    wait SECONDS     wait until the sweep ends or SECONDS pass, printing its progress; then poll
    fetch            the whole sweep folder to $OUT as <sweep-id>.tar.gz
    stop             Ctrl-C the sweep: its engines stop, finished trials stay in the ledger

The sweep runs servesweep from the carried site (not from the repository) with
``--no-mlflow``; lm-eval, when the payload carries it, is run through the wrapper
``$H200_NODE_DIR/bin/lm_eval`` that ``install`` writes (a spec's ``quality.lm_eval``).
Its folder is ``$H200_NODE_DIR/state/sweeps/<id>/`` (default
``/tmp/servesweep-node``). What comes back (the tarballs) is a sweep folder that
``servesweep import`` takes on the workstation. For tests: ``H200_NODE_SITE=none``
runs the sweep with this Python's own packages (no payload); ``H200_NODE_CHECK=skip``
skips the import check after unpacking.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

NODE = Path(os.environ.get("H200_NODE_DIR", "/tmp/servesweep-node"))
PAYLOAD, SITE, STATE, JOB = NODE / "payload", NODE / "site", NODE / "state", NODE / "job"
NO_SITE = os.environ.get("H200_NODE_SITE") == "none"
MODEL_PID, MODEL_LOG = NODE / "model.pid", NODE / "model.log"
LM_EVAL_BIN = NODE / "bin" / "lm_eval"
CONSOLE, JOB_PID, DRIVER_PID, JOB_RC = (JOB / "console.log", JOB / "job.pid", JOB / "driver.pid",
                                        JOB / "rc")
CARRIED = Path(".payload")
HERE = Path(__file__).resolve().parent
#: the node's environment for vLLM and the sweep (offline; NVLink multicast stays off)
NODE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1",
            "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
IMPORT_CHECK = """
import importlib, importlib.metadata as md
for name in ("vllm", "ray", "optuna", "pydantic", "servesweep"):
    try:
        print(f"  {name:10s} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name:10s} MISSING")
for mod in ("vllm.entrypoints.openai.api_server", "ray", "optuna", "pydantic",
            "orchestrator.commands.cli", "actors.engine_host"):
    importlib.import_module(mod)
from actors.loadgen import fastread
print("  load generator read pass:", "native" if fastread.reader(1, 1) else
      "pure Python (" + fastread.why_not() + ")")
"""


class NodeError(Exception):
    """What went wrong and what to do, in one message (exit 2)."""


def say(text: str = "") -> None:
    print(text, flush=True)


def out_dir() -> Path:
    """Where files to bring back go: ``$OUT`` on the device machine, else NODE/out."""
    d = Path(os.environ.get("OUT") or NODE / "out")
    d.mkdir(parents=True, exist_ok=True)
    return d


def alive(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process still runs (not a zombie), else None."""
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
    except OSError:
        pass
    return pid


def human(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


# -- the payload --------------------------------------------------------------------------------
def stash() -> list[str]:
    """Move carried ``.payload/cN/*`` into PAYLOAD; returns the part files now there."""
    PAYLOAD.mkdir(parents=True, exist_ok=True)
    for chunk in sorted(CARRIED.glob("c*")):
        if chunk.is_dir():
            for f in chunk.iterdir():
                shutil.move(str(f), PAYLOAD / f.name)
    manifest = read_manifest()
    have = sorted(p.name for p in PAYLOAD.glob("*.part*"))
    if manifest is None:
        say(f"payload: {len(have)} part(s), no MANIFEST.json yet")
        return have
    parts = manifest["parts"]
    missing = [p for p in parts if not (PAYLOAD / p["file"]).is_file()]
    say(f"payload: {len(parts) - len(missing)} of {len(parts)} part(s) here" +
        (f"; still to carry: {', '.join('.payload/' + p['chunk'] for p in missing)}"
         if missing else "; complete"))
    return have


def read_manifest() -> dict[str, Any] | None:
    path = PAYLOAD / "MANIFEST.json"
    return json.loads(path.read_text()) if path.is_file() else None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(manifest: dict[str, Any]) -> list[Path]:
    """Every part present with its sha256, and the joined archive's sha256; the parts in order."""
    parts = manifest["parts"]
    missing = [p for p in parts if not (PAYLOAD / p["file"]).is_file()]
    if missing:
        raise NodeError("payload incomplete: missing " + ", ".join(
            f"{p['file']} (carry .payload/{p['chunk']} in a call, then `node.sh stash`)"
            for p in missing))
    files = [PAYLOAD / p["file"] for p in parts]
    whole = hashlib.sha256()
    for p, f in zip(parts, files):
        data = f.read_bytes()
        if hashlib.sha256(data).hexdigest() != p["sha256"] or len(data) != p["bytes"]:
            raise NodeError(f"{f.name} is damaged (sha256 or size differs from MANIFEST.json): "
                            f"carry .payload/{p['chunk']} again")
        whole.update(data)
    if whole.hexdigest() != manifest["archive"]["sha256"]:
        raise NodeError("the joined parts differ from the archive the manifest names: are the "
                        "chunks from one build? Rebuild, and carry every chunk again")
    return files


class Joined:
    """The parts read as one stream (for Python's own xz when the node has no ``xz``)."""

    def __init__(self, files: list[Path]):
        self.files: Iterator[Path] = iter(files)
        self.f: BinaryIO | None = None

    def read(self, n: int = -1) -> bytes:
        while True:
            if self.f is None:
                nxt = next(self.files, None)
                if nxt is None:
                    return b""
                self.f = open(nxt, "rb")
            data = self.f.read(n)
            if data:
                return data
            self.f.close()
            self.f = None


def unpack(files: list[Path], dest: Path) -> None:
    if shutil.which("xz") and shutil.which("tar"):
        cat = subprocess.Popen(["cat", *map(str, files)], stdout=subprocess.PIPE)
        xz = subprocess.Popen(["xz", "-dc", "-T0"], stdin=cat.stdout, stdout=subprocess.PIPE)
        assert cat.stdout is not None and xz.stdout is not None
        cat.stdout.close()
        rc = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=xz.stdout).returncode
        xz.stdout.close()
        if rc or xz.wait() or cat.wait():
            raise NodeError("unpacking the site failed (disk full?); see the lines above")
        return
    with lzma.open(Joined(files)) as stream:  # type: ignore[call-overload]
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            tar.extractall(dest, filter="tar")


def install() -> None:
    """Check the parts and unpack the site (once; a second call returns at once)."""
    if NO_SITE:
        say("install: H200_NODE_SITE=none: this Python's own packages are used")
        return
    t0 = time.monotonic()
    stash()
    manifest = read_manifest()
    if manifest is None:
        raise NodeError("no MANIFEST.json: no chunk was carried yet; carry .payload/c1 first "
                        "(bash deploy/h200/build_payload.sh makes them)")
    done = SITE / ".manifest.json"
    if done.is_file() and json.loads(done.read_text())["archive"] == manifest["archive"]:
        say(f"install: the site is already unpacked in {SITE}")
        return
    files = verify(manifest)
    say(f"install: {len(files)} part(s) verified (sha256), unpacking to {SITE} ...")
    tmp = NODE / "site.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    unpack(files, tmp)
    shutil.rmtree(SITE, ignore_errors=True)
    tmp.rename(SITE)
    done.write_text(json.dumps(manifest, indent=1))
    lm_eval_wrapper()
    pk = manifest["packages"]
    say(f"install: done in {time.monotonic() - t0:.0f} s; built {manifest['built']}, servesweep "
        f"{manifest['servesweep']['source']}; vllm {pk.get('vllm')}, ray {pk.get('ray')}, "
        f"optuna {pk.get('optuna')}, pydantic {pk.get('pydantic')}")
    if os.environ.get("H200_NODE_CHECK") == "skip":  # tests: a site with no vLLM
        return
    check = subprocess.run([sys.executable, "-c", IMPORT_CHECK], env=sweep_env(), cwd=NODE,
                           capture_output=True, text=True)
    say(check.stdout.rstrip())
    if check.returncode:
        say(check.stderr[-3000:])
        raise NodeError("the import check failed (above): the payload does not match this "
                        "node's Python; see deploy/h200/README.md, 'When something fails'")


def lm_eval_wrapper() -> None:
    """Write ``bin/lm_eval`` (the site has no console scripts) when the site holds lm-eval."""
    if not (SITE / "lm_eval").is_dir():
        return
    LM_EVAL_BIN.parent.mkdir(parents=True, exist_ok=True)
    LM_EVAL_BIN.write_text(f'#!/bin/sh\nPYTHONPATH="{SITE}${{PYTHONPATH:+:$PYTHONPATH}}" '
                           f'exec "{sys.executable}" -m lm_eval "$@"\n')
    LM_EVAL_BIN.chmod(0o755)
    say(f"install: lm-eval is run as {LM_EVAL_BIN}")


def sweep_env() -> dict[str, str]:
    env = dict(os.environ, **NODE_ENV, SERVESWEEP_HOME=str(STATE))
    if not NO_SITE:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), env.get("PYTHONPATH")]))
    return env


# -- the model ----------------------------------------------------------------------------------
def model(size: str, dest: str) -> None:
    if alive(MODEL_PID):
        say(f"model: already being made (pid {alive(MODEL_PID)}); log {MODEL_LOG}")
        return
    if (Path(dest) / "config.json").is_file():
        say(f"model: {dest} is already there")
        return
    NODE.mkdir(parents=True, exist_ok=True)
    if size == "arith":
        install()  # training needs the carried transformers
        argv = [sys.executable, str(Path(__file__).resolve()), "_arith", dest]
        what = "training the arithmetic model (about 3 min)"
    else:
        argv = [sys.executable, str(HERE / "make_random_model.py"), dest, "--size", size]
        what = f"making a random-weight {size} model (about 20 s for 8b)"
    with open(MODEL_LOG, "w") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, env=sweep_env(),
                                stderr=subprocess.STDOUT, start_new_session=True)
    MODEL_PID.write_text(f"{proc.pid}\n")
    say(f"model: {what} in {dest} in the background (pid {proc.pid}); log {MODEL_LOG}; the "
        "sweep waits for it")


def arith(dest: str) -> int:
    """The detached trainer: the h200 arithmetic model on the GPU, then its lm-eval task."""
    quality = HERE.parent / "quality"
    steps = [[sys.executable, str(quality / "train_arith_model.py"), dest, "--size", "h200",
              "--device", "cuda", "--seed", "0"],
             [sys.executable, str(quality / "task_yaml.py"), str(Path(dest) / "eval"),
              "test.jsonl", "--relative"]]
    for argv in steps:
        rc = subprocess.run(argv, env=sweep_env()).returncode
        if rc:
            say(f"[node] {Path(argv[1]).name} exited {rc}")
            return rc
    report = Path(dest) / "train_report.json"
    say(f"[node] arithmetic model ready: {report.read_text() if report.is_file() else dest}")
    return 0


# -- the sweep job ------------------------------------------------------------------------------
def launch(command: str, arg: str) -> None:
    """Start ``_job`` in its own session (it outlives the call) and return at once."""
    pid = alive(JOB_PID)
    if pid:
        raise NodeError(f"a sweep is already running here (pid {pid}): `node.sh poll` to follow "
                        "it, `node.sh stop` to stop it")
    shutil.rmtree(JOB, ignore_errors=True)
    JOB.mkdir(parents=True)
    with open(CONSOLE, "w") as log:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_job", command,
                                 arg], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=NODE)
    JOB_PID.write_text(f"{proc.pid}\n")
    time.sleep(2)
    if proc.poll() is not None:
        say(CONSOLE.read_text()[-3000:])
        raise NodeError(f"the sweep stopped at once (exit {proc.returncode}); its output is above")
    say(f"{command}: the sweep runs in the background (pid {proc.pid}); its output goes to "
        f"{CONSOLE}. `node.sh poll` for progress and results so far")


def job(command: str, arg: str) -> int:
    """The detached process: wait for the model, run servesweep, record its exit code."""
    t0 = time.time()
    say(f"[node] {time.strftime('%Y-%m-%d %H:%M:%S')} servesweep {command} {arg}")
    pid = alive(MODEL_PID)
    if pid:
        say(f"[node] waiting for the model (pid {pid}) ...")
        while alive(MODEL_PID):
            time.sleep(1)
        say(f"[node] model ready after {human(time.time() - t0)}")
    argv = [sys.executable, "-m", "orchestrator.commands.cli", command, arg, "--no-mlflow"]
    proc = subprocess.Popen(argv, env=sweep_env(), cwd=NODE)
    DRIVER_PID.write_text(f"{proc.pid}\n")

    def forward(signum: int, _frame: Any) -> None:
        proc.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    rc = proc.wait()
    JOB_RC.write_text(f"{rc}\n")
    say(f"[node] {time.strftime('%Y-%m-%d %H:%M:%S')} servesweep exited {rc} after "
        f"{human(time.time() - t0)}")
    return rc


def start(spec: str, command: str = "run") -> None:
    """``servesweep run SPEC`` (or ``profile-model SPEC``: a short profile of the spec's
    model, whose fit lands in the sweep folder as ``model-profile-<profile>.json``)."""
    path = Path(spec).resolve()
    if not path.is_file():
        raise NodeError(f"no spec {spec} (relative to {Path.cwd()}): run from the repository root")
    install()
    launch(command, str(path))


def resume(source: str | None) -> None:
    if source is None:
        found = sorted((CARRIED / "sweep").glob("*.tar.gz")) + sorted(
            (CARRIED / "sweep").glob("*.tgz"))
        if len(found) != 1:
            raise NodeError("carry exactly one sweep tarball in .payload/sweep/ (the one `poll` "
                            f"or `fetch` brought back), or name it; found {len(found)}")
        source = str(found[0])
    install()
    sweeps = STATE / "sweeps"
    sweeps.mkdir(parents=True, exist_ok=True)
    src = Path(source)
    if src.is_dir():
        sweep_id = src.name
        shutil.rmtree(sweeps / sweep_id, ignore_errors=True)
        shutil.copytree(src, sweeps / sweep_id)
    else:
        with tarfile.open(src) as tar:
            tops = {m.name.split("/")[0] for m in tar.getmembers()} - {"."}
            if len(tops) != 1:
                raise NodeError(f"{src} is not one sweep folder (top-level entries: "
                                f"{sorted(tops)})")
            sweep_id = tops.pop()
            shutil.rmtree(sweeps / sweep_id, ignore_errors=True)
            tar.extractall(sweeps, filter="data")
    if not (sweeps / sweep_id / "ledger.jsonl").is_file():
        raise NodeError(f"{src} holds no ledger.jsonl: not a sweep folder")
    (sweeps / "LATEST").write_text(sweep_id + "\n")
    say(f"resume: sweep {sweep_id} unpacked into {sweeps}")
    launch("resume", sweep_id)


# -- progress and results -----------------------------------------------------------------------
def sweep_dir() -> Path | None:
    latest = STATE / "sweeps" / "LATEST"
    if not latest.is_file():
        return None
    d = STATE / "sweeps" / latest.read_text().strip()
    return d if d.is_dir() else None


def finished(sweep: Path) -> dict[str, dict[str, Any]]:
    """key -> the latest ``trial`` event of each final trial (torn lines skipped)."""
    out: dict[str, dict[str, Any]] = {}
    path = sweep / "ledger.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if ev.get("type") == "trial":
            out[ev["key"]] = ev
    return out


def label(ev: dict[str, Any]) -> str:
    c = ev.get("result", {}).get("config", {})
    graphs = "graphs" if c.get("cuda_graphs") else "eager"
    engine = f"{c.get('engine')}:{c['profile']}" if c.get("profile") else c.get("engine")
    return f"{engine} tp{c.get('tp')} {c.get('weights')} kv={c.get('kv_dtype')} {graphs}"


def pack(sweep: Path, dest: Path, keys: set[str] | None) -> int:
    """``sweep`` as ``<id>/...`` in a tar.gz: everything but the lock, or (keys given) the
    spec, ledger, state, report and those trials' folders. Returns its size in bytes."""
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = Path(info.name).parts[1:]
        if rel[:1] == ("driver.lock",):
            return None
        if keys is not None and rel[:1] == ("trials",) and len(rel) > 1 and rel[1] not in keys:
            return None
        return info

    tmp = dest.with_name(f".{dest.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(sweep, arcname=sweep.name, filter=keep)
    tmp.replace(dest)
    return dest.stat().st_size


def planned() -> str:
    text = CONSOLE.read_text(errors="replace") if CONSOLE.is_file() else ""
    m = re.search(r": (\d+) trials \((\d+) to run", text)
    if m:
        return f" of {m.group(2)} to run"
    m = re.search(r"resuming \S+: (\d+) trial\(s\) final, (\d+) to run", text)
    return f" ({m.group(1)} final before, {m.group(2)} to run)" if m else ""


def status_line() -> str:
    pid = alive(JOB_PID)
    started = JOB_PID.stat().st_mtime if JOB_PID.is_file() else time.time()
    if pid:
        return f"running for {human(time.time() - started)} (pid {pid})"
    if JOB_RC.is_file():
        rc = JOB_RC.read_text().strip()
        return f"ended: servesweep exited {rc} after {human(JOB_RC.stat().st_mtime - started)}"
    return "not running (no exit code recorded: the job was killed, or never started)"


def poll(tail: int = 15) -> None:
    sweep = sweep_dir()
    say(f"sweep {sweep.name if sweep else '(none yet)'}: {status_line()}")
    if CONSOLE.is_file():
        lines = CONSOLE.read_text(errors="replace").splitlines()[-tail:]
        say("last lines of its output:")
        for line in lines:
            say(f"  | {line}")
    if sweep is None:
        return
    done = finished(sweep)
    counts: dict[str, int] = {}
    for ev in done.values():
        counts[ev["status"]] = counts.get(ev["status"], 0) + 1
    say(f"trials final: {len(done)}{planned()} "
        f"({', '.join(f'{n} {s}' for s, n in sorted(counts.items())) or 'none yet'})")
    for key, ev in done.items():
        say(f"  {ev['status']:16s} {key}  {label(ev)}")
    out = out_dir()
    dest = out / f"{sweep.name}.partial.tar.gz"
    size = pack(sweep, dest, set(done))
    if CONSOLE.is_file():
        shutil.copyfile(CONSOLE, out / "console.txt")
    say(f"brought back: {dest.name} ({size / 1024:.0f} KiB: spec, ledger, {len(done)} finished "
        "trial folder(s)) and console.txt")


def wait(seconds: float) -> None:
    """Follow the sweep's output until it ends or ``seconds`` pass, then poll."""
    deadline = time.monotonic() + seconds
    pos = CONSOLE.stat().st_size if CONSOLE.is_file() else 0
    while time.monotonic() < deadline and alive(JOB_PID):
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
        if CONSOLE.is_file() and CONSOLE.stat().st_size > pos:
            with open(CONSOLE, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            pos += len(chunk)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
    ended = not alive(JOB_PID)
    say("== " + ("the sweep ended" if ended else f"still running after {seconds:.0f} s"))
    poll(tail=5)


def fetch() -> None:
    sweep = sweep_dir()
    if sweep is None:
        raise NodeError(f"no sweep under {STATE}: nothing to fetch (start one first)")
    if alive(JOB_PID):
        say("the sweep is still running: this is a snapshot; `fetch` again once `poll` says "
            "it ended")
    out = out_dir()
    dest = out / f"{sweep.name}.tar.gz"
    size = pack(sweep, dest, None)
    if CONSOLE.is_file():
        shutil.copyfile(CONSOLE, out / "console.txt")
    if MODEL_LOG.is_file():
        shutil.copyfile(MODEL_LOG, out / "model.log")
    say(f"sweep {sweep.name}: {status_line()}; {len(finished(sweep))} trial(s) final")
    say(f"brought back: {dest.name} ({size / 1024:.0f} KiB), console.txt and model.log")


def stop(grace_s: float = 90) -> None:
    driver = alive(DRIVER_PID)
    if not alive(JOB_PID) or not driver:
        say("no sweep is running here")
        return
    os.kill(driver, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while alive(JOB_PID) and time.monotonic() < deadline:
        time.sleep(1)
    say("stopped" if not alive(JOB_PID) else f"still stopping after {grace_s:.0f} s")
    poll(tail=5)


def main(argv: list[str]) -> int:
    verb, rest = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if verb == "stash":
            stash()
        elif verb == "install":
            install()
        elif verb == "model":
            size = rest[rest.index("--size") + 1] if "--size" in rest else "8b"
            dests = [a for a in rest if a != "--size" and a != size]
            model(size, dests[0] if dests else "/tmp/model")
        elif verb == "start" and len(rest) == 1:
            start(rest[0])
        elif verb == "profile" and len(rest) == 1:
            start(rest[0], "profile-model")
        elif verb == "resume" and len(rest) <= 1:
            resume(rest[0] if rest else None)
        elif verb == "poll":
            poll()
        elif verb == "wait" and len(rest) == 1:
            wait(float(rest[0]))
        elif verb == "fetch":
            fetch()
        elif verb == "stop":
            stop()
        elif verb == "_arith" and len(rest) == 1:
            return arith(rest[0])
        elif verb == "_job":
            return job(rest[0], rest[1])
        else:
            say(__doc__ or "")
            return 2
    except NodeError as err:
        print(f"node: {err}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
