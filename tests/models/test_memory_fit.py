"""memory_fit: the largest batch of a compiled program within the free memory, a hopeless
size refused without compiling, one item too large refused in one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models import memory_fit


def _outer(batch):  # [batch, 256] -> [batch, 256, 256] float32: 256 KiB out per row
  return jax.jit(lambda x: x[:, :, None] * x[:, None, :]).lower(
      jax.ShapeDtypeStruct((batch, 256), jnp.float32)).compile()


def test_the_batch_shrinks_to_what_fits():
  fitted = memory_fit.largest_batch(_outer, 32, lambda b: 0, have=5 * 2**18)
  assert 1 <= fitted.batch <= 4
  assert memory_fit.program_bytes(fitted.compiled) <= 5 * 2**18
  out = fitted.compiled(np.ones((fitted.batch, 256), np.float32))
  assert out.shape == (fitted.batch, 256, 256)
  assert memory_fit.largest_batch(_outer, 3, lambda b: 0, have=2**30).batch == 3


def test_one_item_too_large_is_one_line_without_compiling():
  def never(batch):
    raise AssertionError(f"compiled at {batch}")
  with pytest.raises(memory_fit.DoesNotFit, match="one image needs 4.0 GiB") as e:
    memory_fit.largest_batch(never, 8, lambda b: b * 2**32, have=2**30, what="one image")
  assert "\n" not in str(e.value) and e.value.need == 2**32
  assert memory_fit.available_bytes() > 0
