#!/usr/bin/env bash
# The GPU checks, as ONE script for a lent GPU machine (the `device` tool), which has no network. The steps, the most
# valuable first (a budget cut drops the last ones):
#   0. the server's stack from the wheel bundle (`make gpu-bundle` builds .whl/; the device call carries it), in a
#      venv over the interpreter's own packages, so that the agent's replicas (whose environment keeps no
#      PYTHONPATH) import it too; nvidia-smi
#   1. nvml: the NVML probe for 24 s beside `nvidia-smi -lms 500` on the five catalog GPU metrics, each read's cost
#      (bench.gpu_nvml), which also writes a real NVML recording for the replay fixture
#   2. agent-e2e: the agent against a server on SQLite, 500 ms samples, all 12 metrics, none lost (bench.agent_e2e)
#   3. mps: a private MPS daemon, matmul clients at thread shares 25/75, a 1 GiB pinned-memory limit (bench.mps raw)
#   4. engine-profile: the built-in engine declared as engine profiles, a placed replica on CUDA at 25 % then 75 %,
#      read through the vllm adapter (bench.mps profile)
#   5. isolation: bench.isolation with GPU replicas (--device cuda)
#   6. mps-fleet: two --pools replicas sharing the GPU at 25/75 through the tenants API, a 25 → 50 change under load,
#      a 128 MiB quota (bench.mps fleet)
#   7. pytest-gpu: the tests marked `gpu`
#   8. workload: the built-in engine on CUDA, continuous vs static batching (bench.workload --part engine)
# Each step runs under its own time limit, cut to what is left of the whole run's GPU_CHECK_BUDGET_S (default 420 s:
# about half the 15-minute device budget, the machine's start included, so that a rerun fits; under the device call's
# timeout, so the summary is always written); a step with under 20 s left is skipped, and so is a step whose GPU,
# tool or torch is missing, saying why; the script goes on. Results land in $OUT (at most 8 files come back from the
# device): gpu-check.log (everything printed), summary.json (each step's status and its bench's JSON), nvidia-smi.txt,
# nvml_recording.jsonl, mps-logs.txt. Exit status: 0 when no step failed (ran or skipped), 1 otherwise.
#
# Interpreter: $PYTHON, else python3 when it has torch (the GPU machine's image), else this checkout's .venv.
# On the device:  run(command="bash scripts/gpu-check.sh", carry=[".whl"], timeout_s=440)
# Here, with no GPU:  make gpu-bundle && PIP_NO_INDEX=1 bash scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
OUT="${OUT:-$REPO/gpu-check-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
TEE=$!
trap 'exec 1>&- 2>&-; wait "$TEE"' EXIT  # the log is whole when the script returns
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
STARTED=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-420}
SUMMARY="$OUT/steps.jsonl"
: > "$SUMMARY"

say() { printf '[gpu-check %4ds] %s\n' "$(( $(date +%s) - STARTED ))" "$*"; }

if [[ -z "${PYTHON:-}" ]]; then
    if python3 -c 'import torch' 2>/dev/null; then PYTHON=python3
    elif [[ -x .venv/bin/python ]]; then PYTHON="$REPO/.venv/bin/python"
    else PYTHON=python3; fi
fi
say "python: $PYTHON ($("$PYTHON" --version 2>&1))"

# ---- 0. the server's stack: import it, else install the bundle in a venv over the interpreter's own packages
STACK='import fastapi, starlette, uvicorn, pydantic, pydantic_settings, sqlalchemy, alembic, apscheduler, re2, cramjam'
VENV="${FLEETPILOT_GPU_VENV:-/tmp/fleetpilot-gpu-venv}"
export PYTHONPATH="$REPO"
if "$PYTHON" -c "$STACK" 2>/dev/null; then
    say "bundle: not needed, $PYTHON already has the server's stack"
elif compgen -G ".whl/*.whl" >/dev/null; then
    say "bundle: installing $(ls .whl/*.whl | wc -l) wheels ($(du -sh .whl | cut -f1)) into a venv at $VENV"
    rm -rf "$VENV"
    if ! "$PYTHON" -m venv --without-pip "$VENV" \
        || ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$VENV/bundle" \
            .whl/*.whl; then
        say "bundle: cannot install .whl/ for $PYTHON (built for $(head -1 .whl/MANIFEST.txt))"
        exit 2
    fi
    # the bundle first, then the interpreter's own site-packages (torch, numpy, ...), then this checkout: what
    # PYTHONPATH would give, for every process the venv's python starts
    BASES=$("$PYTHON" -c 'import site; print(repr(site.getsitepackages()))')
    "$VENV/bin/python" - "$VENV/bundle" "$REPO" "$BASES" <<'EOF'
import site, sys
bundle, repo, bases = sys.argv[1:]
lines = [bundle, f"import site; [site.addsitedir(d) for d in {bases}]", repo]
open(f"{site.getsitepackages()[0]}/fleetpilot-gpu.pth", "w").write("\n".join(lines) + "\n")
EOF
    PYTHON="$VENV/bin/python"
else
    say "bundle: $PYTHON lacks the server's stack and there is no .whl/ (make gpu-bundle, then carry .whl)"
    exit 2
fi
if ! "$PYTHON" -c "$STACK; import fleetpilot.cli, inference_agent.daemon"; then
    say "the project does not import with $PYTHON: nothing can run"
    exit 2
fi
# a replica gets only the variables inference_agent/serving/supervision/launcher.py passes: check it imports with the bare minimum
if ! env -i PATH="$PATH" HOME="${HOME:-/tmp}" "$PYTHON" -c 'import inference_agent.serving.replica.app'; then
    say "a replica does not import with $PYTHON in a replica's environment: the steps that start replicas will fail"
