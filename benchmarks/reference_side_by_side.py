"""Our benchmark next to the reference implementation, same machine, same shapes.

  git clone https://github.com/google-research/vision_transformer /tmp/reference
  python benchmarks/reference_side_by_side.py --reference_repo=/tmp/reference

The reference (google-research/vision_transformer) is imported from its clone and
driven the way its train.py drives it: pmap over the local devices, float32, loss on
one-hot labels, optax clip + SGD momentum with a bfloat16 accumulator. Ours is
`vit_jax.planning.step_timing.run` with the configs' defaults. Each side runs in its own
subprocess (both packages are called `vit_jax`); the sides alternate for --repeats
rounds and each keeps its best round (median step time after compilation), which
filters out the noise of shared machines. Prints a table and the speed-up.
"""

import argparse
import json
import os
import subprocess
import sys

CASES = [("ViT-Ti_16", "train", 8), ("ViT-B_16", "infer", 8), ("ViT-B_16", "train", 8)]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reference_worker(spec: dict) -> dict:
  """Times the reference model (its clone first on sys.path) like its train.py runs it."""
  import statistics
  import time

  import jax
  import jax.numpy as jnp
  import ml_collections
  import optax
  from vit_jax import models_vit  # the reference's package, from the clone

  arch = spec["architecture"]
  model = models_vit.VisionTransformer(
      num_classes=1000, patches=ml_collections.ConfigDict({"size": (arch["patch_size"],) * 2}),
      hidden_size=arch["hidden_size"], classifier="token",
      transformer={"num_layers": arch["num_layers"], "mlp_dim": arch["mlp_dim"],
                   "num_heads": arch["num_heads"], "dropout_rate": 0.0,
                   "attention_dropout_rate": 0.0})
  devices = jax.local_devices()
  per_device = spec["batch"] // len(devices)
  side = spec["image_size"]
  images = jnp.zeros((len(devices), per_device, side, side, 3), jnp.float32)
  params = jax.jit(lambda r: model.init(r, images[0, :1], train=False)["params"])(
      jax.random.PRNGKey(0))
  replicate = lambda tree: jax.tree.map(  # a leading device axis, as pmap wants
      lambda x: jnp.broadcast_to(x, (len(devices), *x.shape)), tree)

  if spec["mode"] == "infer":
    fn = jax.pmap(lambda p, x: model.apply({"params": p}, x, train=False))
    args = (replicate(params), images)
  else:
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.sgd(0.01, momentum=0.9, accumulator_dtype=jnp.bfloat16))
    labels = jax.nn.one_hot(jnp.zeros(images.shape[:2], jnp.int32), 1000)

    def update(params, opt_state, x, y):
      def loss_fn(p):
        logits = model.apply({"params": p}, x, train=True)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=1))
      loss, grads = jax.value_and_grad(loss_fn)(params)
      grads = jax.lax.pmean(grads, "batch")
      updates, opt_state = tx.update(grads, opt_state)
      return optax.apply_updates(params, updates), opt_state, jax.lax.pmean(loss, "batch")

    fn = jax.pmap(update, axis_name="batch", donate_argnums=(0, 1))
    args = (replicate(params), replicate(tx.init(params)), images, labels)

  times = []
  for _ in range(spec["steps"] + 1):  # pmap compiles on the first call
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
    if spec["mode"] == "train":  # params and optimizer state were donated
      args = (out[0], out[1], *args[2:])
  step_s = statistics.median(times[1:])
  return {"compile_s": times[0] - step_s, "step_s_median": step_s,
          "img_per_sec": spec["batch"] / step_s}


def ours_worker(spec: dict) -> dict:
  from vit_jax.planning import step_timing
  result = step_timing.run(spec["model"], spec["mode"], spec["batch"], spec["image_size"],
                           "float32", spec["steps"], peak_flops=1.0)
  return {k: result[k] for k in ("compile_s", "step_s_median", "img_per_sec")}


def run_side(side: str, spec: dict, reference_repo: str) -> dict:
  """One measurement in a fresh interpreter whose `vit_jax` is that side's package."""
  path = reference_repo if side == "reference" else REPO
  env = {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "3"}
  out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_worker", side,
                        "--_spec", json.dumps(spec)], env=env, cwd=path, capture_output=True,
                       text=True, check=False)
  if out.returncode:
    raise SystemExit(f"error: the {side} run failed: {out.stderr.strip().splitlines()[-1]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--reference_repo", default=os.environ.get("VIT_REFERENCE_REPO"),
                      help="a clone of github.com/google-research/vision_transformer")
  parser.add_argument("--image_size", type=int, default=224)
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--repeats", type=int, default=3, help="alternating rounds per side")
  parser.add_argument("--_worker", choices=("reference", "ours"), help=argparse.SUPPRESS)
  parser.add_argument("--_spec", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args._worker:  # pylint: disable=protected-access
    spec = json.loads(args._spec)  # pylint: disable=protected-access
    worker = reference_worker if args._worker == "reference" else ours_worker
    print(json.dumps(worker(spec)))
    return
  if not args.reference_repo or not os.path.isfile(
      os.path.join(args.reference_repo, "vit_jax", "models_vit.py")):
    raise SystemExit("error: --reference_repo must be a clone of "
                     "https://github.com/google-research/vision_transformer (git clone it)")

  sys.path.insert(0, REPO)
  from vit_jax.models import family_registry
  print(f"{'model':<10} {'mode':<5} {'batch':>5} {'reference img/s':>16} {'ours img/s':>11} "
        f"{'speed-up':>8}")
  for model, mode, batch in CASES:
    spec = {"model": model, "mode": mode, "batch": batch, "image_size": args.image_size,
            "steps": args.steps, "architecture": family_registry.architecture(model).as_kwargs()}
    best = {"reference": 0.0, "ours": 0.0}
    for _ in range(args.repeats):
      for side in best:
        best[side] = max(best[side], run_side(side, spec, args.reference_repo)["img_per_sec"])
    print(f"{model:<10} {mode:<5} {batch:>5} {best['reference']:>16.2f} {best['ours']:>11.2f} "
          f"{best['ours'] / best['reference']:>7.2f}x", flush=True)


if __name__ == "__main__":
  main()
