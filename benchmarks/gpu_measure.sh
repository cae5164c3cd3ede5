#!/usr/bin/env bash
# The GPU measurements of issue 44 in two parts, each one process per row (a row that runs
# out of memory or time does not stop the rest); JSON rows and logs go to ${OUT:-.}.
#   bash benchmarks/gpu_measure.sh steps   # bare steps: bf16 vs FP8, inference, L/16 @384
#   bash benchmarks/gpu_measure.sh job     # the main job on JPEGs (Grain), its memory, FP8
#                                          # against bf16 on the digits
# `steps` also starts writing the JPEG folder that `job` reads (/tmp/jpegs).
set -u
OUT="${OUT:-.}"
PART="${1:-steps}"
ROWS="$OUT/gpu_rows.jsonl"
bench() {  # one vit_jax.benchmark row
  timeout "${ROW_TIMEOUT:-150}" python -m vit_jax.benchmark --dtype=bfloat16 --json="$ROWS" \
      "$@" 2>&1 | grep -E "^ViT|out of memory|Error" || echo "failed or timed out: $*"
}
if [ "$PART" = steps ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
  python -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
  python benchmarks/make_jpegs.py /tmp/jpegs > "$OUT/jpegs.log" 2>&1 &
  PEAK=$(python -c "import jax.numpy as jnp; from vit_jax.planning import step_timing
print(f'{step_timing.measure_peak_flops(jnp.bfloat16) / 1e12:.0f}')")
  echo "bf16 8192^3 matmul: $PEAK TFLOP/s"
  export PEAK
  python - <<'PY'  # which GEMMs the FP8 train step compiles to
import re, jax, jax.numpy as jnp, vit_jax
model = vit_jax.create_model("ViT-B_16", num_classes=1000, dtype=jnp.bfloat16, fp8=True)
x = jnp.zeros((16, 224, 224, 3), jnp.bfloat16)
params = jax.jit(model.init)(jax.random.PRNGKey(0), x)
grad = jax.jit(jax.grad(lambda p: model.apply(p, x, train=True).sum()))
text = grad.lower(params).compile().as_text()
calls = re.findall(r'custom_call_target="([^"]*(?:cublas|gemm|matmul)[^"]*)"', text)
print("train-step GEMM custom calls:", {c: calls.count(c) for c in set(calls)})
PY
  for batch in 256 512; do
    bench --model=ViT-B_16 --mode=train --batch=$batch --steps=20 --peak_tflops="$PEAK"
    bench --model=ViT-B_16 --mode=train --batch=$batch --steps=20 --peak_tflops="$PEAK" --fp8
  done
  bench --model=ViT-B_16 --mode=infer --batch=1024 --steps=20 --peak_tflops="$PEAK"
  bench --model=ViT-B_16 --mode=infer --batch=1024 --steps=20 --peak_tflops="$PEAK" --fp8
  ROW_TIMEOUT=200 bench --model=ViT-L_16 --mode=train --image-size=384 --batch=128 --steps=8 \
      --remat=dots --scan --peak_tflops="$PEAK"
  wait
  ls /tmp/jpegs/train | head -2; du -sh /tmp/jpegs
fi
if [ "$PART" = job ]; then
  PEAK="${PEAK:-790}"
  B16="--config=configs/vit_b16.py:/tmp/jpegs --config.pretrained=None --config.pp.crop=224
       --config.dtype=bfloat16 --config.accum_steps=1"
  # The main job through the Grain pipeline on this host's cores, with the device's peak.
  # shellcheck disable=SC2086
  timeout 200 python benchmarks/peak_memory.py vit_jax.main $B16 --config.loader=grain \
      --config.grain_workers=14 --config.total_steps=120 --config.warmup_steps=20 \
      --config.progress_every=20 --config.eval_every=120 --workdir=/tmp/vit_gpu 2>&1 \
      | grep -vE "^\s*$" | tail -14
  # shellcheck disable=SC2086
  bench $B16 --steps=20 --peak_tflops="$PEAK"
  # shellcheck disable=SC2086
  timeout 120 python -m vit_jax.plan $B16 --config.loader=grain --nosuggest 2>&1 | tail -12
  for fp8 in False True; do  # the same short run from scratch in bf16, with and without FP8
    timeout 120 python -m vit_jax.main --config=configs/demo.py --config.loader=grain \
        --config.dtype=bfloat16 --config.model.fp8=$fp8 --workdir="/tmp/demo_fp8_$fp8" 2>&1 \
        | grep -E "step .*/|eval|done" | tail -12
    cp "/tmp/demo_fp8_$fp8/metrics.jsonl" "$OUT/demo_fp8_$fp8.jsonl" 2>/dev/null
  done
fi
