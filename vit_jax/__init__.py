"""vit_jax."""
