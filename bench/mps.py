"""MPS limits on a real GPU: ``python -m bench.mps [--quick] [--part raw|profile|fleet|all] [--out DIR]``.

A private MPS control daemon (its own pipe and log directories under /tmp, so a daemon the machine already runs is
left alone; quit at the end, its logs appended to ``DIR/mps-logs.txt``), then one part or all three:

- **raw**: (1) thread shares: two MPS clients run the same fp16 matmul loop at once, first both unlimited (the
  baseline: about 1:1), then with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` 25 and 75: their TFLOP/s ratio against 3,
  within 20 %; (2) pinned memory: a client started with ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M`` allocates
  512 MiB (must succeed) and 2048 MiB (must fail with CUDA's out-of-memory error).
- **profile**: the built-in engine declared as an engine profile, placed by the control plane and run by the agent
  as an external process on CUDA, at 25 % then 75 %: tokens/s by the clients and through the engine adapter, the
  ratio against 3 (``bench.lib.mps_profile``).
- **fleet**: two pools of built-in replicas sharing the GPU at 25/75 % through the tenants API, a 25 → 50 change
  under load, a 128-MiB quota (``bench.lib.mps_fleet``).

Without CUDA or ``nvidia-cuda-mps-control`` the last line is ``{"bench": "mps", "skipped": REASON}``; a daemon that
does not start is skipped with its exact error and logs. ``target_met`` holds when every part run held. Progress goes
to stderr; the last stdout line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.cuda import cuda_device_count
from bench.lib.mps_daemon import MpsUnavailable, PrivateMpsDaemon, private_mps_daemon
from bench.lib.mps_fleet import fleet_part, ratio_held
from bench.lib.mps_profile import profile_part
from bench.lib.progress import progress_line
from inference_agent.serving.supervision.quota import MPS_MEMORY_ENV, MPS_THREADS_ENV

PINNED_LIMIT_MIB = 1024
PINNED_TRIES_MIB = (512, 2048)
RAW_BASELINE = "the same two matmul clients without limits (about 1:1)"
TARGET_BASELINE = "the 75/25 shares' ratio, 3"
BASELINES = {"raw": RAW_BASELINE, "all": RAW_BASELINE, "profile": TARGET_BASELINE, "fleet": TARGET_BASELINE}

progress = progress_line("mps")


# ---- the raw clients: this module run as ``--client matmul|alloc`` in a process of its own, one per MPS client


def matmul_client(seconds: float, start_at: float) -> dict[str, Any]:
    """fp16 4096² matmuls from ``start_at`` (wall clock, so that two clients overlap) for ``seconds``."""
    import torch

    size = 4096
    a, b = (torch.randn(size, size, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty_like(a)
    torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    time.sleep(max(0.0, start_at - time.time()))
    count, begun = 0, time.perf_counter()
    while time.perf_counter() - begun < seconds:
        for _ in range(20):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        count += 20
    elapsed = time.perf_counter() - begun
    late = time.time() - start_at - elapsed  # how late it began: the overlap's measure
    return {"tflops": round(count * 2 * size**3 / elapsed / 1e12, 2), "started_late_s": round(late, 3)}


def alloc_client(sizes_mib: list[int]) -> dict[str, Any]:
    """Allocate each size in turn on the GPU; what each allocation did."""
    import torch

    torch.zeros(1, device="cuda")  # the context first: its own memory is not what the limit is tried with
    results: dict[str, str] = {}
    for mib in sizes_mib:
        try:
            block = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
            block.fill_(1)
            torch.cuda.synchronize()
            results[str(mib)] = "ok"
            del block
            torch.cuda.empty_cache()
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            results[str(mib)] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return {"allocations": results}


def run_clients(daemon: PrivateMpsDaemon, clients: list[tuple[dict[str, str], list[str]]]) -> list[dict[str, Any]]:
    """Start one ``--client`` process per (environment, arguments) at once; each one's JSON answer."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.mps", "--client", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, **daemon.env, **env},
        )
        for env, args in clients
    ]  # fmt: skip
    answers = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        lines = out.strip().splitlines()
        if process.returncode != 0 or not lines:
            answers.append({"failed": f"exit {process.returncode}: {err.strip()[-400:]}"})
        else:
            answers.append(json.loads(lines[-1]))
    return answers


