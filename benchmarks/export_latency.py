"""CPU latency of each serving runtime of vit_jax.export, against the Flax model itself.

  python benchmarks/export_latency.py                        # ViT-B/16, 224 px, batch 1 and 32
  python benchmarks/export_latency.py --checkpoint=params.npz --batches=1,8 --repeats=20

Exports the checkpoint (default: random weights of --model, 1000 classes: latency does not
depend on the values) to every format with python's vit_jax.export.export (so each export
is also verified), reloads it in its runtime (jax for StableHLO, TensorFlow for the
SavedModel, LiteRT for TFLite, onnxruntime for ONNX) and times one forward pass per batch
size: the median of up to --repeats calls (fewer where they would exceed --budget_s)
after one warm-up, inputs already in memory. TFLite's
batch is fixed, so it is exported once per batch size. Prints a markdown table (and, with
--json, writes the numbers). Every runtime may use all the machine's cores.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Tuple

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from vit_jax import create_model, export  # noqa: E402
from vit_jax.checkpoints import npz  # noqa: E402


def random_checkpoint(model: str, image_size: int, path: str) -> str:
  import jax
  module = create_model(model, num_classes=1000)
  init = jax.jit(lambda key: module.init(key, np.zeros((1, image_size, image_size, 3),
                                                       np.float32)))
  params = jax.device_get(init(jax.random.PRNGKey(0))["params"])
  params = jax.tree.map(lambda p: p + np.float32(0.02) * np.random.default_rng(0).standard_normal(
      p.shape, np.float32), params)  # non-zero head
  npz.save_npz(params, path)
  return path


def time_calls(call, images, repeats: int, budget_s: float) -> Tuple[float, int]:
  """(median seconds of call(images), calls timed), after one warm-up call (compilation):
  up to `repeats` calls, fewer (at least one) where they would take over budget_s."""
  start = time.perf_counter()
  call(images)
  seconds = [time.perf_counter() - start]  # an upper bound, replaced by the timed calls
  timed = []
  while len(timed) < repeats and (not timed or sum(timed) + timed[-1] <= budget_s):
    start = time.perf_counter()
    call(images)
    timed.append(time.perf_counter() - start)
  return statistics.median(timed or seconds), len(timed)


def runner(fmt: str, out: str):
  """images -> logits in the format's own runtime."""
  if fmt == "flax":
    import jax
    module, params = npz.load_npz(out)
    apply = jax.jit(lambda x: module.apply({"params": params}, x))
    return lambda x: np.asarray(apply(x))
  if fmt == "stablehlo":
    import jax
    from vit_jax.export import stablehlo
    call = jax.jit(stablehlo.load(out).call)
    return lambda x: np.asarray(call(x))
  if fmt == "saved_model":
    import tensorflow as tf
    serve = tf.saved_model.load(f"{out}/saved_model").signatures["serving_default"]
    return lambda x: serve(images=tf.constant(x))["logits"].numpy()
  if fmt == "tflite":
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=f"{out}/model.tflite", num_threads=os.cpu_count())
    run = interpreter.get_signature_runner()
    return lambda x: run(images=x)["logits"]
  from vit_jax.export import onnx_model
  session = onnx_model.session(out)
  return lambda x: session.run(["logits"], {"images": x})[0]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="ViT-B_16")
  parser.add_argument("--checkpoint", help="default: random weights of --model")
  parser.add_argument("--image_size", type=int, default=224)
  parser.add_argument("--batches", default="1,32")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--budget_s", type=float, default=30,
                      help="timed calls stop once they would exceed this (at least one)")
  parser.add_argument("--formats", default="flax,stablehlo,saved_model,tflite,onnx")
  parser.add_argument("--json", help="write the rows to this file")
  args = parser.parse_args()
  batches = [int(b) for b in args.batches.split(",")]
  work = tempfile.mkdtemp(prefix="export_latency-")
  checkpoint = args.checkpoint or random_checkpoint(args.model, args.image_size,
                                                    os.path.join(work, "params.npz"))
  rng = np.random.default_rng(0)
  rows = []
  for fmt in args.formats.split(","):
    for batch in batches:
      if fmt == "flax":
        out, difference = checkpoint, 0.0
      elif fmt == "tflite" or batch == batches[0]:
        out = os.path.join(work, f"{fmt}-{batch}")
        result = export.export(checkpoint, out, to=fmt, image_size=args.image_size,
                               batch=batch if fmt == "tflite" else "dynamic",
                               log=lambda _: None)
        difference = result.max_relative_difference
        print(result.summary(), file=sys.stderr, flush=True)
      call = runner(fmt, out)
      images = rng.uniform(-1, 1, (batch, args.image_size, args.image_size, 3)
                           ).astype(np.float32)
      seconds, calls = time_calls(call, images, args.repeats, args.budget_s)
      rows.append(dict(format=fmt, batch=batch, ms=seconds * 1e3, img_per_s=batch / seconds,
                       calls=calls, max_relative_difference=difference))
      print(f"{fmt} batch {batch}: {seconds * 1e3:.1f} ms", file=sys.stderr, flush=True)
  machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
  print(f"\n{args.model} at {args.image_size} px, {machine}\n")
  print("| runtime | batch | latency (ms, median) | calls | images/s | export's max rel. diff. |")
  print("|---|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['format']} | {r['batch']} | {r['ms']:.0f} | {r['calls']} | "
          f"{r['img_per_s']:.1f} | {r['max_relative_difference']:.1e} |")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(dict(model=args.model, machine=machine, rows=rows), f, indent=2)


if __name__ == "__main__":
  main()
