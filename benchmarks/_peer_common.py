"""Helpers shared by the peer benchmarks' two sides (crawlake's .venv and a peer's .venv-peers/*):
the standard library and psutil only, so every interpreter can import it.

* :class:`TreeSampler` — peak summed RSS (and PSS) of a process and all its descendants (JVM,
  Spark's Python workers, DataLoader workers, datatrove's task processes), sampled every 0.1 s;
* :func:`cpu_seconds` — user + system CPU of this process and its waited-for children;
* :func:`run_side` — run one side in its own interpreter, sampling its process tree, and return
  the ``RESULT {json}`` line it prints (plus ``peak_rss_mb``/``peak_pss_mb``/``wall_s``);
* :func:`peer_python` — the interpreter of a peer's virtualenv (``make peers``).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / ".venv-peers"


def peer_python(env: str) -> str:
    """``.venv-peers/<env>/bin/python``; SystemExit naming ``make peers`` when it is missing."""
    python = PEERS / env / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} not found: run `make peers` first (it makes .venv-peers/{{datatrove,streaming}})")
    return str(python)


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished (waited-for) children."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                   resource.getrusage(resource.RUSAGE_CHILDREN)))


class TreeSampler(threading.Thread):
    """Max over samples of the summed RSS and PSS of process ``pid`` and its descendants."""

    def __init__(self, pid: int, interval: float = 0.1):
        super().__init__(daemon=True)
        import psutil

        self.psutil, self.root, self.interval = psutil, psutil.Process(pid), interval
        self.peak_rss = self.peak_pss = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        rss = pss = 0
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except self.psutil.NoSuchProcess:
            return
        for proc in procs:
            try:
                mem = proc.memory_full_info()
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                continue
            rss += mem.rss
            pss += getattr(mem, "pss", mem.rss)
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def run_side(python: str, script: str | Path, args: dict, env: dict | None = None, sample: bool = True,
             timeout: float | None = None) -> dict:
    """Run ``python script '<args as JSON>'``; return its last ``RESULT {...}`` line as a dict,
    with ``wall_s`` (the whole child process) and, when ``sample``, ``peak_rss_mb``/``peak_pss_mb``
    of its process tree. Raises RuntimeError with the child's output tail when it fails."""
    import signal
    import tempfile

    t0 = time.perf_counter()
    # Output to files, not pipes: helpers a side leaves behind (datatrove's multiprocess forkserver
    # and resource tracker) would hold a pipe open. The side leads its own process group, which
    # is ended after it exits, taking such leftovers with it.
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        proc = subprocess.Popen([python, str(script), json.dumps(args)], stdout=fout, stderr=ferr, text=True,
                                cwd=str(REPO), env={**os.environ, **(env or {})}, start_new_session=True)
        sampler = TreeSampler(proc.pid) if sample else None
        if sampler:
            sampler.start()
        try:
            proc.wait(timeout=timeout)
        finally:
            if sampler:
                sampler.stop()
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            proc.wait()
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read(), ferr.read()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{Path(script).name} {args.get('system', '')} {args.get('mode', '')} exited "
                           f"{proc.returncode}:\n{out[-2000:]}\n{err[-4000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    if sampler:
        result["peak_rss_mb"] = round(sampler.peak_rss / 2**20)
        result["peak_pss_mb"] = round(sampler.peak_pss / 2**20)
    return result


def emit(result: dict) -> None:
    """A side's result line (what :func:`run_side` reads)."""
    print("RESULT " + json.dumps(result), flush=True)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


if __name__ == "__main__":  # pragma: no cover
    sys.exit("a helper module; run benchmarks/bench_peer_*.py")
