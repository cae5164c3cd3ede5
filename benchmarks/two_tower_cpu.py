"""CPU throughput of a SigLIP B/16-224-shaped two-tower model's image and text towers
(random weights; the computation does not depend on the values): issue 49.

  python benchmarks/two_tower_cpu.py [--runs=3]

Prints, per tower: batch, wall seconds per batch, items per second and process CPU seconds
per item (all threads: the fair number on a shared machine)."""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.families.two_tower import text_tower
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.vit import model as vit


def siglip_b16(vocab=32_000, text_length=64):
  img = vit.VisionTransformer(num_classes=0, patch_size=16, hidden_size=768, mlp_dim=3072,
                              num_heads=12, num_layers=12, classifier="map")
  txt = text_tower.TextTransformer(768, 768, 12, 3072, 12, vocab_size=vocab, max_len=text_length)
  return two_tower.TwoTower(img, txt, bias_init=-10.0, temperature_init=10.0)


def measure(fn, params, batch, runs):
  jax.block_until_ready(fn(params, batch))  # compile
  wall, cpu = time.perf_counter(), time.process_time()
  for _ in range(runs):
    jax.block_until_ready(fn(params, batch))
  return (time.perf_counter() - wall) / runs, (time.process_time() - cpu) / runs


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--runs", type=int, default=3)
  parser.add_argument("--image_batch", type=int, default=8)
  parser.add_argument("--text_batch", type=int, default=64)
  args = parser.parse_args()
  model = siglip_b16()
  params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 224, 224, 3)),
                               jnp.ones((1, 64), jnp.int32))
  images = np.random.default_rng(0).uniform(-1, 1, (args.image_batch, 224, 224, 3))
  tokens = np.random.default_rng(1).integers(0, 32_000, (args.text_batch, 64))
  towers = {
      "image tower (224 px)": (jax.jit(lambda p, x: model.apply(p, x, method=model.embed_images)),
                               images.astype(np.float32)),
      "text tower (64 tokens)": (jax.jit(lambda p, x: model.apply(p, x, method=model.embed_texts)),
                                 tokens.astype(np.int32)),
  }
  print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, runs {args.runs}")
  for name, (fn, batch) in towers.items():
    wall, cpu = measure(fn, params, batch, args.runs)
    print(f"{name}: batch {len(batch)}, {wall:.2f} s/batch, {len(batch) / wall:.1f} items/s, "
          f"{cpu / len(batch):.3f} CPU-s/item")


if __name__ == "__main__":
  main()
