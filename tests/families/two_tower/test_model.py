"""Two-tower models and text towers: pooling, length limits, how scores are read
(parity with transformers: tests/families/two_tower/test_hf_layout.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.families.two_tower import text_tower
from vit_jax.families.two_tower import model as two_tower


def test_text_transformer_pools_the_last_token():
  tower = text_tower.TextTransformer(None, 16, 1, 32, 2, 30, max_len=6)
  tokens = jnp.array([[3, 4, 5, 1, 1, 1]], jnp.int32)
  params = jax.jit(tower.init)(jax.random.PRNGKey(0), tokens)
  apply = jax.jit(tower.apply)  # one program, not op by op
  changed_first = apply(params, tokens.at[0, 0].set(7))
  assert not np.allclose(apply(params, tokens), changed_first)  # attention sees all
  with pytest.raises(ValueError, match="at most 6"):
    tower.apply(params, jnp.ones((1, 7), jnp.int32))


def test_scores_lit_softmax_siglip_sigmoid():
  logits = np.array([[2.0, 0.0, -1.0]], np.float32)
  np.testing.assert_allclose(two_tower.scores(logits, "lit").sum(), 1.0, rtol=1e-6)
  np.testing.assert_allclose(two_tower.scores(logits, "siglip"), 1 / (1 + np.exp(-logits)),
                             rtol=1e-6)
  with pytest.raises(ValueError, match="family"):
    two_tower.scores(logits, "clip")
