"""Outside its own folder (vit_jax/families/<name>/), no module names a model family: not in
an identifier, a string or a comment (an `is_mixer`, an `isinstance(m, MlpMixer)`, a
`'siglip'` branch, a "# a Mixer's blocks" rule). Generic code asks the registry and the
family's parts instead. Each family declares the words that name it (Family.words); the
default family's (ViT) are the whole package's. Counted as tests/test_layering.py counts
upward imports, read from the source; docstrings are prose and may cite a model by name.

The two places that must name families are left out: the registry's one list (BUILT_IN in
vit_jax/models/family_registry.py) and the public API's fixed names (vit_jax/__init__.py:
load_two_tower, save_two_tower; vit_jax/nnx.py: its load_two_tower)."""

import ast
import io
import pathlib
import re
import tokenize

from conftest import REPO
from vit_jax.models import family_registry

PACKAGE = pathlib.Path(REPO) / "vit_jax"
PUBLIC_API = (PACKAGE / "__init__.py", PACKAGE / "nnx.py")
REGISTRY = PACKAGE / "models" / "family_registry.py"


def docstring_lines(tree: ast.Module) -> set:
  """The lines of every module, class and function docstring."""
  lines = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      body = node.body
      if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
          and isinstance(body[0].value.value, str):
        lines.update(range(body[0].lineno, body[0].end_lineno + 1))
  return lines


def one_list_lines(tree: ast.Module) -> set:
  """The lines of the registry's BUILT_IN assignment."""
  return {line for node in tree.body if isinstance(node, ast.Assign)
          and any(isinstance(t, ast.Name) and t.id == "BUILT_IN" for t in node.targets)
          for line in range(node.lineno, node.end_lineno + 1)}


def mentions(path: pathlib.Path, words: re.Pattern, root: pathlib.Path) -> list:
  """'file:line: token' for each identifier, string or comment of `path` naming a family."""
  source = path.read_text(encoding="utf-8")
  tree = ast.parse(source)
  skipped = docstring_lines(tree) | (one_list_lines(tree) if path == REGISTRY else set())
  found = []
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT) and \
        token.start[0] not in skipped and words.search(token.string):
      found.append(f"{path.relative_to(root)}:{token.start[0]}: {token.string[:60]}")
  return found


def family_mentions(family, package: pathlib.Path = PACKAGE) -> list:
  """Where `family` is named outside its folder (and the two places that must name it)."""
  own_folder = package / "families" / family.name
  words = re.compile(family.words)
  return [mention for path in sorted(package.rglob("*.py"))
          if own_folder not in path.parents and path not in PUBLIC_API
          for mention in mentions(path, words, package.parent)]


def test_no_module_outside_a_familys_folder_names_it():
  found = {family.name: family_mentions(family) for family in family_registry.families()
           if family.words}
  assert not any(found.values()), "family names outside their folders:\n" + "\n".join(
      line for lines in found.values() for line in lines)


def test_every_family_but_the_default_declares_its_words():
  """A family with no words could be named anywhere unseen; only the default has none."""
  unnamed = [f.name for f in family_registry.families() if not f.words]
  assert unnamed == ["vit"]


def test_the_count_sees_code_and_comments_but_not_docstrings(tmp_path):
  """The reading itself: an identifier, a string and a comment are counted; a docstring
  is not (it may cite a model)."""
  package = tmp_path / "vit_jax"
  (package / "families" / "toy").mkdir(parents=True)
  (package / "families" / "toy" / "model.py").write_text("toy = 1  # the toy's own folder\n")
  (package / "generic.py").write_text(
      '"""Cites the toy paper."""\n\nis_toy = "toy"  # a toy rule\n')
  family = type("Family", (), {"name": "toy", "words": r"(?i)toy"})
  found = family_mentions(family, package)
  assert [line.split(": ", 1)[0] for line in found] == ["vit_jax/generic.py:3"] * 3
