"""The prompt sets, the --classes / --templates parsers and big_vision's canonical text."""

import pytest
from absl import app

from vit_jax.base import errors
from vit_jax.data import prompt_templates


def test_prompt_sets_and_big_vision_canonical_text():
  assert len(prompt_templates.parse_templates("clip_paper")) > 50
  assert prompt_templates.parse_templates("clip_best")[-1] == "{}"
  assert prompt_templates.parse_templates("a {}.|the {}") == ["a {}.", "the {}"]
  names, templates = prompt_templates.prompt_texts(
      ["Golden_Retriever", "Yorkshire-Terrier, dog"], ["A photo of the {}."], canonicalize=True)
  assert names == ["golden retriever", "yorkshireterrier, dog"]
  assert templates == ["a photo of the {}"]
  assert prompt_templates.prompt_texts(["A_b"], ["{}!"], canonicalize=False) == (["A_b"], ["{}!"])


def test_class_names_from_a_list_or_a_file(tmp_path):
  (tmp_path / "classes.txt").write_text("cat\n\n dog \n")
  assert prompt_templates.parse_class_names(f"@{tmp_path / 'classes.txt'}") == ["cat", "dog"]
  assert prompt_templates.parse_class_names("cat, dog") == ["cat", "dog"]
  with pytest.raises(app.UsageError, match="empty class name"):
    prompt_templates.parse_class_names("cat,,dog")
  with pytest.raises(app.UsageError, match="exactly one"):
    prompt_templates.parse_templates("a {} and {}")


def test_class_names_that_read_alike_or_as_nothing_are_one_line():
  for names, match in ((["c++", "c#", "c"], "'c\\+\\+', 'c#', 'c' all read 'c' after the "
                        "canonical form"), (["Cat", "dog", "CAT!"], "'Cat', 'CAT!' all read 'cat'"),
                       (["cat", "!!!"], "'!!!' read as nothing")):
    with pytest.raises(errors.InvalidInput, match=match) as e:
      prompt_templates.check_class_names(names, True, switch="--nocanonicalize")
    assert "--nocanonicalize" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(errors.InvalidInput, match=match):
      prompt_templates.prompt_texts(names, ["{}"], True)
  prompt_templates.check_class_names(["c++", "c#", "c", "!!!"], False)  # as typed: apart
  with pytest.raises(errors.InvalidInput, match="'cat', 'cat' all read 'cat' and") as e:
    prompt_templates.check_class_names(["cat", "cat"], False, switch="--nocanonicalize")
  assert "--nocanonicalize" not in str(e.value)
