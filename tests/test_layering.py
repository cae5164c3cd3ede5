"""The package's import graph, read from the source (nothing imported), against the eight
floors the code is built in. A floor is given to a folder under vit_jax/ (every module in
it included); the top of vit_jax/ holds only the commands and the public API (__init__.py,
and nnx.py: the same models for Flax NNX). A module
imports only from its own floor or below, no two units (folders or top modules) import
each other, directly or round a cycle, no command imports another, no two modules share a
name, only commands import the loop (vit_jax.training.loop), and docs/architecture.md
shows the same floors."""

import ast
import pathlib
import re

from conftest import REPO

PACKAGE = pathlib.Path(REPO) / "vit_jax"
BASE, MODELS_DATA, CHECKPOINTS, FAMILIES, LIBRARY, PLANNING, SUITES, TOP = range(8)
FLOOR_NAMES = ("base", "models and data", "checkpoints", "model families",
               "training and export", "planning", "benchmark suites", "commands")
# Folder under vit_jax/ -> floor. The top of vit_jax/ holds only the commands (modules with
# a __main__ entry, found below) and the public API (__init__.py): both on the top floor.
FLOORS = {
    "base": BASE,  # errors, console, cli, storage, platforms, config checks
    "models": MODELS_DATA, "data": MODELS_DATA,
    "checkpoints": CHECKPOINTS,  # released weights and their formats
    "families": FAMILIES,  # one folder per model family, behind models/family_contract.py
    "training": LIBRARY, "export": LIBRARY,  # the main job's library; the export formats
    "planning": PLANNING,  # what a config needs on a slice, compiled ahead of time
    "vtab": SUITES,  # python -m vit_jax.vtab: its runs and its report
}
LOOP = "training.loop"
PUBLIC_API = {"", "nnx"}  # vit_jax/__init__.py, vit_jax/nnx.py: thin, their work in folders


def module_name(path: pathlib.Path) -> str:
  """The name relative to vit_jax ("" for vit_jax/__init__.py)."""
  parts = path.relative_to(PACKAGE).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.Module, modules) -> set:
  """The vit_jax modules a file imports, at any depth of its code."""
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                   else node.module for alias in node.names)
  return {name.removeprefix("vit_jax").removeprefix(".") for name in found if name in modules}


def has_main_entry(path: pathlib.Path, tree: ast.Module) -> bool:
  """`python -m` runs it: a __main__.py, or `if __name__ == "__main__":` at the top level."""
  return path.name == "__main__.py" or any(
      isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
      and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
      for node in tree.body)


def read_package():
  """(the import graph {module: modules it imports}, the commands)."""
  trees = {module_name(path): (path, ast.parse(path.read_text(encoding="utf-8")))
           for path in PACKAGE.rglob("*.py")}
  full_names = {f"vit_jax.{name}".rstrip(".") for name in trees}
  graph = {name: imports_of(tree, full_names) - {name} for name, (_, tree) in trees.items()}
  commands = {name for name, (path, tree) in trees.items() if has_main_entry(path, tree)}
  return graph, commands


GRAPH, COMMANDS = read_package()


def unit_of(module: str) -> str:
  """The folder that holds a module (its first name under vit_jax), or the module itself
  at the top; "" for vit_jax/__init__.py."""
  return module.split(".")[0]


def floor_of(module: str) -> int:
  unit = unit_of(module)
  return FLOORS[unit] if unit in FLOORS else TOP


def test_floors_are_folders_and_the_top_holds_only_commands_and_the_api():
  units = {unit_of(module) for module in GRAPH}
  assert len(FLOORS) <= 10, "at most 10 rows: a floor is a folder, not a module"
  assert all((PACKAGE / row).is_dir() for row in FLOORS), "FLOORS rows must name folders"
  assert not sorted(set(FLOORS) - units), "FLOORS rows naming no folder"
  top_modules = {unit for unit in units if not (PACKAGE / unit).is_dir()}
  library_at_top = sorted(top_modules - COMMANDS - PUBLIC_API)
  assert not library_at_top, f"library modules at the top of vit_jax/: {library_at_top}"
  unplaced = sorted(unit for unit in units if (PACKAGE / unit).is_dir() and unit
                    and unit not in FLOORS)
  assert not unplaced, f"folders on no floor (FLOORS): {unplaced}"


def test_the_commands_are_found():
  """The derivation finds python -m vit_jax.<command>'s modules (and not its libraries)."""
  assert {"main", "predict", "export.__main__", "lora", "vtab.__main__"} <= COMMANDS
  assert not {"training.loop", "base.cli", "export.api", "training.lora_adapters"} & COMMANDS


def test_commands_do_not_import_commands():
  """What two commands share lives on a library floor, so that a command stays a thin
  entry point (plan once stood on the top floor of all because it imported main)."""
  imports = sorted(f"{name} -> {imported}" for name in COMMANDS for imported in GRAPH[name]
                   if imported in COMMANDS)
  assert not imports, "commands importing commands: " + "; ".join(imports)


