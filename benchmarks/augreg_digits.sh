#!/usr/bin/env bash
# AugReg's regularisation levels from scratch on the embedded digits (configs/demo.py, 1,000
# steps): none, light (randaug(2,10) + mixup 0.2, AugReg's light2), medium (randaug(2,15) +
# mixup 0.2, medium1) and stochastic depth 0.1 alone, 3 seeds each. Prints one line per run:
# level, seed, test accuracy and loss (from final_metrics.json). Usage:
#   bash benchmarks/augreg_digits.sh [OUT_DIR]
set -u
OUT="${1:-/tmp/augreg_digits}"
declare -A LEVELS=(
  [none]=""
  [light]="--config.pp.randaug=2,10 --config.pp.mixup_alpha=0.2"
  [medium]="--config.pp.randaug=2,15 --config.pp.mixup_alpha=0.2"
  [sd]="--config.model.stochastic_depth=0.1"
)
for level in none light medium sd; do
  for seed in 0 1 2; do
    workdir="$OUT/$level-$seed"
    # shellcheck disable=SC2086
    python -m vit_jax.main --config=configs/demo.py --config.seed=$seed ${LEVELS[$level]} \
        --workdir="$workdir" > "$workdir.log" 2>&1 || { echo "$level $seed failed"; continue; }
    python - "$level" "$seed" "$workdir/final_metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[3]))
print(f"{sys.argv[1]:<7} seed {sys.argv[2]}  accuracy {m['eval/accuracy']:.4f}  loss {m['eval/loss']:.4f}",
      flush=True)
PY
  done
done
