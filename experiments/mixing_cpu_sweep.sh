#!/usr/bin/env bash
# The Appendix H sweep at the `cpu` budget (experiments/configs/mixing_cpu.py), in phases
# ordered so that each of the paper's claims gets its numbers as early as possible:
#   1. pre-training, Table 1: 4 mixers x seeds 0, 1, 2              (Table 1, MLM)
#   2. MNLI-analogue fine-tuning of those 12 checkpoints            (Table 1, MNLI)
#   3. pre-training, Figure 1 hybrids k = 1, 2, 3 at seed 0         (Figure 1, MLM)
#   4. MNLI-analogue fine-tuning of the hybrids                     (Figure 1, MNLI)
#   5. SQuAD-analogue fine-tuning at seed 0: k = 0 .. 4             (Figure 1, SQuAD)
#   6. SQuAD-analogue fine-tuning of the other seeds of k = 0 and 4
#   7-9. the hybrids' seeds 1 and 2: pre-training, MNLI, SQuAD      (Figure 1, 3 seeds)
# Every stage resumes from its orbax checkpoint (every 5 min of wall time and on SIGTERM)
# and is skipped once its result.json exists; a phase with nothing left is skipped, so
# the sweep spans sessions. Each phase logs its command, revision and 1-min load.
# A workdir lives and dies with its machine: with ARCHIVE_TO=DIR (e.g. the main
# checkout's results/mixing/runs/cpu) every finished stage's records are also copied to
# DIR, to be committed; the reports rebuild from there (mixing_sweep.py --archive_to).
#   setsid nohup nice -n 19 bash experiments/mixing_cpu_sweep.sh /work/runs_mixing \
#       >> /work/runs_mixing/sweep.log 2>&1 &
#   echo $! > /work/bg/mixing.pgid        # setsid: the pid is the process group id
# Stop: kill -TERM -- -$(cat /work/bg/mixing.pgid)   (stages checkpoint, then exit)
# Two cores: start the same command twice (logging to two files); a run that one copy is
# training (its running.lock) is skipped by the other, so they split the runs.
# Status: python experiments/mixing_sweep.py --config=experiments/configs/mixing_cpu.py \
#   --workdir=WORKDIR --seeds=3 --hybrid_ks=1,2,3 --hybrid_seeds=3 --status
#
# `bash experiments/mixing_cpu_sweep.sh WORKDIR long` runs the plateau check instead
# (experiments/configs/mixing_cpu_long.py: 3x the steps, seed 0 of each mixer):
#   1. pre-training of SepConv and the Transformer (the pair whose order is in question)
#   2. pre-training of average attention and BProj
#   3. MNLI-analogue fine-tuning of the 4 checkpoints
#   4. SQuAD-analogue fine-tuning of SepConv and the Transformer (Figure 1's k = 4, 0)
#   5. seeds 1 and 2 of SepConv and the Transformer (their order at 6000 steps was inside
#      the seed noise at one seed), then 6. their MNLI-analogue fine-tuning
# `... WORKDIR long_seeds` completes `cpu_long` (6000 steps) to 3 seeds of every model,
# one run at a time with its fine-tuning right after its pre-training, in the order that
# decides the most claims soonest (seed 0 of the mixers and seeds 1, 2 of SepConv and the
# Transformer are recorded in results/mixing/mixing_layers_cpu_long.json):
#   1-4. average attention seed 1, BProj seed 1, average seed 2, BProj seed 2: pre-training
#        and MNLI-analogue fine-tuning                              (Table 1, own seeds)
#   5-7. hybrids k = 1, 2, 3, seeds 0 and 1: pre-training, MNLI and SQuAD analogues
#   8-9. the Transformer and SepConv seed 1 again (their recorded runs have no SQuAD, their
#        checkpoints are gone): pre-training and SQuAD-analogue fine-tuning
#   10-12. hybrids k = 1, 2, 3 seed 2; 13-14. the Transformer and SepConv seed 2 again
#                                                                    (Figure 1, own seeds)
# `... WORKDIR longer_seeds`: seeds 1 and 2 of SepConv and the Transformer at 18000 steps
# (experiments/configs/mixing_cpu_longer.py), one run at a time with its fine-tuning right
# after its pre-training (a checkpoint dies with its machine's workdir): 1-2. seed 1,
# pre-training and MNLI analogue; 3-4. seed 2, pre-training, MNLI and SQuAD analogues
# (SepConv first: the side with the wider MNLI spread over seeds 0 and 1).
# `... WORKDIR longer` triples the steps once more (experiments/configs/
# mixing_cpu_longer.py: 18000 steps, seed 0), one mixer per phase in the order of what
# is still gaining most: 1. the Transformer, 2. SepConv, 3. BProj, 4. average attention
# (the nearest to flat at 6000 steps), then 5. MNLI-analogue fine-tuning of the 4 checkpoints.
# `... WORKDIR longest` triples them again (experiments/configs/mixing_cpu_longest.py: 54000
# steps, ~2.8 h a run): 1. average attention (the nearest to flat at 18000 steps), 2. the
# Transformer, 3. SepConv, 4. BProj, then 5. MNLI-analogue fine-tuning of the 4 checkpoints.
set -u
# With autogroup scheduling (the Linux default) `nice` only ranks processes inside one
# session, and setsid starts a new one: lower the whole session's CPU share as well.
{ echo 19 > /proc/self/autogroup; } 2>/dev/null || true
cd "$(dirname "$0")/.." || exit 2
workdir="${1:-runs/mixing_cpu}"
schedule="${2:-cpu}"
py="${PYTHON:-python}"
[ -z "${PYTHON:-}" ] && [ -f .venv/bin/activate ] && . .venv/bin/activate
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
case "$schedule" in
  cpu)
    common="--config=experiments/configs/mixing_cpu.py --workdir=$workdir"
    phases=("--seeds=3 --hybrid_ks= --stages=pretrain"
            "--seeds=3 --hybrid_ks= --stages=mnli"
            "--seeds=3 --hybrid_ks=1,2,3 --hybrid_seeds=1 --stages=pretrain"
            "--seeds=3 --hybrid_ks=1,2,3 --hybrid_seeds=1 --stages=mnli"
            "--seeds=1 --hybrid_ks=1,2,3 --hybrid_seeds=1 --stages=squad"
            "--seeds=3 --hybrid_ks=1,2,3 --hybrid_seeds=1 --stages=squad"
            "--seeds=3 --hybrid_ks=1,2,3 --hybrid_seeds=3 --stages=pretrain"
            "--seeds=3 --hybrid_ks=1,2,3 --hybrid_seeds=3 --stages=mnli"
            "--seeds=3 --hybrid_ks=1,2,3 --hybrid_seeds=3 --stages=squad") ;;
  long)
    common="--config=experiments/configs/mixing_cpu_long.py --workdir=$workdir --seeds=1 --hybrid_ks="
    phases=("--table_mixers=sepconv,attention --stages=pretrain"
            "--stages=pretrain"
            "--stages=mnli"
            "--stages=squad"
            "--seeds=3 --table_mixers=sepconv,attention --stages=pretrain"
            "--seeds=3 --table_mixers=sepconv,attention --stages=mnli") ;;
  long_seeds)
    common="--config=experiments/configs/mixing_cpu_long.py --workdir=$workdir --seeds=3"
    t="--hybrid_ks= --stages=pretrain,mnli"
    h="--table_mixers= --hybrid_seeds=2"
    k="--hybrid_ks= --stages=pretrain,squad"
    phases=("$t --table_mixers=average --seeds=2 --first_seed=1"
            "$t --table_mixers=bilinear --seeds=2 --first_seed=1"
            "$t --table_mixers=average --first_seed=2"
            "$t --table_mixers=bilinear --first_seed=2"
            "$h --hybrid_ks=1" "$h --hybrid_ks=2" "$h --hybrid_ks=3"
            "$k --table_mixers=attention --seeds=2 --first_seed=1"
            "$k --table_mixers=sepconv --seeds=2 --first_seed=1"
            "--table_mixers= --hybrid_ks=1 --first_seed=2"
            "--table_mixers= --hybrid_ks=2 --first_seed=2"
            "--table_mixers= --hybrid_ks=3 --first_seed=2"
            "$k --table_mixers=attention --first_seed=2"
            "$k --table_mixers=sepconv --first_seed=2") ;;
  longer_seeds)
    common="--config=experiments/configs/mixing_cpu_longer.py --workdir=$workdir --hybrid_ks="
    phases=("--table_mixers=sepconv --seeds=2 --first_seed=1 --stages=pretrain,mnli"
            "--table_mixers=attention --seeds=2 --first_seed=1 --stages=pretrain,mnli"
            "--table_mixers=sepconv --seeds=3 --first_seed=2 --stages=pretrain,mnli,squad"
            "--table_mixers=attention --seeds=3 --first_seed=2 --stages=pretrain,mnli,squad") ;;
  longer)
    common="--config=experiments/configs/mixing_cpu_longer.py --workdir=$workdir --seeds=1 --hybrid_ks="
    phases=("--table_mixers=attention --stages=pretrain"
            "--table_mixers=sepconv --stages=pretrain"
            "--table_mixers=bilinear --stages=pretrain"
            "--stages=pretrain"
            "--stages=mnli") ;;
  longest)
    common="--config=experiments/configs/mixing_cpu_longest.py --workdir=$workdir --seeds=1 --hybrid_ks="
    phases=("--table_mixers=average --stages=pretrain"
            "--table_mixers=attention --stages=pretrain"
            "--table_mixers=sepconv --stages=pretrain"
            "--stages=pretrain"
            "--stages=mnli") ;;
  *) echo "error: schedule must be cpu, long, long_seeds, longer, longer_seeds or longest," \
          "got '$schedule'" >&2; exit 2 ;;
esac
for phase in "${phases[@]}"; do
  # shellcheck disable=SC2086
  left=$("$py" experiments/mixing_sweep.py $common $phase --status | tail -1)
  if [[ "$left" == *" 0 partial, 0 missing"* ]]; then
    echo "== $(date -u +%FT%TZ) skip (done): $phase"; continue
  fi
  echo "== $(date -u +%FT%TZ) rev $(git rev-parse --short HEAD) load $(cut -d' ' -f1 /proc/loadavg)"
  echo "   $py experiments/mixing_sweep.py $common $phase"
  echo "   before: $left"
  # shellcheck disable=SC2086
  "$py" experiments/mixing_sweep.py $common $phase ${ARCHIVE_TO:+--archive_to="$ARCHIVE_TO"} \
    || { rc=$?; echo "== stopped rc=$rc"; exit $rc; }
done
echo "== $(date -u +%FT%TZ) sweep done; report in $workdir/report"
