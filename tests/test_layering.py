"""The package's import graph, read from the source (nothing imported), against the five
floors the code is built in. A floor is given to a folder (a package under vit_jax/, every
module in it included) or to a module at the top of vit_jax/, never to a module inside a
folder: a file is on the floor of the folder that holds it. A module imports only from its
own floor or below, no two units (folders or top modules) import each other, directly or
round a cycle, and only commands import the loop (vit_jax.train)."""

import ast
import pathlib

from conftest import REPO

PACKAGE = pathlib.Path(REPO) / "vit_jax"
BASE, MODELS_DATA, CHECKPOINTS, LIBRARY, TOP = range(5)
FLOOR_NAMES = ("base", "models and data", "checkpoints", "training library",
               "loop and commands")
# Unit (a folder under vit_jax/, or a module at its top) -> floor. A command at the top (a
# module with a __main__ entry, found below) that no row names is on the top floor.
FLOORS = {
    "errors": BASE, "console": BASE,
    # The storage layer: every file and URL read or written; what a command may write over.
    "storage": BASE, "no_clobber": BASE,
    "store_faults": BASE, "object_moves": BASE,  # the storage layer's: stores that fail
    "file_urls": BASE,  # file: URLs as the local paths they name
    "platforms": BASE,  # which JAX platforms start: before anything starts a backend
    "config_checks": BASE,  # the run's counts and the rules every owner refuses a value by
    "workdir_files": BASE,  # the workdir's file names: a leaf, so any owner may name them
    "cli": BASE,  # the command-line layer (flags, usage errors): any command's, lora's too
    "models": MODELS_DATA, "data": MODELS_DATA,
    "checkpoints": CHECKPOINTS,  # released weights and their formats
    "optim": LIBRARY, "param_groups": LIBRARY, "lora": LIBRARY, "sharding": LIBRARY,
    "objectives": LIBRARY, "train_step": LIBRARY, "trainer": LIBRARY,
    "evaluators": LIBRARY, "runs": LIBRARY, "config_defaults": LIBRARY,
    "tpu_slices": LIBRARY, "planner": LIBRARY, "fit_search": LIBRARY, "throughput": LIBRARY,
    "train": TOP,
    "vtab_runner": TOP, "vtab_report": TOP,  # python -m vit_jax.vtab's runs and its table
    "export": TOP,  # the export command's own package
    "": TOP,  # vit_jax/__init__.py: the public API (create_model, load_npz, save_npz)
}
LOOP = "train"


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


def test_floors_are_given_to_folders_and_top_modules_only():
  units = {unit_of(module) for module in GRAPH}
  assert not sorted(row for row in FLOORS if "." in row), "rows naming a module in a folder"
  assert not sorted(set(FLOORS) - units), "FLOORS rows naming no folder or top module"
  unplaced = sorted(unit for unit in units if unit not in FLOORS and unit not in COMMANDS)
  assert not unplaced, f"folders or modules on no floor (FLOORS): {unplaced}"


def test_the_commands_are_found():
  """The derivation finds python -m vit_jax.<command>'s modules (and not its libraries)."""
  assert {"main", "predict", "export.__main__", "lora.__main__"} <= COMMANDS
  assert not {"train", "cli", "export.api", "lora"} & COMMANDS


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
  assert floor_of("runs.anything") == FLOORS["runs"] and floor_of("checkpoints.npz") == CHECKPOINTS
