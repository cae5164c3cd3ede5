"""Zero-shot prompt sets, as big_vision's image-text evaluators name them
(`prompt_engineering.py`): 'clip_paper', the CLIP paper's ImageNet templates (81 as
big_vision lists them; its evaluators' default), 'clip_best', the 7 CLIP picked as best plus the bare
name, and 'class_name_only'. canonicalize_text is big_vision's clean-up of class names
and templates (underscores to spaces, punctuation dropped except the '{}' slot, lower case,
whitespace collapsed). parse_class_names / parse_templates read the flags zeroshot and
predict take (--classes, --templates).
"""

import re
import string
from typing import List, Sequence

from vit_jax.base import cli, errors, storage

CLIP_PAPER = (
    'a bad photo of a {}.',
    'a photo of many {}.',
    'a sculpture of a {}.',
    'a photo of the hard to see {}.',
    'a low resolution photo of the {}.',
    'a rendering of a {}.',
    'graffiti of a {}.',
    'a bad photo of the {}.',
    'a cropped photo of the {}.',
    'a tattoo of a {}.',
    'the embroidered {}.',
    'a photo of a hard to see {}.',
    'a bright photo of a {}.',
    'a photo of a clean {}.',
    'a photo of a dirty {}.',
    'a dark photo of the {}.',
    'a drawing of a {}.',
    'a photo of my {}.',
    'the plastic {}.',
    'a photo of the cool {}.',
    'a close-up photo of a {}.',
    'a black and white photo of the {}.',
    'a painting of the {}.',
    'a painting of a {}.',
    'a pixelated photo of the {}.',
    'a sculpture of the {}.',
    'a bright photo of the {}.',
    'a cropped photo of a {}.',
    'a plastic {}.',
    'a photo of the dirty {}.',
    'a jpeg corrupted photo of a {}.',
    'a blurry photo of the {}.',
    'a photo of the {}.',
    'a good photo of the {}.',
    'a rendering of the {}.',
    'a {} in a video game.',
    'a photo of one {}.',
    'a doodle of a {}.',
    'a close-up photo of the {}.',
    'a photo of a {}.',
    'the origami {}.',
    'the {} in a video game.',
    'a sketch of a {}.',
    'a doodle of the {}.',
    'a origami {}.',
    'a low resolution photo of a {}.',
    'the toy {}.',
    'a rendition of the {}.',
    'a photo of the clean {}.',
    'a photo of a large {}.',
    'a rendition of a {}.',
    'a photo of a nice {}.',
    'a photo of a weird {}.',
    'a blurry photo of a {}.',
    'a cartoon {}.',
    'art of a {}.',
    'a sketch of the {}.',
    'a embroidered {}.',
    'a pixelated photo of a {}.',
    'itap of the {}.',
    'a jpeg corrupted photo of the {}.',
    'a good photo of a {}.',
    'a plushie {}.',
    'a photo of the nice {}.',
    'a photo of the small {}.',
    'a photo of the weird {}.',
    'the cartoon {}.',
    'art of the {}.',
    'a drawing of the {}.',
    'a photo of the large {}.',
    'a black and white photo of a {}.',
    'the plushie {}.',
    'a dark photo of a {}.',
    'itap of a {}.',
    'graffiti of the {}.',
    'a toy {}.',
    'itap of my {}.',
    'a photo of a cool {}.',
    'a photo of a small {}.',
    'a tattoo of the {}.',
    '{}',
)
CLIP_BEST = (
    'itap of a {}.',
    'a bad photo of the {}.',
    'a origami {}.',
    'a photo of the large {}.',
    'a {} in a video game.',
    'art of the {}.',
    'a photo of the small {}.',
    '{}',
)
SETS = {"clip_paper": CLIP_PAPER, "clip_best": CLIP_BEST, "class_name_only": ("{}",)}
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def canonicalize_text(text: str, keep: str = "") -> str:
  """big_vision's canonical form of a class name or template (keep: a string, such as
  '{}', whose characters survive where it occurs whole)."""
  text = text.replace("_", " ")
  parts = text.split(keep) if keep else [text]
  text = keep.join(part.translate(_NO_PUNCTUATION) for part in parts)
  return re.sub(r"\s+", " ", text.lower()).strip()


def parse_class_names(value: str) -> List[str]:
  """'cat,dog' or '@FILE' (one name a line) -> names; empty ones refused."""
  if value.startswith("@"):
    names = [line.strip() for line in storage.read_text(value[1:]).splitlines()]
    names = [n for n in names if n]
  else:
    names = [n.strip() for n in value.split(",")]
  if not names or not all(names):
    raise cli.UsageError(f"--classes={value!r} has an empty class name: give names separated "
                         "by commas, or @FILE with one name a line")
  return names


def parse_templates(value: str) -> List[str]:
  """A named set (clip_paper, clip_best, class_name_only), 'a photo of a {}.|{}' or '@FILE'
  -> templates, each with exactly one '{}'."""
  if value in SETS:
    return list(SETS[value])
  templates = (storage.read_text(value[1:]).splitlines() if value.startswith("@")
               else value.split("|"))
  templates = [t.strip() for t in templates if t.strip()]
  bad = [t for t in templates if t.count("{}") != 1]
  if not templates or bad:
    raise cli.UsageError(f"--templates: each prompt needs exactly one {{}} for the class name "
                         f"(got {bad[0] if bad else value!r}); separate prompts with |, or name "
                         f"a set: {', '.join(SETS)}")
  return templates


def check_class_names(names: Sequence[str], canonicalize: bool, *, what: str = "class names",
                      switch: str = "") -> None:
  """One line for class names that would be scored as no class or as one another: names
  that read as nothing, or alike, in the form the text tower sees them (canonical unless
  canonicalize is off); what: where they were given, switch: how to turn the canonical
  form off where the names' owner can."""
  read = [canonicalize_text(n, ",") if canonicalize else n for n in names]
  form = " after the canonical form (lower case, punctuation dropped)" if canonicalize else ""
  keep = f", or keep them as typed with {switch}" if canonicalize and switch else ""
  empty = [n for n, r in zip(names, read) if not r.strip()]
  if empty:
    raise errors.InvalidInput(f"{what}: {', '.join(map(repr, empty[:3]))} read as nothing"
                              f"{form}: give names with letters or digits{keep}")
  alike = {}
  for name, text in zip(names, read):
    alike.setdefault(text, []).append(name)
  for text, group in alike.items():
    if len(group) > 1:
      raise errors.InvalidInput(f"{what}: {', '.join(map(repr, group))} all read {text!r}"
                                f"{form} and would score identically: rename them{keep}")


def prompt_texts(names: Sequence[str], templates: Sequence[str], canonicalize: bool):
  """(class names, templates) as the text tower sees them: big_vision's canonical form
  (lower case, punctuation dropped) unless canonicalize is off; names that read as nothing
  or alike are refused (check_class_names)."""
  check_class_names(names, canonicalize)
  if not canonicalize:
    return list(names), list(templates)
  return ([canonicalize_text(n, ",") for n in names],
          [canonicalize_text(t, "{}") for t in templates])


TEMPLATES_HELP = ("Prompts with {} for the class name, separated by | (or @FILE, one a line), "
                  "or a named set: clip_paper (the CLIP paper's, big_vision's default), "
                  "clip_best, class_name_only. Each class's embedding is the normalised mean "
                  "over its prompts.")
