#!/bin/bash
# Every real-GPU check of issue 18 in one run (GPU time is scarce: one call, then read the results).
#
#     OUT=results bash scripts/gpu_suite.sh [only...]     # only: machine gpu visible estimate torch cli
#
# Writes to $OUT (default ./gpu-results): machine.txt, gpu_check.md, cuda_visible.md, estimate.md,
# estimate.json, torch_check.md, cli.txt and log.txt (everything the checks printed on stderr).
# Each check has its own time limit, so one that hangs still leaves the others' results.
set -u
out=${OUT:-gpu-results}
mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
want() { [ $# -eq 0 ] || [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }
ONLY="$*"
log="$out/log.txt"
step() { echo "== $1 $(date +%T)" | tee -a "$log" >&2; }

if want machine; then
  step machine
  { date -u; uname -a; nvidia-smi; nvidia-smi -q | head -40
    $py -c "import torch, pynvml; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'pynvml', getattr(pynvml, '__version__', '?'))"; } > "$out/machine.txt" 2>&1
fi
if want gpu; then
  step gpu_check
  timeout 100 $py scripts/gpu_check.py --torch --runs 10 --report "$out/gpu_check.md" >> "$log" 2>&1
  echo "gpu_check exit $?" >> "$log"
  step "where vram status spends its time on this driver"
  $py -X importtime -m vramkit status 2>&1 >/dev/null | sort -t'|' -k2 -n | tail -25 >> "$log"
  $py -m cProfile -s cumtime -m vramkit status 2>&1 | awk '/ncalls/{f=1} f' | head -45 >> "$log"
fi
if want visible; then
  step cuda_visible_check
  timeout 90 $py scripts/cuda_visible_check.py --report "$out/cuda_visible.md" >> "$log" 2>&1
  echo "cuda_visible_check exit $?" >> "$log"
fi
if want estimate; then
  step estimate_check
  timeout 200 $py scripts/estimate_check.py --report "$out/estimate.md" --json "$out/estimate.json" >> "$log" 2>&1
  echo "estimate_check exit $?" >> "$log"
fi
if want torch; then
  step torch_gpu_check
  timeout 150 $py scripts/torch_gpu_check.py --report "$out/torch_check.md" ${TORCH_CHECKS:+--only $TORCH_CHECKS} \
    >> "$log" 2>&1
  echo "torch_gpu_check exit $?" >> "$log"
fi
if want cli; then
  step cli
  cli="$out/cli.txt"
  : > "$cli"
  run() { echo "\$ $*" >> "$cli"; timeout 60 "$@" >> "$cli" 2>&1; echo "[exit $?]" >> "$cli"; echo >> "$cli"; }
  vram() { run $py -m vramkit "$@"; }
  # a process holding memory, so status, ps, serve and record have something to show
  $py -c "import sys, torch; x = torch.empty(3 * 2**30, dtype=torch.uint8, device='cuda'); print('held', flush=True);
sys.stdin.read()" < <(sleep 60) > /dev/null 2>&1 &
  holder=$!
  sleep 8
  vram status
  vram status --json
  vram ps
  vram ps --holders
  vram doctor
  vram pick --format index
  vram estimate bert-large-uncased --batch 8 --seq 512 --precision fp32
  db=$(mktemp -d)/h.db
  vram record --db "$db" --interval 1s --samples 4
  vram report --db "$db"
  $py -m vramkit serve --listen 127.0.0.1:9797 --interval 1s >> "$log" 2>&1 &
  server=$!
  sleep 4
  run curl -s http://127.0.0.1:9797/metrics
  run curl -s http://127.0.0.1:9797/api/v1/snapshot
  kill $server 2>/dev/null
  run nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw --format=csv
  kill $holder 2>/dev/null
  wait 2>/dev/null
fi
step done
