"""The ResNet stem of the hybrid ResNet+ViT models (BiT-style ResNet v1.5).

Parameter names (`conv_root`, `gn_root`, `block{s}/unit{u}/conv1..3`, `gn1..3`,
`conv_proj`, `gn_proj`) are the released checkpoints' names.
"""

from typing import Any, Sequence

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

WEIGHT_STD_EPS = 1e-5
GROUP_NORM_EPS = 1e-6
GROUP_NORM_GROUPS = 32


def standardize_weight(kernel: jnp.ndarray) -> jnp.ndarray:
  """Per output channel: (w - mean) / (population std + 1e-5) over (H, W, in)."""
  axes = (0, 1, 2)
  kernel = kernel - jnp.mean(kernel, axis=axes, keepdims=True)
  return kernel / (jnp.std(kernel, axis=axes, keepdims=True) + WEIGHT_STD_EPS)


class StdConv(nn.Module):
  """Bias-free SAME conv whose kernel is weight-standardised at every call.

  The stored kernel stays raw (as in the released files); standardisation is part
  of the function, so checkpoints round-trip unchanged.
  """
  features: int
  kernel_size: Sequence[int]
  strides: Sequence[int] = (1, 1)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (*self.kernel_size, x.shape[-1], self.features), jnp.float32)
    kernel = standardize_weight(kernel).astype(self.dtype)
    return lax.conv_general_dilated(
        x.astype(self.dtype), kernel, window_strides=tuple(self.strides),
        padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def group_norm(name: str, dtype: Any, zero_scale: bool = False) -> nn.GroupNorm:
  return nn.GroupNorm(
      num_groups=GROUP_NORM_GROUPS, epsilon=GROUP_NORM_EPS, dtype=dtype, name=name,
      scale_init=nn.initializers.zeros if zero_scale else nn.initializers.ones)


class BottleneckUnit(nn.Module):
  """Post-activation bottleneck: 1x1 -> 3x3 (strided) -> 1x1 (4x), GroupNorm after each."""
  features: int
  strides: Sequence[int] = (1, 1)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    out_features = self.features * 4
    residual = x
    if x.shape[-1] != out_features or tuple(self.strides) != (1, 1):
      residual = StdConv(out_features, (1, 1), self.strides, self.dtype,
                         name="conv_proj")(residual)
      residual = group_norm("gn_proj", self.dtype)(residual)

    y = StdConv(self.features, (1, 1), dtype=self.dtype, name="conv1")(x)
    y = nn.relu(group_norm("gn1", self.dtype)(y))
    y = StdConv(self.features, (3, 3), self.strides, self.dtype, name="conv2")(y)
    y = nn.relu(group_norm("gn2", self.dtype)(y))
    y = StdConv(out_features, (1, 1), dtype=self.dtype, name="conv3")(y)
    y = group_norm("gn3", self.dtype, zero_scale=True)(y)
    return nn.relu(residual + y)


class ResNetStage(nn.Module):
  """`num_units` bottleneck units; only the first one strides."""
  num_units: int
  features: int
  first_stride: Sequence[int]
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    for unit in range(self.num_units):
      strides = self.first_stride if unit == 0 else (1, 1)
      x = BottleneckUnit(self.features, strides, self.dtype, name=f"unit{unit + 1}")(x)
    return x


def apply_stem(x, stage_sizes: Sequence[int], width_factor: float, dtype: Any):
  """Root conv + max-pool, then `len(stage_sizes)` stages of bottleneck units.

  Call it inside the parent's compact method: the released files keep the stem's
  parameters (`conv_root`, `gn_root`, `block1`, ...) at the top level of the tree.
  """
  width = int(64 * width_factor)
  x = StdConv(width, (7, 7), (2, 2), dtype, name="conv_root")(x)
  x = nn.relu(group_norm("gn_root", dtype)(x))
  # window_shape by keyword: jax2onnx 0.13 replaces nn.max_pool by one that takes no other
  x = nn.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding="SAME")
  for stage, num_units in enumerate(stage_sizes):
    x = ResNetStage(num_units, width * 2**stage, (1, 1) if stage == 0 else (2, 2),
                    dtype, name=f"block{stage + 1}")(x)
  return x


def stem_stride(stage_sizes: Sequence[int]) -> int:
  """Output stride: 4 after the root, doubled by every stage after the first."""
  return 4 * 2 ** max(len(stage_sizes) - 1, 0)
