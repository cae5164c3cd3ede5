#!/usr/bin/env bash
# FlexiViT in miniature on the embedded digits: the numbers of benchmarks/RESULTS.md. The
# demo's 4-block ViT at 24 px, trained (a) once for every patch size of SIZES
# (config.model.flexi_patch_sizes: FlexiViT's 32x32 kernel and 7x7 table resized per step)
# and (b) once per patch size as a plain fixed-size ViT, each for the demo's 1,000 steps.
# Then per patch size: test accuracy of (a) (its eval at that size) and (b), of (b)'s
# EXPORT-size model and (a)'s params.npz moved to that size by load_npz(patch_size=) (PI-
# resize), and inference img/s of the model at that size. From the repo root:
#   bash benchmarks/flexivit_digits.sh [OUT_DIR]     # SIZES="3 4 6 8 12" EXPORT=6 SEED=0
set -euo pipefail
out=${1:-/tmp/flexivit_digits}
sizes=${SIZES:-"3 4 6 8 12"}
export_size=${EXPORT:-6}
seed=${SEED:-0}
mkdir -p "$out"
common=(--config=configs/demo.py --config.pp.crop=24 --config.pp.resize=26
        --config.seed="$seed")

source "$(dirname "$0")/timed.sh"

tuple="($(echo "$sizes" | tr ' ' ','),)"
timed flexi python -m vit_jax.main "${common[@]}" --config.model.flexi_patch_sizes="$tuple" \
    --config.model.flexi_export_patch_size="$export_size" --workdir="$out/flexi"
for size in $sizes; do
  timed "fixed_$size" python -m vit_jax.main "${common[@]}" --config.model.patch_size="$size" \
      --workdir="$out/fixed_$size"
done

python - "$out" "$export_size" $sizes <<'EOF'
import json, sys, time
import jax
import numpy as np
from vit_jax import load_npz
from vit_jax.training import config_defaults
from vit_jax.data.tf_stack import tf_pipeline as pipeline

out, export_size, sizes = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3:]]
config = config_defaults.demo_config()
config.pp.crop, config.pp.resize = 24, 26
test = list(pipeline.open_dataset(config).eval_batches(batch_size=300, process_index=0,
                                                     process_count=1))

def accuracy(path, patch_size):
  module, params = load_npz(path, patch_size=patch_size)
  apply = jax.jit(lambda p, x: module.apply({"params": p}, x))
  right = sum(float(np.sum((np.argmax(apply(params, b["image"]), -1) == b["label"]) * b["mask"]))
              for b in test)
  return right / sum(float(np.sum(b["mask"])) for b in test)

def img_per_s(path, patch_size, batch=256, repeats=20):
  module, params = load_npz(path, patch_size=patch_size)
  apply = jax.jit(lambda p, x: module.apply({"params": p}, x))
  x = np.random.default_rng(0).uniform(-1, 1, (batch, 24, 24, 3)).astype(np.float32)
  apply(params, x).block_until_ready()
  best = float("inf")
  for _ in range(3):
    start = time.perf_counter()
    for _ in range(repeats):
      y = apply(params, x)
    y.block_until_ready()
    best = min(best, time.perf_counter() - start)
  return batch * repeats / best

def final(run):
  with open(f"{out}/{run}/final_metrics.json") as f:
    return json.load(f)

flexi = final("flexi")
print(f"| patch size | tokens | FlexiViT (one model) | fixed ViT at this size | fixed "
      f"{export_size} PI-resized here | FlexiViT params.npz ({export_size}) PI-resized "
      "here | inference img/s |")
print("|---|---|---|---|---|---|---|")
for size in sizes:
  flexible = 100 * flexi[f"eval/test/accuracy_p{size}"]
  fixed = 100 * final(f"fixed_{size}")["eval/accuracy"]
  moved = 100 * accuracy(f"{out}/fixed_{export_size}/params.npz", size)
  flexi_moved = 100 * accuracy(f"{out}/flexi/params.npz", size)
  speed = img_per_s(f"{out}/fixed_{size}/params.npz", size)
  print(f"| {size} | {(24 // size)**2} | {flexible:.1f} | {fixed:.1f} | {moved:.1f} | "
        f"{flexi_moved:.1f} | {speed:,.0f} |")
EOF
