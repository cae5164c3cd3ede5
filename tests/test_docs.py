"""The front door holds: README.md is short, every relative link in it and in docs/ leads
somewhere (a file, and a heading when the link names one), and every command in the
README's commands table is a module with a main entry."""

import importlib.util
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").rglob("*.md"))]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^#{1,6} (.+?)\s*#*$", re.M)


def _prose(text):
  """The text outside fenced code blocks (a `# comment` in a bash block is no heading)."""
  return FENCE.sub("", text)


def _anchor(heading):
  """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path):
  seen, anchors = {}, set()
  for heading in HEADING.findall(_prose(path.read_text(encoding="utf-8"))):
    base = _anchor(heading)
    count = seen.get(base, 0)
    seen[base] = count + 1
    anchors.add(base if count == 0 else f"{base}-{count}")
  return anchors


def _relative_links(path):
  for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
    if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
      yield target


def test_the_readme_is_a_front_page():
  assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
  broken = []
  for target in _relative_links(page):
    file_part, _, anchor = target.partition("#")
    resolved = (page.parent / file_part).resolve() if file_part else page
    if not resolved.exists():
      broken.append(f"{target}: no such file")
    elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
      broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)}")
  assert not broken, broken


def test_the_anchor_rule_matches_github():
  assert _anchor("Fine-tuning controls: layer decay, LoRA") == "fine-tuning-controls-layer-decay-lora"
  assert _anchor("Export: `vit_jax.export`") == "export-vit_jaxexport"
  assert _anchor("Test suite (`python -m pytest -q`)") == "test-suite-python--m-pytest--q"


def _table_commands():
  return re.findall(r"^\| `python -m (vit_jax\.[\w.]+)` \|", README.read_text(encoding="utf-8"),
                    re.M)


def test_the_commands_table_lists_every_command():
  commands = _table_commands()
  assert len(commands) == len(set(commands))
  on_disk = {f"vit_jax.{p.stem}" for p in (REPO / "vit_jax").glob("*.py")
             if re.search(r"^if __name__ == .__main__.:", p.read_text(encoding="utf-8"), re.M)}
  on_disk |= {f"vit_jax.{p.parent.name}" for p in (REPO / "vit_jax").glob("*/__main__.py")}
  assert set(commands) == on_disk


@pytest.mark.parametrize("command", _table_commands())
def test_every_command_in_the_table_exists_with_a_main(command):
  spec = importlib.util.find_spec(command)
  assert spec is not None, f"{command} is not a module"
  if spec.submodule_search_locations:  # a package runs its __main__
    main = pathlib.Path(next(iter(spec.submodule_search_locations))) / "__main__.py"
    assert main.exists(), f"{command} has no __main__.py"
    source = main.read_text(encoding="utf-8")
  else:
    source = pathlib.Path(spec.origin).read_text(encoding="utf-8")
  assert re.search(r"^def main\(", source, re.M), f"{command} defines no main()"
  assert re.search(r"^if __name__ == .__main__.:", source, re.M), f"{command} does not run main()"


def test_ci_runs_the_readme_test_command():
  """.ci/run's install and pytest lines are the README's test command, word for word."""
  readme = README.read_text(encoding="utf-8")
  ci = [line for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.startswith(("pip install", "python -m pytest"))]
  assert len(ci) == 2
  assert f"python3 -m venv .venv && . .venv/bin/activate && {ci[0]} && {ci[1]}\n" in readme