fi
NO_TORCH=""
if ! TORCH_SAID=$("$PYTHON" -c 'import torch' 2>&1); then
    NO_TORCH="torch does not import with $PYTHON ($(tail -1 <<<"$TORCH_SAID"))"
    say "$NO_TORCH"
fi
HAS_CUDA=$("$PYTHON" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
say "torch sees CUDA: $HAS_CUDA"

# step NAME LIMIT_S COMMAND...: runs COMMAND under its limit, keeps its last line when it is JSON (a bench's result)
step() {
    local name=$1 limit=$2
    shift 2
    local left=$(( BUDGET - ($(date +%s) - STARTED) - 15 ))  # 15 s kept for the summary
    if (( left < 20 )); then
        skip "$name" "no time left of the ${BUDGET} s budget"
        return
    fi
    (( limit > left )) && limit=$left
    say "== $name (limit ${limit}s): $*"
    local log="$OUT/.step-$name.txt" begun rc
    begun=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    "$PYTHON" - "$name" "$rc" "$(( $(date +%s) - begun ))" "$log" >> "$SUMMARY" <<'EOF'
import json, sys
name, rc, seconds, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lines = [line for line in open(log, errors="replace").read().splitlines() if line.strip()]
result = None
if lines and lines[-1].startswith("{"):
    try:
        result = json.loads(lines[-1])
    except ValueError:
        pass
if rc in (124, 137):
    status = f"timed out after {seconds} s"
elif rc != 0:
    status = f"failed (rc {rc})"
elif isinstance(result, dict) and "skipped" in result:
    status = f"skipped: {result['skipped']}"
elif result is None and lines and " skipped" in lines[-1] and " passed" not in lines[-1]:
    # pytest's summary line: every test skipped; its -rs lines give each reason
    reasons = sorted({line.split("] ", 1)[-1] for line in lines if line.startswith("SKIPPED")})
    status = "skipped: " + "; ".join(reasons)
elif result is None and lines:
    status = "ran: " + lines[-1].strip("= ")
else:
    misses = [k for k, v in (result or {}).items() if v is False]  # a target that did not hold
    status = "ran" + (f"; not held: {', '.join(misses)}" if misses else "")
print(json.dumps({"step": name, "status": status, "seconds": seconds, "result": result}))
EOF
    rm -f "$log"
    say "   $name: $(tail -1 "$SUMMARY" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["status"])')"
}

# skip NAME REASON: a step that cannot start here, recorded as skipped
skip() {
    "$PYTHON" -c 'import json, sys; print(json.dumps({"step": sys.argv[1], "status": "skipped: " + sys.argv[2],
        "seconds": 0, "result": None}))' "$1" "$2" >> "$SUMMARY"
    say "== $1: skipped: $2"
}

# torch_step NAME LIMIT_S COMMAND...: a step whose bench needs torch, skipped with why where it does not import
torch_step() {
    if [[ -n $NO_TORCH ]]; then skip "$1" "$NO_TORCH"; else step "$@"; fi
}

# ---- the GPU as nvidia-smi sees it, then the steps, the most valuable first
if command -v nvidia-smi >/dev/null; then
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
    nvidia-smi -q >> "$OUT/nvidia-smi.txt" 2>&1
    head -20 "$OUT/nvidia-smi.txt"
else
    echo "no nvidia-smi on PATH" > "$OUT/nvidia-smi.txt"
fi
step nvml 45 "$PYTHON" -m bench.gpu_nvml --seconds 24 --out "$OUT"
step agent-e2e 60 "$PYTHON" -m bench.agent_e2e --seconds 15 --gpu-probe nvml
torch_step mps 50 "$PYTHON" -m bench.mps --part raw --quick --out "$OUT"
torch_step engine-profile 85 "$PYTHON" -m bench.mps --part profile --quick --out "$OUT"
torch_step isolation 75 "$PYTHON" -m bench.isolation --device cuda --quick
torch_step mps-fleet 90 "$PYTHON" -m bench.mps --part fleet --quick --out "$OUT"
GPU_TESTS=(tests/inference_agent/test_nvml_gpu.py tests/inference_agent/torch_runtime/test_engine.py
           tests/inference_agent/isolation/test_mps_gpu.py)
torch_step pytest-gpu 35 "$PYTHON" -m pytest -m gpu -v -rs -p no:cacheprovider "${GPU_TESTS[@]}"
# on a CPU the same comparison is `python -m bench.workload`, not this script's
if [[ $HAS_CUDA == 1 ]]; then
    step workload 45 "$PYTHON" -m bench.workload --part engine --quick
else
    skip workload "${NO_TORCH:-torch sees no CUDA device}"
fi

# ---- the summary: every step's status, and what failed or was skipped
"$PYTHON" - "$SUMMARY" "$OUT/summary.json" <<'EOF'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
json.dump({"steps": steps}, open(sys.argv[2], "w"), indent=1)
print("\nstep            status")
for s in steps:
    print(f"{s['step']:<15} {s['status']} ({s['seconds']} s)")
failed = [s["step"] for s in steps if not s["status"].startswith(("ran", "skipped"))]
skipped = [s["step"] for s in steps if s["status"].startswith("skipped")]
print(f"\n{len(steps) - len(failed) - len(skipped)} ran, {len(skipped)} skipped, {len(failed)} failed"
      + (f": {', '.join(failed)}" if failed else ""))
sys.exit(1 if failed else 0)
EOF
RC=$?
rm -f "$SUMMARY"
say "done (rc $RC); results in $OUT"
exit $RC
