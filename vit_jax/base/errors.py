"""The one rule for errors a user can fix, shared by the library and the commands.

Library code raises a `UserError` (usually `InvalidInput`, which is also a ValueError) for a
mistake in the user's input, config, files or environment, with a message that names the
problem and the fix. Commands (vit_jax.base.cli) print those, and OSErrors, as one `error:` line.
Every other exception is a bug in vit_jax or a library and keeps its traceback.
"""


class UserError(Exception):
  """A mistake the user can fix; its message is shown as one line, without a traceback."""


class InvalidInput(UserError, ValueError):
  """A value from the user (config key, flag, file content) that cannot work."""


class Diverged(UserError, FloatingPointError):
  """Training produced NaN/Inf: the run stops before saving; the message names the step,
  the config key to change and the last good checkpoint, which a rerun resumes from."""
