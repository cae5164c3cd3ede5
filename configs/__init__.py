"""Experiment configs: `python -m vit_jax.main --config=configs/<file>.py[:arg]`."""
