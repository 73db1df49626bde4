"""The package's floors: every import runs down, never up or sideways.

The rooms of ``jaxsynth`` (its subpackages and top-level modules) stand on the floors of
``FLOORS``, bottom first; a module may import its own room and the rooms of lower floors
only.  Every import statement counts, those inside functions (lazy imports) and
``importlib.import_module("jaxsynth...")`` calls included, so the test fails on an arrow
back up (e.g. ``core`` reading ``mechanisms``) as ``farm-studio look`` draws it, and, since
the floors are strictly ordered, on any circle.  ``jaxsynth/__init__.py`` is the facade:
it names every room in its table of lazy imports and is no room of its own.

Also: the mechanisms know nothing of W1: no module under ``jaxsynth/mechanisms`` imports
the W1 package (they emit metric-free level statistics; the tree W1 method weighs them).
"""

import ast
import re
from pathlib import Path

import jaxsynth
import jaxsynth.mechanisms

PACKAGE = Path(jaxsynth.__file__).parent

FLOORS = (
    ("core", "compilation", "interrupts", "launcher", "_compat", "arguments"),
    ("numba_cache",),
    ("engine", "wasserstein"),
    ("mechanisms",),
    ("api",),
    ("audit", "experiments"),
    ("cli",),
    ("__main__",),
)
"""The rooms, bottom floor first."""

FLOOR = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}

PATTERN = re.compile(r"jaxsynth\.wasserstein|from\s+jaxsynth\s+import\s+[^\n]*\bwasserstein\b")


def _room(module: str) -> str | None:
    """The room of a dotted module name of this package (``None`` outside it)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "jaxsynth" and len(parts) > 1 else None


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of everything ``path`` imports, at any depth of its code."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "jaxsynth":  # from jaxsynth import engine: the room engine
                found += [(node.lineno, f"jaxsynth.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            found.append((node.lineno, node.args[0].value))
    return found


def _rooms_of_files():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative == Path("__init__.py"):
            continue  # the facade
        yield path, relative.parts[0].removesuffix(".py")


def test_every_room_stands_on_a_floor():
    rooms = {room for _, room in _rooms_of_files()}
    assert {"core", "mechanisms", "engine", "wasserstein", "experiments", "cli"} <= rooms
    assert rooms - set(FLOOR) == set(), "place the new room on a floor of FLOORS"


def test_every_import_runs_down_a_floor():
    upward = []
    for path, room in _rooms_of_files():
        for line, name in _imported(path):
            target = _room(name)
            if target is None or target == room:
                continue
            if target not in FLOOR or FLOOR[target] >= FLOOR[room]:
                upward.append(f"{path.relative_to(PACKAGE)}:{line} ({room}) imports {name}")
    assert upward == []


def test_an_upward_import_would_be_seen(tmp_path):
    """The scanner sees lazy imports in functions and import_module calls."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from jaxsynth.mechanisms.protocol import Mechanism\n"
                     "    import importlib\n    importlib.import_module('jaxsynth.cli')\n"
                     "from jaxsynth import engine\n")
    names = sorted(name for _, name in _imported(probe))
    assert names == ["importlib", "jaxsynth.cli", "jaxsynth.engine",
                     "jaxsynth.mechanisms.protocol"]


def test_no_module_under_mechanisms_imports_the_w1_package():
    root = Path(jaxsynth.mechanisms.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) >= 5  # the package was found
    hits = [f"{p.name}:{i}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if PATTERN.search(line)]
    assert hits == []
