#!/bin/bash
# Issue 54: configs 2x to 20x over their slice's memory, planned with the fit search
# (python -m vit_jax.plan, compiled here for a TPU slice, no TPU); one JSON report each in
# OUT, then a table: how far over, what was suggested, the compiles and the seconds.
#   bash benchmarks/fit_search.sh /tmp/fit_search [NAME ...]
set -u
OUT=${1:?usage: fit_search.sh OUT_DIR [NAME ...]}; shift
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
# The one-block 64 px model of tests/test_plan.py (bytes that grow with the images).
TINY="--config=configs/demo.py --config.batch_eval=64 --config.model.num_layers=1
  --config.model.hidden_size=32 --config.model.mlp_dim=64 --config.model.num_heads=2
  --config.pp.crop=64 --config.pp.resize=64 --tpu=v5e-4"
declare -A RUNS=(
  [tiny_b512_60M]="$TINY --config.batch=512 --hbm_limit_gib=0.06"
  [tiny_b512_accum4_28M]="$TINY --config.batch=512 --config.accum_steps=4 --hbm_limit_gib=0.027"
  [tiny_b512_25M]="$TINY --config.batch=512 --hbm_limit_gib=0.024"
  [tiny_b2048_41M]="$TINY --config.batch=2048 --hbm_limit_gib=0.04"
  [tiny_b2048_25M]="$TINY --config.batch=2048 --hbm_limit_gib=0.024"
  [s16_scan_cifar10_v2-8_b1024]="--config=configs/vit_s16.py:cifar10 --config.accum_steps=1 --config.batch=1024 --config.model.scan_layers=True --tpu=v2-8"
  [s16_scan_cifar10_v2-8_b2048]="--config=configs/vit_s16.py:cifar10 --config.accum_steps=1 --config.batch=2048 --config.model.scan_layers=True --tpu=v2-8"
  [s16_cifar10_v2-8_accum1]="--config=configs/vit_s16.py:cifar10 --config.accum_steps=1 --config.batch=2048 --tpu=v2-8"
)
for name in "${@:-${!RUNS[@]}}"; do
  [ -e "$OUT/$name.json" ] && continue
  /usr/bin/time -f "%e s wall, %U+%S s CPU" -o "$OUT/$name.time" \
    python -m vit_jax.plan ${RUNS[$name]} --json="$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? ($(cat "$OUT/$name.time"))"
done
python - "$OUT" <<'PY'
import glob, json, os, sys
print("| run | over | suggested | search compiles | search s | plan s | plan / its compiles |")
print("|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
  r = json.load(open(path))
  s = r["search"] or {"tried": [], "checked": []}
  need = max(r[k]["peak_bytes_per_device"] or 0 for k in ("train", "eval") if not r[k]["fits"])
  compiles = sum(r[k]["compile_seconds"] for k in ("train", "eval")) + sum(
      t["seconds"] for t in s["tried"]) + r["pricing_seconds"]
  told = " | ".join(" ".join(f["flags"]) for f in r["suggestions"]) or "none: " + "; ".join(
      s["checked"])
  print(f"| {os.path.basename(path)[:-5]} | {need / r['hbm_bytes_per_device']:.1f}x | {told} "
        f"| {len(s['tried'])} | {sum(t['seconds'] for t in s['tried']):.0f} | "
        f"{r['plan_seconds']:.0f} | {r['plan_seconds'] / compiles:.2f}x |")
PY
