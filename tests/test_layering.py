"""The package's import graph (read from the source, nothing imported): no cycles, and
nothing below the command layer imports vit_jax.train."""

import ast
import pathlib

from conftest import REPO

PACKAGE = pathlib.Path(REPO) / "vit_jax"
# python -m vit_jax.<command>: the only modules that may import vit_jax.train.
COMMANDS = {f"vit_jax.{name}" for name in ("main", "predict", "fewshot", "visualize", "vtab",
                                           "download", "convert", "benchmark", "export",
                                           "plan")}


def module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path, modules) -> set:
  """The vit_jax modules a file imports, at any depth of its code."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                   else node.module for alias in node.names)
  return {name for name in found if name in modules}


def import_graph():
  paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
  return {name: imports_of(path, paths) - {name} for name, path in paths.items()}


def test_nothing_below_the_commands_imports_train():
  importers = sorted(name for name, imported in import_graph().items()
                     if "vit_jax.train" in imported
                     and name not in COMMANDS and name != "vit_jax")
  assert not importers, f"{importers} import vit_jax.train from below the command layer"


def test_no_import_cycles():
  graph = import_graph()
  # A package's __init__ importing its own submodules is not a cycle in any useful sense.
  edges = {name: {m for m in imported if not (name.startswith(m + ".") and
                                              graph.get(m) is not None)}
           for name, imported in graph.items()}
  state, cycles = {}, []

  def visit(node, stack):
    state[node] = "open"
    for nxt in sorted(edges[node]):
      if state.get(nxt) == "open":
        cycles.append(stack[stack.index(nxt):] + [nxt])
      elif nxt not in state:
        visit(nxt, stack + [nxt])
    state[node] = "done"

  for node in sorted(edges):
    if node not in state:
      visit(node, [node])
  assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
