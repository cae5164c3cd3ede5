"""Which reading a classifier file is run at, one rule for predict, export, fewshot and
config.pretrained: NaFlex at the patch budget its run recorded (config.pp.max_patches,
carried in params.npz's comment: vit_jax.checkpoints.class_names), unless the user asks
for another budget (--max_patches=N, config.pp.max_patches=N) or for square images
(SQUARE: --max_patches=0, config.pp.max_patches=0). A file that records nothing (released
checkpoints, timm / Hugging Face files, square-image runs) is read as square images
unless a budget is asked for."""

import dataclasses
from typing import Optional

from vit_jax.base import errors
from vit_jax.checkpoints import formats, npz

SQUARE = 0  # the budget that asks for square images, whatever the file records
REQUEST_HELP = ("NaFlex (MAP-pooled ViTs): read each image at its own aspect ratio in at "
                "most this many patches; default: the budget the file was trained at "
                "(params.npz records it), else square images; 0: square images.")


@dataclasses.dataclass(frozen=True)
class Reading:
  """The budget a file is run at (None: square images) and the one it records."""
  max_patches: Optional[int]
  recorded: Optional[int]

  def describe(self, square: str = "square images") -> str:
    """One phrase for the tools' output: 'NaFlex, 256 patches, from the file', ...;
    square: how the tool names its square reading (e.g. 'square images, 224x224 px')."""
    if self.max_patches is None:
      return square + (f" (asked for; the file records NaFlex at {self.recorded} patches)"
                       if self.recorded else "")
    if self.max_patches == self.recorded:
      return f"NaFlex, {self.max_patches} patches, from the file"
    return f"NaFlex, {self.max_patches} patches, as asked" + (
        f" (the file records {self.recorded})" if self.recorded else "")


def recorded_budget(path: str) -> Optional[int]:
  """The NaFlex budget the file at `path` records; None for square-image models and for
  files of other tools (foreign formats carry no record). A file that cannot be read
  records nothing here: loading it then says what is wrong with it."""
  if formats.is_foreign(path):
    return None
  try:
    return npz.read_max_patches(path)
  except (errors.InvalidInput, OSError):
    return None


def check_request(requested: Optional[int], flag: str = "--max_patches") -> None:
  """None (the file's reading), SQUARE or a budget >= 1; anything else is one line."""
  if requested is None:
    return
  if not isinstance(requested, int) or isinstance(requested, bool) or requested < SQUARE:
    raise errors.InvalidInput(f"{flag}={requested!r}: pass a patch budget >= 1 (e.g. 256), "
                              f"{SQUARE} for square images, or leave it out to read the "
                              "file as it was trained")


def of_file(path: str, requested: Optional[int], flag: str = "--max_patches") -> Reading:
  """The reading of the file at `path` (resolved: a local path or URL) for a request:
  None keeps the file's, SQUARE asks for square images, N for NaFlex at N patches."""
  check_request(requested, flag)
  recorded = recorded_budget(path)
  if requested == SQUARE:
    return Reading(None, recorded)
  return Reading(requested or recorded, recorded)


def check_square_size(checkpoint: str, reading: Reading, image_size, action: str = "read"
                      ) -> None:
  """--image_size asks for square images: one line when the file is read as NaFlex
  (action: what the tool does with it, 'read', 'export', ...)."""
  if reading.max_patches and image_size is not None:
    raise errors.InvalidInput(
        f"{checkpoint} is read as {reading.describe()}, and --image_size asks for square "
        f"images: add --max_patches={SQUARE} to {action} it so, or leave --image_size out")
