#!/usr/bin/env bash
# The 12 f2 runs of Fang et al. Section 5 (4 models x seeds 0, 1, 2), one after another.
# Each resumes from its checkpoint in WORKDIR (time checkpoints every 5 min, and on
# Ctrl-C / SIGTERM) and is skipped once its result exists, so the sweep can span
# sessions:  nohup nice -n 19 bash experiments/fang_f2_sweep.sh [WORKDIR] > sweep.log &
set -u
# With autogroup scheduling (the Linux default) `nice` only ranks processes inside one
# session, and setsid starts a new one: lower the whole session's CPU share as well.
{ echo 19 > /proc/self/autogroup; } 2>/dev/null || true
cd "$(dirname "$0")/.." || exit 2
workdir="${1:-runs/fang_f2}"
[ -f .venv/bin/activate ] && . .venv/bin/activate
for seed in 0 1 2; do
  for entry in nn_width:4368 nn_depth attention:n_q attention:4368; do
    extra=""
    [ "$entry" = "attention:4368" ] && extra="--config.literal_check_points=0"
    echo "== $(date -u +%FT%TZ) seed $seed $entry rev $(git rev-parse --short HEAD)" \
         "load $(cut -d' ' -f1 /proc/loadavg)"
    nice -n 19 python experiments/fang_regression.py --config=experiments/configs/fang_f2.py \
      --config.seeds="($seed,)" --workdir="$workdir" --only="$entry" --progress=false $extra
  done
done
