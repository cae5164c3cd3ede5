"""Input: where examples come from (sources), how they are preprocessed, and the
pipeline that turns them into global device batches."""

# How config.dataset names a VTAB-1k task ('vtab/<task>', vit_jax.data.sources.vtab_tasks). Here,
# not in vtab_tasks.py, so that the config defaults tell a task without importing TensorFlow.
VTAB_PREFIX = "vtab/"
# The VTAB-1k split names that make an image directory a VTAB task (sources/vtab_1k.py).
VTAB_SELECTIONS = frozenset({"train800", "val200", "train800val200"})
