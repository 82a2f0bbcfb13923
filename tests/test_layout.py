"""The package's layout (README.md, "Layout"): each room imports only the rooms below it,
no module imports itself in a circle, the root holds only what every room uses, the
public names import from `albert_tf` itself, and importing the package loads no
TensorFlow."""

import ast
import collections
import os
import subprocess
import sys

import albert_tf

PACKAGE = os.path.dirname(albert_tf.__file__)
# The rooms from the ground up: a room may import the root and the rooms before it.
ROOMS = ("model", "cpu", "data", "weights", "run", "export", "tasks", "research")
ROOT_MODULES = {"__init__", "errors", "fileio", "options", "interrupts", "cli", "output_paths"}


def _modules():
    """{dotted module name: path} of every module of the package."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
                found[rel.removesuffix(".__init__")] = path
    return found


def _imports(path, modules):
    """The package's modules that the module at `path` imports (at any depth of its code)."""
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            while name and name not in modules:  # `from x import function` names x
                name = name.rpartition(".")[0]
            if name.startswith("albert_tf"):
                out.add(name)
    return out


def _room(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ROOMS) else "root"


def _graph():
    modules = _modules()
    return {m: _imports(p, modules) - {m, "albert_tf"} for m, p in modules.items()}


def test_each_room_imports_only_the_root_and_the_rooms_below_it():
    rank = {"root": -1, **{room: i for i, room in enumerate(ROOMS)}}
    upward = [
        f"{module} -> {target}"
        for module, targets in _graph().items()
        if module != "albert_tf"  # the package's face hands the public names on lazily
        for target in targets
        if rank[_room(target)] > rank[_room(module)]
    ]
    assert not upward, upward
    assert sorted(
        n for n in os.listdir(PACKAGE) if os.path.isdir(os.path.join(PACKAGE, n, "")) and n in ROOMS
    ) == sorted(ROOMS)


def test_no_module_imports_itself_in_a_circle():
    graph = _graph()
    state, circles = collections.defaultdict(int), []

    def visit(module, path):  # 1: on the current path, 2: done
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state[target] == 1:
                circles.append(path[path.index(target) :] + [target])
            elif state[target] == 0:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if state[module] == 0:
            visit(module, [module])
    assert not circles, circles


def test_the_root_holds_only_what_every_room_uses():
    root = {n[:-3] for n in os.listdir(PACKAGE) if n.endswith(".py")}
    assert root == ROOT_MODULES and len(root) <= 10


def test_the_public_names_import_from_the_package_and_load_no_tensorflow_before():
    script = (
        "import sys, albert_tf\n"
        "assert 'tensorflow' not in sys.modules, 'import albert_tf loaded TensorFlow'\n"
        "from albert_tf import (AlbertConfig, AlbertModel, AlbertPretrainer, AlbertClassifier,\n"
        "    load_original_checkpoint, save_original_checkpoint, load_release, FullTokenizer,\n"
        "    hub, speed_paths, preset)\n"
        "assert AlbertModel.__module__ == 'albert_tf.model.modeling'\n"
        "assert callable(speed_paths.use) and callable(hub.open_module)\n"
        "assert set(albert_tf.__all__) <= set(dir(albert_tf))\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        cwd=os.path.dirname(PACKAGE),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
