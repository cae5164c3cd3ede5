"""The preprocessing settings both input stacks share (tf.data's tf_preprocess, Grain's
np_preprocess): the preset names, the inception crop's ranges, the BiT HyperRule."""

from vit_jax.base import errors

PRESETS = ("inception", "bit")
INCEPTION_AREA = (0.05, 1.0)
INCEPTION_ASPECT = (3 / 4, 4 / 3)
INCEPTION_ATTEMPTS = 100
# BiT HyperRule (resize, crop): images under 96x96 px -> (160, 128), others -> (448, 384).
# The crop (model resolution) is the config's choice; bit_resize maps it to the resize.
HYPERRULE_SMALL = (160, 128)
HYPERRULE_LARGE = (448, 384)


def bit_resize(crop: int, resize: int = None) -> int:
  """`resize`, or by default the HyperRule's resize for `crop`, keeping the rule's ratio
  (160/128 for crops up to 128 px, 448/384 above) for crops it does not list."""
  if resize is None:
    rule_resize, rule_crop = HYPERRULE_SMALL if crop <= HYPERRULE_SMALL[1] else HYPERRULE_LARGE
    resize = round(crop * rule_resize / rule_crop)
  if resize < crop:
    raise errors.InvalidInput(
        f"bit preprocessing: resize={resize} is smaller than crop={crop}; "
        "set pp.resize >= pp.crop")
  return resize


def bit_side_fraction(crop: int, resize: int = None) -> float:
  """The share of each side the BiT crop keeps (crop / its resize): a NaFlex train crop
  (no square to resize to) keeps this share of each side at the image's aspect ratio."""
  return crop / bit_resize(crop, resize)
