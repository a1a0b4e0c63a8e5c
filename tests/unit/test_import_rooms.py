"""The import directions of docs/architecture.md's "Layout", checked on the source (no import
runs).

Each production module belongs to one room, named by the process that runs it; a room may
import only the rooms listed for it below (lazy imports inside functions count too, and so do
the modules that the registry of configuration classes loads by name for its readers). And no
two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Repository folder -> package (setup.cfg's package_dir).
FOLDERS = {
    "scalelab": "scalelab",
    "hub_ext": "scalelab.hub_ext",
    "spawner": "scalelab.spawner",
    "kernels": "scalelab.kernels",
    "store": "scalelab.store",
    "templates": "scalelab.templates",
    "notebooks": "scalelab.notebooks",
}
#: Module-name prefix -> room; the longest matching prefix wins.
ROOMS = {
    "scalelab": "facade",
    "scalelab.__main__": "commands",
    "scalelab.cli": "commands",
    "scalelab.commands": "commands",
    "scalelab.envvars": "leaves",
    "scalelab.common": "leaves",
    "scalelab.templates": "leaves",
    "scalelab.notebooks": "leaves",
    "scalelab.hub_ext": "hub",
    "scalelab.hub_ext.hub": "hub",
    "scalelab.hub_ext.services": "services",
    "scalelab.hub_ext.server": "server",
    "scalelab.hub_ext.labs": "labs",
    "scalelab.spawner": "spawner",
    "scalelab.kernels": "kernels",
    "scalelab.store": "store",
}
#: Which rooms each room may import (besides itself).
ALLOWED = {
    "facade": {"hub", "leaves"},
    # commands: also services and server, whose settings `scalelab config-reference` documents
    "commands": {
        "hub",
        "services",
        "server",
        "spawner",
        "kernels",
        "store",
        "labs",
        "leaves",
        "facade",
    },
    "hub": {"spawner", "services", "kernels", "store", "labs", "leaves"},  # hand-in: labs
    "services": {"leaves"},
    "spawner": {"kernels", "store", "leaves"},
    "server": {"kernels", "store", "labs", "leaves"},
    "labs": {"store", "leaves"},
    "kernels": {"store", "leaves"},
    "store": {"leaves"},
    "leaves": set(),
}


def modules() -> dict[str, Path]:
    """Every production module's name -> its file."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def room(module: str) -> str:
    prefixes = [p for p in ROOMS if module == p or module.startswith(p + ".")]
    return ROOMS[max(prefixes, key=len)]


def imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported ScaleLab module) for every import in ``path``, lazy ones included."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*parts, base]) if base else ".".join(parts)
            names = [f"{base}.{alias.name}" for alias in node.names]  # a module, or in one
        else:
            continue
        for name in names:
            if name == "scalelab" or name.startswith("scalelab."):
                yield node.lineno, name


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module ``name`` is, or is in (``from pkg import function`` names pkg)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


#: The modules that load classes of ``scalelab.common.config_registry`` by name
#: (``ConfigClass.load``), and which of its entries each loads.
REGISTRY_READERS = {
    "scalelab.hub_ext.hub.config_check": "hub",  # hub_classes(): the hub's start-up check
    "scalelab.commands.config_reference": "all",  # CONFIG_CLASSES: the reference
}


def registry_loads() -> Iterator[tuple[str, str]]:
    """(config_file, module) of every ``ConfigClass(name, module, config_file, ...)`` entry of
    the registry, read from its source: the modules it imports by name when asked."""
    path = ROOT / "scalelab" / "common" / "config_registry.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ConfigClass":
            _name, module, config_file = (arg.value for arg in node.args[:3])
            yield config_file, module


def edges() -> list[tuple[str, int, str]]:
    """(importer, line, imported) of every import between ScaleLab's modules; a registry
    reader's by-name loads count as imports at line 0."""
    known = modules()
    found = []
    for module, path in known.items():
        for line, name in imports(module, path):
            target = resolve(name, known)
            if target and target != module:
                found.append((module, line, target))
    for reader, which in REGISTRY_READERS.items():
        for config_file, target in registry_loads():
            if which in ("all", config_file):
                found.append((reader, 0, target))
    return found


def test_every_module_has_a_room():
    assert {room(m) for m in modules()} <= set(ALLOWED)
    assert room("scalelab.hub_ext.server.extension") == "server"
    assert room("scalelab.kernels.startup") == "kernels"


def test_imports_follow_the_allowed_directions():
    wrong = [
        f"{modules()[src].relative_to(ROOT)}:{line}: {src} ({room(src)}) imports {dst} "
        f"({room(dst)})"
        for src, line, dst in edges()
        if room(dst) != room(src) and room(dst) not in ALLOWED[room(src)]
    ]
    assert wrong == []


def test_kernels_never_import_hub_ext():
    assert [e for e in edges() if room(e[0]) == "kernels" and "hub_ext" in e[2]] == []


def test_no_import_circle():
    graph: dict[str, set[str]] = {}
    for src, _line, dst in edges():
        if not dst.startswith(src + "."):  # a package's own re-exports are not a circle
            graph.setdefault(src, set()).add(dst)
    circles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert circles == []


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path):
    source = "from .release import MARKERS\n\ndef f():\n    import scalelab.spawner.local\n"
    path = tmp_path / "sync.py"
    path.write_text(source)
    found = [name for _line, name in imports("scalelab.hub_ext.labs.sync", path)]
    assert found == ["scalelab.hub_ext.labs.release.MARKERS", "scalelab.spawner.local"]
    assert resolve(found[0], modules()) == "scalelab.hub_ext.labs.release"
    assert room("scalelab.spawner.local") not in ALLOWED["labs"]  # would be reported
    assert room("scalelab.hub_ext.server.logstream") not in ALLOWED["kernels"]


def test_the_registrys_loads_are_seen_with_their_readers():
    loads = list(registry_loads())
    assert ("hub", "scalelab.spawner.local") in loads
    assert ("server", "scalelab.hub_ext.server.store_drive") in loads
    found = edges()
    assert ("scalelab.hub_ext.hub.config_check", 0, "scalelab.spawner.local") in found
    assert (
        "scalelab.hub_ext.hub.config_check",
        0,
        "scalelab.hub_ext.server.store_drive",
    ) not in found
    assert ("scalelab.commands.config_reference", 0, "scalelab.hub_ext.server.store_drive") in found
    readers = {m for m in modules() if "config_registry" in modules()[m].read_text()}
    assert readers - {"scalelab.common.config_registry"} <= set(REGISTRY_READERS)


def _imported(code: str) -> set[str]:
    """Modules a fresh interpreter has imported after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_a_kernel_start_pulls_in_no_server_or_hub_code():
    loaded = _imported("import scalelab.kernels.startup")
    assert {m for m in loaded if m.split(".")[0] in ("jupyter_server", "jupyterhub")} == set()
    assert {m for m in loaded if m.startswith("scalelab.hub_ext")} == set()


def test_data_fetch_help_imports_no_verb_hub_or_data_library():
    code = (
        "import sys\nfrom scalelab.cli import main\nsys.argv = ['scalelab']\n"
        "try:\n    main(['data', 'fetch', '--help'])\nexcept SystemExit:\n    pass"
    )
    loaded = _imported(code)
    heavy = {"jupyterhub", "jupyter_server", "fsspec", "pyarrow", "tornado", "traitlets"}
    assert {m for m in loaded if m.split(".")[0] in heavy} == set()
    assert {m for m in loaded if m.startswith(("scalelab.commands", "scalelab.hub_ext"))} == set()
