"""Trains a vit_jax model the Flax NNX way on the embedded digits (scikit-learn's 1,497 train
/ 300 test 8x8 images, no download): an nnx.Module from vit_jax.nnx, nnx.Optimizer with
optax, nnx.jit, the parameters placed over a device mesh by the main job's sharding rules
as NNX annotations (vit_jax.nnx.shard), and the result saved in the released layout, which
python -m vit_jax.predict / export / convert read (docs/python_api.md, "From Flax NNX").

  python examples/nnx_digits.py                        # the demo's 4-block ViT from scratch
  python examples/nnx_digits.py --init=params.npz      # fine-tune a file (new 10-way head)
  XLA_FLAGS=--xla_force_host_platform_device_count=8 \\
    python examples/nnx_digits.py --mesh=data:4,tensor:2 --out=/tmp/nnx_digits.npz

The defaults are configs/demo.py's: 16 px crops of the digits resized to 18, AdamW at 1e-3
(100 warm-up steps, cosine decay), weight decay 1e-4, batch 128, 1,000 steps.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from vit_jax import nnx as vit_nnx
from vit_jax.data.sources import digits

DEMO_MODEL = dict(patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4, num_layers=4)
SIDE, RESIZED = 16, 18


def digit_images():
  """(train images, train labels, test images, test labels): RESIZED-px images in [-1, 1]."""
  train, test, _ = digits.digits_source()
  def resize(split):
    pixels = jnp.asarray(split.data, jnp.float32) / 127.5 - 1
    return np.asarray(jax.image.resize(pixels, (len(pixels), RESIZED, RESIZED, 3), "bilinear"))
  return resize(train), train.labels, resize(test), test.labels


def random_crops(images, rng):
  """A random SIDE x SIDE crop of each image (the demo's training crop)."""
  top, left = rng.integers(0, RESIZED - SIDE + 1, (2, len(images)))
  rows = top[:, None] + np.arange(SIDE)
  cols = left[:, None] + np.arange(SIDE)
  return images[np.arange(len(images))[:, None, None], rows[:, :, None], cols[:, None, :]]


def parse_mesh(text):
  """'data:4,tensor:2' -> {'data': 4, 'tensor': 2}."""
  return {axis: int(size) for axis, size in (part.split(":") for part in text.split(","))}


def loss_fn(model, images, labels):
  logits = model(images, train=True)
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@nnx.jit
def train_step(model, optimizer, images, labels):
  loss, grads = nnx.value_and_grad(loss_fn)(model, images, labels)
  optimizer.update(model, grads)
  return loss


@nnx.jit
def predictions(model, images):
  return model(images, train=False).argmax(-1)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--init", help="a released file or params.npz to fine-tune "
                      "(default: the demo's model from scratch)")
  parser.add_argument("--mesh", default="data:-1", help="mesh axes data, fsdp, tensor")
  parser.add_argument("--steps", type=int, default=1000)
  parser.add_argument("--batch", type=int, default=128)
  parser.add_argument("--lr", type=float, default=1e-3)
  parser.add_argument("--warmup", type=int, default=100)
  parser.add_argument("--out", help="where to save the trained model (.npz)")
  args = parser.parse_args()

  if args.init:
    model = vit_nnx.load_npz(args.init, image_size=SIDE, num_classes=10)
  else:
    model = vit_nnx.create_model("ViT-Ti_16", num_classes=10, image_size=SIDE, **DEMO_MODEL)
  mesh = vit_nnx.make_mesh(parse_mesh(args.mesh))
  vit_nnx.shard(model, mesh)  # every nnx.Param annotated (out_sharding) and placed
  specs = nnx.to_flat_state(nnx.get_partition_spec(nnx.state(model, nnx.Param)))
  split = [("/".join(map(str, path)), spec.get_value()) for path, spec in specs
           if any(spec.get_value())]
  print(f"mesh {dict(mesh.shape)}: {len(split)} of {len(specs)} parameters split"
        + "".join(f"\n  {name}: {spec}" for name, spec in split[:2]), flush=True)

  schedule = optax.warmup_cosine_decay_schedule(0.0, args.lr, min(args.warmup, args.steps // 2),
                                                args.steps)
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(schedule, weight_decay=1e-4,
                               mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p)))
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)  # its state sharded as the params

  batch_sharding = jax.NamedSharding(mesh, jax.P(("data", "fsdp")))
  train_x, train_y, test_x, test_y = digit_images()
  rng = np.random.default_rng(0)
  first = None
  for step in range(1, args.steps + 1):
    index = rng.choice(len(train_x), args.batch, replace=False)
    batch = jax.device_put((random_crops(train_x[index], rng), train_y[index]), batch_sharding)
    loss = float(train_step(model, optimizer, *batch))
    first = loss if first is None else first
    if step % 100 == 0 or step == args.steps:
      print(f"step {step}: loss {loss:.4f}", flush=True)

  # The test split, center crops, padded to split evenly over the batch axes.
  center = test_x[:, 1:1 + SIDE, 1:1 + SIDE]
  parallel = mesh.shape["data"] * mesh.shape["fsdp"]
  padded = np.concatenate([center, center[:-len(center) % parallel]])
  guesses = np.asarray(predictions(model, jax.device_put(padded, batch_sharding)))
  correct = int((guesses[:len(test_y)] == test_y).sum())
  print(f"first loss {first:.4f}, last loss {loss:.4f}; test accuracy "
        f"{correct / len(test_y):.4f} ({correct}/{len(test_y)})")
  if args.out:
    vit_nnx.save_npz(model, args.out, class_names=list(digits.DIGITS_CLASSES))
    print(f"saved {args.out}: python -m vit_jax.predict --checkpoint={args.out} IMAGE")


if __name__ == "__main__":
  main()
