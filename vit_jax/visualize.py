"""Draws what a ViT learned: python -m vit_jax.visualize --checkpoint=CHECKPOINT --out=DIR IMAGE ...

CHECKPOINT is a path, a URL, FAMILY/NAME or a released name (as for vit_jax.predict);
images are preprocessed like evaluation. Writes four PNGs into DIR, after the paper's
Figs. 6, 7 and 14: attention_rollout.png, embedding_filters.png,
position_similarity.png and attention_distance.png (computations: vit_jax.families.vit.introspect).
"""

import io
import os
from typing import List, Sequence

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt
import numpy as np
from absl import flags

from vit_jax.base import cli, no_clobber, storage
from vit_jax.checkpoints import hub, npz
from vit_jax.data import image_files
from vit_jax.families.vit import introspect
from vit_jax.families.vit import model as vit
from vit_jax.models import family_registry
from vit_jax.models import posemb as posemb_lib

FLAGS = flags.FLAGS
KIND = "visualize"  # the writer's name in --out's no-clobber marker (vit_jax.base.no_clobber)
NUM_COMPONENTS = 28  # as in the paper's Fig. 7 (left)
DPI = 100


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """The command's flags; defined on demand so that importing this module defines none."""
  flags.DEFINE_string("checkpoint", None, hub.CHECKPOINT_HELP,
                      flag_values=flag_values)
  flags.DEFINE_string("out", None, "Folder for the PNG figures (created if missing).",
                      flag_values=flag_values)
  flags.DEFINE(cli.ImageSizeParser(), "image_size", None,
               cli.image_size_help(npz.IMAGE_SIZE_HELP), flag_values=flag_values)
  flags.DEFINE_boolean("allow_nonfinite", False, npz.ALLOW_NONFINITE_HELP,
                       flag_values=flag_values)
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP, flag_values=flag_values)
  for name in ("checkpoint", "out"):
    flags.mark_flag_as_required(name, flag_values=flag_values)


