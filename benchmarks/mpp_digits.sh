#!/usr/bin/env bash
# Masked patch prediction in miniature (paper section 4.6) on the embedded digits; the
# numbers of benchmarks/RESULTS.md. Per seed: (a) the demo ViT trained from scratch on the
# labels; (b) the same ViT pre-trained by MPP on the unlabelled training images, then
# fine-tuned with (a)'s settings; (c) (a) for 2,000 steps, (b)'s total step count; few-shot
# probes of the random init, the MPP backbone and (a)'s trained model. From the repo root:
#   bash benchmarks/mpp_digits.sh [OUT_DIR]        # SEEDS="0 1 2" by default
# SUMMARY_SEEDS (default: SEEDS) picks the seeds the closing tables average, e.g. after
# adding a seed to an earlier OUT_DIR: SEEDS=3 SUMMARY_SEEDS="0 1 2 3".
set -euo pipefail
out=${1:-/tmp/mpp_digits}
seeds=${SEEDS:-"0 1 2"}
summary_seeds=${SUMMARY_SEEDS:-$seeds}
mkdir -p "$out"

source "$(dirname "$0")/timed.sh"

for seed in $seeds; do
  timed "scratch_$seed" python -m vit_jax.main --config=configs/demo.py \
      --config.seed="$seed" --workdir="$out/scratch_$seed"
  timed "mpp_$seed" python -m vit_jax.main --config=configs/mpp.py:digits \
      --config.seed="$seed" --workdir="$out/mpp_$seed"
  timed "finetune_$seed" python -m vit_jax.main --config=configs/demo.py \
      --config.seed="$seed" --config.pretrained="$out/mpp_$seed/params.npz" \
      --workdir="$out/finetune_$seed"
  timed "scratch2k_$seed" python -m vit_jax.main --config=configs/demo.py \
      --config.seed="$seed" --config.total_steps=2000 --workdir="$out/scratch2k_$seed"
  # The scratch run's initial parameters (same seed, same init as train_and_evaluate).
  python - "$out/init_$seed.npz" "$seed" <<'EOF'
import sys
import jax
import jax.numpy as jnp
from vit_jax import save_npz
from vit_jax.training import config_defaults, objectives
config = config_defaults.demo_config()
module, _ = objectives.get(config).create_model(config, 10, load_pretrained=False)
side = config.pp.crop
params = module.init(jax.random.PRNGKey(int(sys.argv[2])), jnp.zeros((1, side, side, 3)))
save_npz(params["params"], sys.argv[1])
EOF
  for features in "init:$out/init_$seed.npz" "mpp:$out/mpp_$seed/params.npz" \
                  "scratch:$out/scratch_$seed/params.npz"; do
    python -m vit_jax.fewshot --checkpoint="${features#*:}" --dataset=digits \
        --json="$out/fewshot_${features%%:*}_$seed.json" > /dev/null 2>&1
  done
done

python - "$out" $summary_seeds <<'EOF'
import json, sys
import numpy as np
out, seeds = sys.argv[1], sys.argv[2:]
def final(run, seed):
  with open(f"{out}/{run}_{seed}/final_metrics.json") as f:
    return json.load(f)
def fewshot(name, seed):
  with open(f"{out}/fewshot_{name}_{seed}.json") as f:
    return json.load(f)
def mean(values):
  return f"{100 * np.mean(values):.1f}" + (f" ± {100 * np.std(values):.1f}" if len(values) > 1 else "")
print("| run | test accuracy (%) | per seed |\n|---|---|---|")
for run, label in (("scratch", "(a) from scratch, 1,000 steps"),
                   ("finetune", "(b) MPP 1,000 steps, then fine-tuned 1,000"),
                   ("scratch2k", "(c) from scratch, 2,000 steps")):
  accs = [final(run, s)["eval/accuracy"] for s in seeds]
  print(f"| {label} | {mean(accs)} | {', '.join(f'{100 * a:.1f}' for a in accs)} |")
mpp = [final("mpp", s) for s in seeds]
print(f"\nMPP eval (corrupted test patches): loss {np.mean([m['eval/loss'] for m in mpp]):.3f}, "
      f"accuracy {mean([m['eval/accuracy'] for m in mpp])}%")
print("\n| features | 1-shot | 5-shot | 10-shot | 25-shot |\n|---|---|---|---|---|")
for name, label in (("init", "random init (scratch, step 0)"), ("mpp", "MPP pre-trained"),
                    ("scratch", "(a) trained on the labels")):
  cells = [mean([fewshot(name, s)[f"{k}shot"] for s in seeds]) for k in (1, 5, 10, 25)]
  print(f"| {label} | {' | '.join(cells)} |")
EOF
