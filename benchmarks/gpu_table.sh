#!/usr/bin/env bash
# Re-measures the GPU table of benchmarks/RESULTS.md on one GPU (9 minutes on an H100
# before the two batch-128 L/16 rows, which may take up to 9 more): attention backends for
# ViT-B/16 training, the largest B/16 batches, inference padded and unpadded, and ViT-L/16
# at 384 px. Each row is its own process, so one that runs out of memory
# or time does not stop the rest. Appends JSON rows to ${1:-gpu_table.jsonl}.
#   bash benchmarks/gpu_table.sh results.jsonl
set -u
OUT_FILE="${1:-gpu_table.jsonl}"
PEAK="${PEAK_TFLOPS:-699}"  # H100 SXM, bf16 8192^3 matmul on random data, 2026-11-23
run() {
  timeout "${ROW_TIMEOUT:-240}" python -m vit_jax.benchmark --dtype=bfloat16 --steps=20 \
      --peak_tflops="$PEAK" --json="$OUT_FILE" "$@" | grep -E "^ViT|out of memory" \
      || echo "failed or timed out: $*"
}
run --model=ViT-B_16 --mode=train --batch=256 --attention=xla
run --model=ViT-B_16 --mode=train --batch=256
run --model=ViT-B_16 --mode=train --batch=512
run --model=ViT-B_16 --mode=infer --batch=1024 --padded_inference
run --model=ViT-B_16 --mode=infer --batch=1024
run --model=ViT-B_16 --mode=infer --batch=2048
run --model=ViT-L_16 --mode=train --image-size=384 --batch=64 --steps=8
# Larger L/16 batches need remat to fit; their compiles take minutes.
ROW_TIMEOUT=540 run --model=ViT-L_16 --mode=train --image-size=384 --batch=128 --steps=8 \
    --remat=dots_no_batch
ROW_TIMEOUT=540 run --model=ViT-L_16 --mode=train --image-size=384 --batch=128 --steps=8 \
    --remat=dots --scan
