"""The tf loader in an install without TensorFlow: one line naming the fix (install it,
or --config.loader=grain), from the command's first use of TensorFlow and from the
loader itself; not a ModuleNotFoundError traceback."""

import sys

import pytest

import vit_jax.data.tf_stack
from helpers import make_config
from vit_jax.base import cli, errors
from vit_jax.data import loaders

SAYS = (r"^TensorFlow is not installed, and tf.data \(config.loader='tf', the default\) reads "
        r"data with it: pip install tensorflow, or read the data with Grain: "
        r"--config.loader=grain$")


@pytest.fixture
def without_tensorflow(monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow: not installed
  monkeypatch.delitem(sys.modules, "vit_jax.data.tf_stack.tf_pipeline", raising=False)
  monkeypatch.delattr(vit_jax.data.tf_stack, "tf_pipeline", raising=False)


def test_a_command_on_the_tf_loader_says_what_to_do(without_tensorflow):
  with pytest.raises(errors.InvalidInput, match=SAYS):
    cli.keep_tensorflow_off_accelerators()


def test_the_tf_loader_says_what_to_do(without_tensorflow):
  with pytest.raises(errors.InvalidInput, match=SAYS):
    loaders.open_dataset(make_config())
