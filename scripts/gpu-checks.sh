#!/usr/bin/env bash
# hetsync's checks on a CUDA device, in one go, for a session that has a GPU lent
# (written for one GPU; about 3 minutes on a quiet machine):
#
#   scripts/gpu-checks.sh [OUT]        OUT: default runs/gpu-checks; PYTHON: default python3
#
# It writes OUT/gpu-checks.md: the machine, the GPU tests' outcomes (the ones the CPU-only CI
# skips) and what two short `hetsync run --device cuda` runs measured beside the same runs on
# the CPU. Paste the figures you keep into the README's "What was and was not run on GPUs"
# with this command. Exit status: the tests' (0: all passed).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu-checks}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
REPORT="$OUT/gpu-checks.md"

{
  echo "# hetsync GPU checks"
  echo
  echo "\`scripts/gpu-checks.sh $OUT\` at $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo '```'
  nvidia-smi -L 2>&1 | head -8
  "$PY" -c 'import torch, torch.distributed as d; print("torch", torch.__version__, "cuda", torch.version.cuda, "GPUs", torch.cuda.device_count(), "nccl", d.is_nccl_available())'
  echo '```'
  echo
  echo "## Tests (skipped on a CPU-only machine)"
  echo
  echo '```'
} > "$REPORT"

# the GPU tests: hetsync run --device cuda (tensors on the device; no device-to-host copy per collective
# step, by the profiler), a workload and its shard on the GPU, a user's loop with its module on the GPU
timeout 240 "$PY" -m pytest -o addopts="" -q -p no:cacheprovider -rs \
  tests/runtime/test_device.py tests/runtime/test_loop_gpu.py \
  "tests/workloads/test_base.py::test_a_workload_and_a_shard_moved_to_a_gpu_compute_there_what_the_cpu_computes" \
  < /dev/null 2>&1 | tail -25 | tee -a "$REPORT"
tests=${PIPESTATUS[0]}
echo '```' >> "$REPORT"

# two short runs per path, on the GPU and on the CPU: BSP on elastic-4-signal (signal1d-cnn), 200 rounds
{
  echo
  echo "## hetsync run, BSP on elastic-4-signal, 200 rounds"
  echo
  echo "| path | device | workers | wall s | samples/s | final accuracy |"
  echo "|---|---|---|---|---|---|"
} >> "$REPORT"
for path in ps collective; do
  for device in cuda cpu; do
    nproc=2
    if [ "$path" = collective ] && [ "$device" = cuda ]; then
      nproc=$("$PY" -c 'import torch; print(min(2, torch.cuda.device_count()))')  # NCCL: a GPU per worker
    fi
    run="$OUT/run-$path-$device"
    timeout 120 "$PY" -m hetsync run -s elastic-4-signal -p bsp --nproc "$nproc" --path "$path" --device "$device" \
      --set max_steps=200 --set max_time_s=100 --no-plots --out "$run" > "$run.log" 2>&1
    code=$?
    "$PY" - "$run" "$path" "$device" "$nproc" "$code" >> "$REPORT" <<'PYEOF'
import json, sys
from pathlib import Path
run, path, device, nproc, code = sys.argv[1:]
try:
    (s,) = json.loads((Path(run) / "summary.json").read_text())
except (OSError, ValueError):
    print(f"| {path} | {device} | {nproc} | failed (exit {code}, see {run}.log) | | |")
    sys.exit(0)
wall = s.get("wall_time_s")
rate = s.get("samples_per_s")
acc = (s.get("final_metrics") or {}).get("accuracy")
fmt = lambda v, f: "?" if v is None else format(v, f)
print(f"| {path} | {device} | {nproc} | {fmt(wall, '.2f')} | {fmt(rate, ',.0f')} | {fmt(acc, '.3f')} |")
PYEOF
  done
done
echo >> "$REPORT"
echo "wrote $REPORT"
cat "$REPORT"
exit "$tests"