def mosaic(tiles: np.ndarray, columns: int) -> np.ndarray:
  """[n, h, w, ...] tiles in one array, one-pixel NaN gaps: one imshow instead of n axes."""
  n, h, w = tiles.shape[:3]
  rows = -(-n // columns)
  canvas = np.full((rows * (h + 1) - 1, columns * (w + 1) - 1, *tiles.shape[3:]), np.nan)
  for i, tile in enumerate(tiles):
    top, left = (i // columns) * (h + 1), (i % columns) * (w + 1)
    canvas[top:top + h, left:left + w] = tile
  return canvas


def _save(fig, path: str) -> str:
  """Renders the PNG in memory and writes it whole (a local folder or gs://)."""
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
  plt.close(fig)
  storage.write_atomic(path, buffer.getvalue())
  return path


def rollout_figure(images: np.ndarray, maps: np.ndarray, names: Sequence[str], stride: int):
  """One row per image: the input, then the rollout map over it (Figs. 6 and 14).

  Both are drawn in pixel-edge coordinates (pixel i spans [i, i + 1]; token j spans
  [j * stride, (j + 1) * stride]) so that the heat map covers exactly the pixels the
  tokens saw: imshow's default pixel-centre extent would leave a half-pixel strip.
  """
  fig, axes = plt.subplots(len(images), 2, figsize=(5, 2.5 * len(images)), squeeze=False)
  extent = (0, maps.shape[2] * stride, maps.shape[1] * stride, 0)  # token grid in pixels
  for (left, right), image, attention, name in zip(axes, images, maps, names):
    pixels = (image + 1) / 2
    image_extent = (0, image.shape[1], image.shape[0], 0)
    left.imshow(pixels, extent=image_extent)
    left.set_title(name, fontsize=9)
    right.imshow(pixels, extent=image_extent)
    right.imshow(attention, cmap="inferno", alpha=0.6, extent=extent, interpolation="bilinear")
    right.set_title("attention rollout", fontsize=9)
    for ax in (left, right):
      ax.set_xlim(0, image.shape[1])
      ax.set_ylim(image.shape[0], 0)
      ax.axis("off")
  return fig


def plot_rollout(images: np.ndarray, maps: np.ndarray, names: Sequence[str], stride: int,
                 path: str) -> str:
  return _save(rollout_figure(images, maps, names, stride), path)


def plot_filters(components: np.ndarray, explained: np.ndarray, what: str, path: str) -> str:
  """The filters' principal components as RGB tiles, each scaled to [0, 1] (Fig. 7 left)."""
  tiles = introspect.unit_range(components, axes=(1, 2, 3))
  fig, ax = plt.subplots(figsize=(7, 4.5))
  ax.imshow(np.nan_to_num(mosaic(tiles, columns=7), nan=1.0), interpolation="nearest")
  ax.set_title(f"{what}\ntop {len(tiles)} principal components, largest first "
               f"({100 * explained.sum():.0f}% of the variance)", fontsize=10)
  ax.axis("off")
  return _save(fig, path)


def plot_position_similarity(similarity: np.ndarray, path: str) -> str:
  """Each patch's cosine similarity with all others, laid out on the grid (Fig. 7 centre)."""
  gh, gw = similarity.shape[:2]
  tiles = similarity.reshape(gh * gw, gh, gw)
  fig, ax = plt.subplots(figsize=(6.5, 6))
  shown = ax.imshow(mosaic(tiles, columns=gw), cmap="viridis", vmin=-1, vmax=1,
                    interpolation="nearest")
  fig.colorbar(shown, ax=ax, fraction=0.046, label="cosine similarity")
  ax.set_title("Position embedding similarity")
  ax.set_xticks([(gw + 1) * c + gw / 2 - 0.5 for c in range(gw)], range(1, gw + 1))
  ax.set_yticks([(gh + 1) * r + gh / 2 - 0.5 for r in range(gh)], range(1, gh + 1))
  ax.set_xlabel("input patch column")
  ax.set_ylabel("input patch row")
  ax.tick_params(labelsize=6, length=0)
  return _save(fig, path)


def plot_attention_distance(distance: np.ndarray, path: str) -> str:
  """Mean attention distance of every head against depth (Fig. 7 right)."""
  layers, heads = distance.shape
  fig, ax = plt.subplots(figsize=(5, 4))
  for head in range(heads):
    ax.scatter(np.arange(1, layers + 1), distance[:, head], s=12, label=f"head {head + 1}")
  ax.set_xlabel("network depth (layer)")
  ax.set_ylabel("mean attention distance (pixels)")
  ax.set_title("Mean attention distance per head")
  ax.set_xticks(range(1, layers + 1))
  ax.set_ylim(0, 1.1 * distance.max() or 1)
  if heads <= 16:
    ax.legend(fontsize=6, ncol=2, loc="lower right")
  return _save(fig, path)


def write_figures(module: vit.VisionTransformer, params, images: np.ndarray,
                  names: Sequence[str], out_dir: str) -> List[str]:
  """The four figures for `images` ([B, S, S, 3] in [-1, 1]) into out_dir; their paths."""
  storage.makedirs(out_dir)
  has_cls = introspect.has_class_token(module)
  side = (family_registry.token_grid(module, images.shape[1]),
          family_registry.token_grid(module, images.shape[2]))
  stride = family_registry.stride(module)
  weights = introspect.attention_weights(module, params, images)
  maps = introspect.rollout_maps(introspect.attention_rollout(weights), side, has_cls)
  kernel, what = introspect.rgb_filters(module, params)
  components, explained = introspect.filter_pca(kernel, NUM_COMPONENTS)
  posemb = (posemb_lib.resize_posemb(params["Transformer"]["posembed_input"]["pos_embedding"],
                                     side, has_cls)  # at the input's grid, as the model does
            if module.posemb == "learn"
            else posemb_lib.sincos_2d_with_cls(side, module.hidden_size, has_cls))
  path = lambda name: storage.join(out_dir, name)
  return [
      plot_rollout(images, maps, names, stride, path("attention_rollout.png")),
      plot_filters(components, explained, what, path("embedding_filters.png")),
      plot_position_similarity(introspect.position_similarity(posemb, side, has_cls),
                               path("position_similarity.png")),
      plot_attention_distance(introspect.mean_attention_distance(weights, side, stride, has_cls),
                              path("attention_distance.png")),
  ]


@cli.command
def main(argv):
  image_paths = image_files.image_arguments(argv)
  no_clobber.check_output_dir(FLAGS.out, KIND, FLAGS.overwrite)  # before the slow part
  module, params, image_size = hub.load_for_inference(
      FLAGS.checkpoint, FLAGS.image_size, allow_nonfinite=FLAGS.allow_nonfinite)
  family_registry.for_module(module).refuse("visualize", FLAGS.checkpoint)
  images = np.stack([image_files.load_image(p, image_size) for p in image_paths])
  names = [os.path.basename(p) for p in image_paths]
  no_clobber.claim_output_dir(FLAGS.out, KIND, FLAGS.overwrite)
  written = write_figures(module, params, images, names, FLAGS.out)
  for path in written:
    print(path)


if __name__ == "__main__":
  cli.run(main, define_flags)
