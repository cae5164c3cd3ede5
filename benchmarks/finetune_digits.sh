#!/usr/bin/env bash
# Fine-tuning methods compared in miniature (issue 32; numbers in benchmarks/RESULTS.md):
# one backbone pre-trained by masked patch prediction on the unlabelled training digits
# (configs/mpp.py:digits, as benchmarks/mpp_digits.sh), then fine-tuned on the labels with
# the demo's recipe by: full fine-tuning, head only (linear probe), LP-FT (head only for
# the first half, then everything), layer decay 0.75, LoRA rank 4 and rank 16.
# Per run: test accuracy, trained parameters, optimizer-state bytes, img/s. From the repo root:
#   bash benchmarks/finetune_digits.sh [OUT_DIR]   # SEEDS="0 1 2", STEPS=500 by default
set -euo pipefail
set -f  # the regexes below are not file patterns
out=${1:-/tmp/finetune_digits}
seeds=${SEEDS:-"0 1 2"}
steps=${STEPS:-500}
mkdir -p "$out"

declare -A methods=(
  [full]=""
  [head]="--config.freeze=^(?!head/)"
  [lpft]="--config.freeze=^(?!head/) --config.freeze_steps=$((steps / 2))"
  [decay075]="--config.layer_decay=0.75"
  [lora4]="--config.lora.rank=4"
  [lora16]="--config.lora.rank=16"
)
order="full head lpft decay075 lora4 lora16"

if [ ! -f "$out/backbone/params.npz" ]; then
  python -m vit_jax.main --config=configs/mpp.py:digits --config.seed=0 \
      --workdir="$out/backbone" > "$out/backbone.log" 2>&1
fi
for seed in $seeds; do
  for method in $order; do
    run="$out/${method}_$seed"
    [ -f "$run/final_metrics.json" ] && continue
    # shellcheck disable=SC2086  # the method's flags are separate words
    python -m vit_jax.main --config=configs/demo.py --config.seed="$seed" \
        --config.pretrained="$out/backbone/params.npz" --config.total_steps="$steps" \
        --config.warmup_steps=50 --config.eval_every="$steps" --config.checkpoint_every="$steps" \
        ${methods[$method]} --workdir="$run" > "$run.log" 2>&1
    echo "$method seed $seed done"
  done
done

python - "$out" "$order" $seeds <<'EOF'
import json, re, sys
import numpy as np
out, order, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
print("| method | test accuracy (mean ± std, %d seeds) | trained parameters | optimizer state "
      "| img/s (mean) |" % len(seeds))
print("|---|---|---|---|---|")
for method in order:
  accuracy, rates = [], []
  for seed in seeds:
    with open(f"{out}/{method}_{seed}/final_metrics.json") as f:
      accuracy.append(json.load(f)["eval/accuracy"])
    log = open(f"{out}/{method}_{seed}.log").read()
    trained = re.search(r"([\d,]+) of [\d,]+ parameters train; optimizer state ([\d,]+) bytes",
                        log)
    rates.append(float(re.search(r"([\d,]+) img/s after compilation", log)[1].replace(",", "")))
  print(f"| {method} | {100 * np.mean(accuracy):.1f} ± {100 * np.std(accuracy):.1f} | "
        f"{trained[1]} | {trained[2]} B | {np.mean(rates):,.0f} |")
EOF