def raw_thread_shares(daemon: PrivateMpsDaemon, seconds: float) -> dict[str, Any]:
    def pair(percentages: tuple[int | None, int | None]) -> list[dict[str, Any]]:
        start_at = time.time() + 10.0  # both contexts are up by then
        args = ["matmul", "--seconds", str(seconds), "--start-at", f"{start_at:.3f}"]
        envs = [{} if p is None else {MPS_THREADS_ENV: str(p)} for p in percentages]
        return run_clients(daemon, [(env, args) for env in envs])

    unlimited = pair((None, None))
    limited = pair((25, 75))
    progress(f"matmul clients: unlimited {unlimited}, 25/75 {limited}")
    figures: dict[str, Any] = {"unlimited": unlimited, "limited_25_75": limited}
    if all("tflops" in answer for answer in unlimited + limited):
        figures["baseline_ratio"] = round(unlimited[1]["tflops"] / unlimited[0]["tflops"], 3)
        figures["ratio"] = round(limited[1]["tflops"] / limited[0]["tflops"], 3)
        figures["held"] = ratio_held(figures["ratio"])
    return figures


def raw_pinned_memory(daemon: PrivateMpsDaemon) -> dict[str, Any]:
    env = {MPS_MEMORY_ENV: f"0={PINNED_LIMIT_MIB}M"}
    [answer] = run_clients(daemon, [(env, ["alloc", "--mib", ",".join(map(str, PINNED_TRIES_MIB))])])
    progress(f"pinned memory {PINNED_LIMIT_MIB} MiB: {answer}")
    allocations = answer.get("allocations", {})
    within, past = (allocations.get(str(mib), "") for mib in PINNED_TRIES_MIB)
    return {"limit_mib": PINNED_LIMIT_MIB, **answer, "held": within == "ok" and "OutOfMemory" in past}


def raw_part(daemon: PrivateMpsDaemon, quick: bool) -> dict[str, Any]:
    """The matmul clients' shares and the pinned-memory limit, and whether both held."""
    shares, pinned = raw_thread_shares(daemon, 4.0 if quick else 10.0), raw_pinned_memory(daemon)
    held = bool(shares.get("held") and pinned["held"])
    return {"raw_thread_shares": shares, "raw_pinned_memory": pinned, "held": held}


def run(part: str, quick: bool, out: Path | None) -> dict[str, Any]:
    """``part`` raw, fleet or all, on a private daemon; its logs appended to ``out/mps-logs.txt``."""
    if not cuda_device_count():
        return {"bench": "mps", "skipped": "torch sees no CUDA device"}
    figures: dict[str, Any] = {"bench": "mps", "part": part, "baseline": BASELINES[part]}
    held: list[bool] = []
    daemon: PrivateMpsDaemon | None = None
    try:
        with private_mps_daemon() as daemon, tempfile.TemporaryDirectory(prefix="bench-mps-") as folder:
            progress(f"private MPS daemon at {daemon.base}")
            if part in ("raw", "all"):
                raw = raw_part(daemon, quick)
                held.append(raw.pop("held"))
                figures |= raw
                figures["ratio"] = raw["raw_thread_shares"].get("ratio")
            if part in ("profile", "all"):
                profile = profile_part(daemon, Path(folder) / "profile", quick)
                held.append(profile.pop("held"))
                figures |= profile
                figures.setdefault("ratio", profile["engine_profile"].get("ratio"))
            if part in ("fleet", "all"):
                fleet = fleet_part(daemon, Path(folder) / "fleet", quick)
                held.append(fleet.pop("held"))
                figures |= fleet
                figures.setdefault("ratio", fleet["fleet_thread_shares"].get("ratio"))
    except MpsUnavailable as exc:
        return {"bench": "mps", "skipped": f"the MPS daemon cannot run here: {exc}"}
    finally:
        if out is not None and daemon is not None:
            with (out / "mps-logs.txt").open("a") as logs:
                logs.write(f"== bench.mps --part {part}: the private daemon's logs\n{daemon.final_logs}\n")
    figures["target_met"] = all(held)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mps", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 s matmul and 8 s token windows instead of 10 and 20")
    parser.add_argument("--part", choices=["raw", "profile", "fleet", "all"], default="all", help="which (all)")
    parser.add_argument("--out", type=Path, help="where the daemon's logs go (mps-logs.txt)")
    parser.add_argument("--client", choices=["matmul", "alloc"], help=argparse.SUPPRESS)  # one MPS client process
    parser.add_argument("--seconds", type=float, default=4.0, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--mib", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client == "matmul":
        answer = matmul_client(args.seconds, args.start_at)
    elif args.client == "alloc":
        answer = alloc_client([int(m) for m in args.mib.split(",") if m])
    else:
        answer = run(args.part, args.quick, args.out)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