def _plug_in_kind(name: str):
  """The plug-in folder a module belongs to ('training.objectives', 'families.<name>'), or
  None: plug-ins of one contract share their role names (each family's `model`, `names`;
  each registry's `classification`), one per folder."""
  for registry in ("training.objectives.", "training.evaluators.", "families."):
    if name.startswith(registry) and name.count(".") == registry.count(".") + (
        registry == "families."):
      return name.rsplit(".", 1)[0]
  return None


def test_no_two_modules_share_a_name():
  """One name per idea. Plug-ins of one kind in the objectives and evaluators registries
  and the model families' folders may share a name (one per folder); a package's __init__
  and __main__ are not names of their own."""
  stems = {}
  for name in GRAPH:
    if not name or name.endswith("__main__"):
      continue
    stems.setdefault(name.split(".")[-1], []).append(name)
  twins = {}
  for stem, names in stems.items():
    folders = [_plug_in_kind(n) for n in names]
    if len(names) > 1 and (None in folders or len(set(folders)) < len(folders)):
      twins[stem] = sorted(names)
  assert not twins, f"modules sharing a name: {twins}"


ARCHITECTURE = pathlib.Path(REPO) / "docs" / "architecture.md"


def documented_floors() -> dict:
  """docs/architecture.md's floor table: {floor name: the folders its row names}."""
  rows = {}
  for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    if line.startswith("|") and len(cells) >= 2 and cells[0] in FLOOR_NAMES:
      rows[cells[0]] = set(re.findall(r"`(\w+)/`", cells[1]))
  return rows


def test_the_architecture_page_shows_the_floors_of_the_code():
  code = {FLOOR_NAMES[floor]: {row for row, f in FLOORS.items() if f == floor}
          for floor in range(TOP)}
  documented = documented_floors()
  assert {name: documented.get(name, set()) for name in code} == code, (
      "docs/architecture.md's floor table differs from tests/test_layering.py's FLOORS")
  top = documented.get(FLOOR_NAMES[TOP], set())
  commands = {name for name in COMMANDS if "." not in name}
  assert set(re.findall(r"`(\w+)`", next(
      line for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines()
      if line.startswith(f"| {FLOOR_NAMES[TOP]} |")))) >= commands, (
      "docs/architecture.md's commands row misses a command")
  assert not top, "the commands floor holds no folder"


def test_nothing_imports_from_a_floor_above():
  upward = sorted(f"{module} ({FLOOR_NAMES[floor_of(module)]}) -> {imported} "
                  f"({FLOOR_NAMES[floor_of(imported)]})"
                  for module, imports in GRAPH.items() for imported in imports
                  if floor_of(imported) > floor_of(module))
  assert not upward, "imports from a floor above: " + "; ".join(upward)


def test_only_commands_import_the_loop():
  importers = sorted(name for name, imports in GRAPH.items()
                     if LOOP in imports and name not in COMMANDS)
  assert not importers, f"{importers} import vit_jax.{LOOP}; only commands may"


def find_cycles(edges) -> list:
  """Every cycle a depth-first walk meets (enough to show one per tangle)."""
  state, cycles = {}, []

  def visit(node, stack):
    state[node] = "open"
    for nxt in sorted(edges.get(node, ())):
      if state.get(nxt) == "open":
        cycles.append(stack[stack.index(nxt):] + [nxt])
      elif nxt not in state:
        visit(nxt, stack + [nxt])
    state[node] = "done"

  for node in sorted(edges):
    if node not in state:
      visit(node, [node])
  return [" -> ".join(name or "vit_jax" for name in cycle) for cycle in cycles]


def test_no_import_cycles_between_modules():
  # A package's __init__ importing its own submodules is not a cycle in any useful sense.
  edges = {name: {m for m in imports if not name.startswith(m + ".")}
           for name, imports in GRAPH.items()}
  cycles = find_cycles(edges)
  assert not cycles, "import cycles: " + "; ".join(cycles)


def test_no_import_cycles_between_units():
  """Counted by folder: no two folders (or top modules) import each other, directly or
  round a longer cycle."""
  edges = {}
  for module, imports in GRAPH.items():
    edges.setdefault(unit_of(module), set()).update(
        unit_of(m) for m in imports if unit_of(m) != unit_of(module))
  cycles = find_cycles(edges)
  assert not cycles, "import cycles between packages: " + "; ".join(cycles)


def test_the_checks_see_a_cycle_and_an_upward_import():
  """The walk finds a two-unit and a three-unit cycle, and a floor is the folder's."""
  assert find_cycles({"a": {"b"}, "b": {"a"}}) == ["a -> b -> a"]
  assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a -> b -> c -> a"]
  assert floor_of("training.runs.anything") == LIBRARY
  assert floor_of("checkpoints.npz") == CHECKPOINTS
  assert floor_of("families.mixer.model") == FAMILIES
