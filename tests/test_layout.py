"""The package's layering (CONTRIBUTING.md): no module of django_bgtasks
imports a module that imports it back, directly or through others, even
inside a function. Only imports under ``if TYPE_CHECKING:`` are exempt: they
never run.

A function-level import hides a cycle from Python until the day that function
runs first; this test finds it the day it is written.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import django_bgtasks

PACKAGE = Path(django_bgtasks.__file__).resolve().parent


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` but its migrations."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if "migrations" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import at any depth, except in the body of ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the else branch does run
            continue
        stack.extend(ast.iter_child_nodes(node))


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports at run time.

    ``from . import x`` is an import of the module ``x`` when there is one, and
    of the package's ``__init__`` when ``x`` is a name defined there. The
    parent packages Python runs first are not counted as imports.
    """
    modules = module_files(package)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        here = module if is_package else module.rpartition(".")[0]
        imports: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                    for alias in node.names
                ]
            imports.update(target for target in targets if target in modules)
        imports.discard(module)
        graph[module] = imports
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """For each group of modules that import each other (a strongly connected
    component of the graph), its shortest cycle: ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [
        min((_shortest_cycle(graph, start, set(component)) for start in component), key=len)
        for component in components
    ]


def _shortest_cycle(graph: dict[str, set[str]], start: str, members: set[str]) -> list[str]:
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & members):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start} in {sorted(members)}")  # pragma: no cover


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    graph = import_graph(PACKAGE)
    # The walk found the package and its imports (so an empty result means something).
    assert "django_bgtasks.core.leases" in graph["django_bgtasks.models"]
    assert "django_bgtasks.db.engines" in graph["django_bgtasks.core.store"]
    assert "django_bgtasks.models" not in graph["django_bgtasks.core.leases"]  # TYPE_CHECKING only
    found = [" -> ".join(cycle) for cycle in cycles(graph)]
    assert found == [], "import cycles:\n" + "\n".join(found)


# --- the check can fail ------------------------------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"a.py": "from . import b\n", "b.py": "def f():\n    from .a import x\n"},
            ["pkg.a -> pkg.b -> pkg.a"],
            id="function-level",
        ),
        pytest.param(
            {
                "a.py": "from .b import y\n",
                "b.py": "import pkg.c\n",
                "c.py": "class C:\n    def m(self):\n        from pkg import a\n",
            },
            ["pkg.a -> pkg.b -> pkg.c -> pkg.a"],
            id="through-three",
        ),
        pytest.param(
            {
                "sub/__init__.py": "",
                "sub/a.py": "from ..b import x\n",
                "b.py": "from .sub import a\n",
            },
            ["pkg.b -> pkg.sub.a -> pkg.b"],
            id="subpackage",
        ),
        pytest.param(
            {
                "a.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .b import x\n",
                "b.py": "from .a import y\n",
            },
            [],
            id="type-checking-is-exempt",
        ),
        pytest.param(
            {
                "a.py": "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n"
                "    from .b import x\n",
                "b.py": "from .a import y\n",
            },
            ["pkg.a -> pkg.b -> pkg.a"],
            id="type-checking-else-runs",
        ),
        pytest.param(
            {
                "migrations/__init__.py": "",
                "migrations/m.py": "from pkg import a\n",
                "a.py": "from .migrations import m\n",
            },
            [],
            id="migrations-are-not-walked",
        ),
    ],
)
def test_the_check_finds_a_cycle(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    graph = import_graph(write_package(tmp_path, files))
    assert [" -> ".join(cycle) for cycle in cycles(graph)] == expected


# --- every size and default spelled once (django_bgtasks/limits.py) ----------------------


def _trees() -> dict[str, ast.Module]:
    return {
        module: ast.parse(path.read_text(), filename=str(path))
        for module, path in module_files(PACKAGE).items()
    }


def _number(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    )


def _ttl_defaults(tree: ast.AST) -> Iterator[ast.expr]:
    """What a ttl defaults to: a ``ttl`` argument's default, a ``ttl`` field's
    value (or its model field's ``default``/``db_default``), BGTASKS_TTL's."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            defaulted = positional[len(positional) - len(arguments.defaults) :]
            named = [
                *zip(defaulted, arguments.defaults, strict=True),
                *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True),
            ]
            yield from (
                default for argument, default in named if argument.arg == "ttl" and default
            )
        elif isinstance(node, ast.AnnAssign | ast.Assign) and node.value is not None:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(target, ast.Name) and target.id == "ttl" for target in targets):
                yield node.value
                if isinstance(node.value, ast.Call):
                    yield from (
                        keyword.value
                        for keyword in node.value.keywords
                        if keyword.arg in ("default", "db_default")
                    )
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "BGTASKS_TTL"
        ):
            yield from node.args[1:]


def test_sizes_and_defaults_are_spelled_once_in_limits() -> None:
    trees = _trees()
    literal_lengths = [
        node.lineno
        for node in ast.walk(trees["django_bgtasks.models"])
        if isinstance(node, ast.keyword) and node.arg == "max_length" and _number(node.value)
    ]
    assert literal_lengths == [], f"models.py lines with a literal max_length: {literal_lengths}"
    literal_ttls = [
        f"{module}:{node.lineno}"
        for module, tree in trees.items()
        if module != "django_bgtasks.limits"
        for node in _ttl_defaults(tree)
        if _number(node)
    ]
    assert literal_ttls == [], f"ttl defaults not from limits.py: {literal_ttls}"


def test_the_host_name_is_read_once() -> None:
    reads = [
        f"{module}:{node.lineno}"
        for module, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "gethostname"
    ]
    assert len(reads) == 1, f"gethostname() in more than one place: {reads}"


def test_a_json_column_is_decoded_in_one_place() -> None:
    """``json.loads(x) if isinstance(x, str...) else x`` is states.json_column's."""
    decodes = [
        f"{module}:{node.lineno}"
        for module, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.IfExp)
        and isinstance(node.test, ast.Call)
        and isinstance(node.test.func, ast.Name)
        and node.test.func.id == "isinstance"
        and any(
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "loads"
            for call in ast.walk(node.body)
        )
    ]
    assert [where.partition(":")[0] for where in decodes] == ["django_bgtasks.core.states"], (
        decodes
    )


# --- layers: nothing imports upwards (CONTRIBUTING.md, "The layers") ---------------------

# Bottom first. A module may import its own layer's and the layers below;
# the package's __init__ (the lazy public names) sits above them all.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "values",
        (
            "limits",
            "choices",
            "exceptions",
            "signals",
            "compat",
            "background.registry",
            "core.progress",
            "queue.groups",
        ),
    ),
    (
        "rules",
        (
            "conf",
            "validation",
            "authentication",
            "background.schedules",
            "core.states",
            "db",
            "tracing",
            "queue.keys",
            "queue.flow",
            "queue.fairness",
        ),
    ),
    (
        "storage",
        (
            "core.store",
            "core.claims",
            "core.requests",
            "core.leases",
            "core.holding",
            "push",
            "queue.manager",
            "models",
        ),
    ),
    (
        "running",
        (
            "core.runner",
            "background.functions",
            "queue.results",
            "queue.execute",
            "queue.enqueue",
            "queue.backend",
            "queue.task_schedules",
            "queue.lag",
            "queue.rollup",
            "backend",
        ),
    ),
    ("worker", ("worker",)),
    ("operator", ("operations", "checks")),
    ("surfaces", ("admin", "http", "management", "urls", "events", "apps")),
]
SURFACES = ("admin", "http", "management")
# What one surface may take from another: http's shared parts, and the event
# stream's view, which the admin mounts under its own URL.
SHARED_BY_SURFACES = ("http.responses", "http.access", "http.events")


def _local(module: str) -> str:
    return module.removeprefix("django_bgtasks").lstrip(".")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int:
    """The index of ``module``'s layer in LAYERS (the package itself: above them all)."""
    local = _local(module)
    if local == "":
        return len(LAYERS)
    found = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(LAYERS)
        for prefix in prefixes
        if _within(local, prefix)
    ]
    assert found, f"{module} is in no layer of LAYERS: place it there"
    return max(found)[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for each import of a module on a higher layer, or of
    another surface (but for SHARED_BY_SURFACES)."""
    found = []
    for module, imports in sorted(graph.items()):
        for target in sorted(imports):
            if layer_of(target) > layer_of(module):
                found.append(f"{_local(module)} -> {_local(target)} (upwards)")
                continue
            here = next((s for s in SURFACES if _within(_local(module), s)), None)
            there = next((s for s in SURFACES if _within(_local(target), s)), None)
            if here and there and here != there and _local(target) not in SHARED_BY_SURFACES:
                found.append(f"{_local(module)} -> {_local(target)} (another surface)")
    return found


def test_no_module_imports_a_higher_layer_or_another_surface() -> None:
    graph = import_graph(PACKAGE)
    assert layer_of("django_bgtasks.db.mysql.leases") < layer_of("django_bgtasks.models")
    assert upward_imports(graph) == []


def test_the_layer_check_can_fail() -> None:
    graph = {
        "django_bgtasks.models": {"django_bgtasks.worker.loop"},
        "django_bgtasks.admin.views": {"django_bgtasks.management.terminal"},
        "django_bgtasks.admin.options": {"django_bgtasks.http.responses"},
    }
    assert upward_imports(graph) == [
        "admin.views -> management.terminal (another surface)",
        "models -> worker.loop (upwards)",
    ]


# --- every state and status spelled once (choices.py) ------------------------------------


def _spelled_values() -> set[str]:
    from django_bgtasks import choices

    kinds = (choices.Status, choices.Outcome, choices.QueueStatus, choices.WorkerRunStatus)
    return {member.value for kind in kinds for member in kind}


def literal_statuses(tree: ast.AST, values: set[str]) -> list[int]:
    """Lines that spell a state or status instead of naming its choice: a
    comparison with one, ``status=``/``outcome=`` given one, ``x or "lost"``,
    or one quoted as an SQL literal (``'READY'``) in a string."""
    quoted = {f"'{value}'" for value in values}
    found = []
    for node in ast.walk(tree):
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.BoolOp):
            operands = node.values
        elif isinstance(node, ast.keyword) and node.arg in ("status", "outcome"):
            operands = [node.value]
        for operand in operands:
            elements = operand.elts if isinstance(operand, ast.Tuple | ast.Set | ast.List) else []
            for item in [operand, *elements]:
                if isinstance(item, ast.Constant) and item.value in values:
                    found.append(item.lineno)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and any(spelled in node.value for spelled in quoted)
        ):
            found.append(node.lineno)
    return sorted(set(found))


# The schema SQL of released migrations (db/<engine>/schema.py) spells the
# statuses as each migration did: an entry is never edited, so it can't follow
# choices.py.
FROZEN_SQL_MODULES = re.compile(r"^django_bgtasks\.db\.(postgresql|mysql|sqlite)\.schema$")


def test_every_state_and_status_is_spelled_once_in_choices() -> None:
    values = _spelled_values()
    spelled = [
        f"{module}:{line}"
        for module, tree in _trees().items()
        if module != "django_bgtasks.choices" and not FROZEN_SQL_MODULES.match(module)
        for line in literal_statuses(tree, values)
    ]
    assert spelled == [], f"spelled out instead of named from choices.py: {spelled}"
    sample = 'if row.status == "READY" or x:\n    f(outcome="lost")\nSQL = "a = \'FAILED\'"\n'
    assert literal_statuses(ast.parse(sample), values) == [1, 2, 3]


# --- no block written twice, or a comment where it stands says why ----------------------

PAIR = re.compile(r"^D\d+ (?P<a>\S+):(?P<a1>\d+)-(?P<a2>\d+) ~ (?P<b>\S+):(?P<b1>\d+)-(?P<b2>\d+)")
# A pair may stay when a comment where it stands (within it or the three lines
# above it, or anywhere in the function or class it is part of) says why the
# two are alike: "# Alike ...".
EXPLAINED = re.compile(r"#.*\balike\b", re.IGNORECASE)


def _where_it_stands(path: Path, first: int, last: int) -> list[str]:
    """The lines of ``path`` a pair's explanation may be on."""
    lines = path.read_text().splitlines()
    start = first
    if path.suffix != ".py":  # a template: its lines, and the three above
        return lines[max(first - 4, 0) : last]
    for node in ast.walk(ast.parse("\n".join(lines))):
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.end_lineno is not None
            and node.lineno <= first <= node.end_lineno
        ):
            start = min(start, node.lineno)
    return lines[max(min(start, first) - 4, 0) : last]


# Where a block is written twice on purpose: the migrations, and the schema
# SQL they run (db/<engine>/schema.py), each entry written out in full as its
# migration ran it, never shared with another (an entry is never edited).
FROZEN_SQL = re.compile(r"(^|/)migrations/|(^|/)db/(postgresql|mysql|sqlite)/schema\.py$")


# Modules of declarations, one a thing, alike in shape by design: a pair
# within one of them is not code written twice (a pair with another module is).
DECLARATIONS = {
    # One frozen dataclass a statement, its fields that statement's parameters.
    "db/params.py",
}


def unexplained_pairs(report: str, root: Path) -> list[str]:
    """The rows of a ``duplicates`` report, outside the migrations and the
    schema SQL they run, whose two places carry no "alike" comment."""
    found = []
    for line in report.splitlines():
        match = PAIR.match(line)
        if match is None or any(FROZEN_SQL.search(match[side]) for side in ("a", "b")):
            continue
        if match["a"] == match["b"] and match["a"] in DECLARATIONS:
            continue
        places = [
            (root / match[side], int(match[side + "1"]), int(match[side + "2"]))
            for side in ("a", "b")
        ]
        if not any(
            EXPLAINED.search(text)
            for path, first, last in places
            for text in _where_it_stands(path, first, last)
        ):
            found.append(line)
    return found


def test_no_block_is_written_twice_unless_a_comment_says_why() -> None:
    command = shutil.which("duplicates")
    if command is None:
        pytest.skip("the duplicates command (the project's tool library) is not on PATH")
    report = subprocess.run(
        [command, "--repo", ".", "--most", "200", "--seconds", "120"],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert "incomplete:" not in report, report
    assert "files read" in report.splitlines()[0], report
    unexplained = unexplained_pairs(report, PACKAGE)
    assert unexplained == [], "\n".join(unexplained)


def test_the_pair_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n" * 10)
    (tmp_path / "b.py").write_text("# Alike on purpose: two vendors.\n" + "x = 1\n" * 10)
    (tmp_path / "c.py").write_text(
        "def f():\n    # Alike g() on purpose.\n" + "    x = 1\n" * 20 + "x = 2\n" * 10
    )
    report = (
        "D1 a.py:1-8 ~ a.py:2-9\nD2 a.py:1-8 ~ b.py:2-9\nD3 migrations/m.py:1-8 ~ a.py:1-8\n"
        "D4 a.py:1-8 ~ c.py:15-20\nD5 a.py:1-8 ~ c.py:25-30\n"
        "D6 db/sqlite/schema.py:1-8 ~ a.py:1-8\nD7 db/schema.py:1-8 ~ a.py:2-9\n"
        "D8 db/params.py:1-8 ~ db/params.py:20-27\nD9 db/params.py:1-8 ~ a.py:2-9\n"
    )
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "schema.py").write_text("x = 1\n" * 10)
    (tmp_path / "db" / "params.py").write_text("x = 1\n" * 30)
    assert unexplained_pairs(report, tmp_path) == [
        "D1 a.py:1-8 ~ a.py:2-9",
        "D5 a.py:1-8 ~ c.py:25-30",
        "D7 db/schema.py:1-8 ~ a.py:2-9",
        "D9 db/params.py:1-8 ~ a.py:2-9",
    ]


# --- the map and the layer table in CONTRIBUTING.md can't drift -------------------------

CONTRIBUTING = PACKAGE.parent / "CONTRIBUTING.md"


def _map_blocks() -> dict[str, str]:
    """The text of CONTRIBUTING.md's map ("## The map"'s code block), by
    folder: "" for the package's own modules, "db" for ``db/``'s lines,
    "db/mysql" for those of ``db/mysql/`` (a folder in a folder, two spaces in)."""
    block = CONTRIBUTING.read_text().split("## The map", 1)[1].split("```", 2)[1]
    blocks: dict[str, str] = {"": ""}
    folders: list[str] = []  # the open folders, outermost first
    for line in block.splitlines()[2:]:  # (after the language and the package's line)
        entry = re.match(r"^((?:  )+)(\S+)", line)
        if entry:
            depth = len(entry[1]) // 2 - 1  # 0: in the package, 1: in a folder, ...
            if depth <= len(folders):  # an entry, not a description's next line
                del folders[depth:]
                if entry[2].endswith("/") and re.fullmatch(r"\w+/", entry[2]):
                    folders.append(entry[2][:-1])
        folder = "/".join(folders)
        blocks[folder] = blocks.get(folder, "") + line + "\n"
    return blocks


def _modules() -> list[Path]:
    """The package's modules, relative to it, but its migrations and ``__init__``s."""
    return sorted(
        path.relative_to(PACKAGE)
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and "migrations" not in path.parts
    )


def test_the_map_names_every_module_and_no_other() -> None:
    """Each module is on a line of its folder's part of the map (its file
    name, or its name in a folder's list); each file name the map gives is a
    module there."""
    blocks = _map_blocks()
    unnamed = []
    for module in _modules():
        folder = "/".join(part for part in module.parts[:-1] if part != "commands")
        name = "commands/" + module.name if "commands" in module.parts else module.stem
        if not re.search(rf"(?<![\w/]){re.escape(name)}(\.py)?\b", blocks.get(folder, "")):
            unnamed.append(str(module))
    assert unnamed == [], f"CONTRIBUTING.md's map leaves out {unnamed}"
    named = {
        (folder, found)
        for folder, text in blocks.items()
        for found in re.findall(r"(?<![\w/])([a-z_]+\.py)\b", text)
        if found != "manage.py"  # (a site's, where the worker's command runs)
    }
    ghosts = [
        f"{folder}/{name}" if folder else name
        for folder, name in sorted(named)
        if not (PACKAGE / folder / name).exists()
        and not (folder == "management" and (PACKAGE / folder / "commands" / name).exists())
    ]
    assert ghosts == [], f"CONTRIBUTING.md's map names modules that don't exist: {ghosts}"


def test_the_layer_table_is_the_layers() -> None:
    """CONTRIBUTING.md's table of the layers says what LAYERS holds."""
    text = CONTRIBUTING.read_text().split("## The layers", 1)[1].split("\n## ", 1)[0]
    table = {
        row[1].strip(): [name.rstrip("/") for name in re.findall(r"`([^`]+)`", row[2])]
        for row in (line.split("|") for line in text.splitlines() if line.startswith("| "))
        if row[1].strip() not in ("layer", "")
    }
    assert table == {name: list(prefixes) for name, prefixes in LAYERS}


# A module's name says what it holds: a name two modules share is one feature
# at two layers (its operation, and a surface's translation of it), or a
# public path and what it names. Any other repeat fails (two metrics.py that
# meant four things, and three schedules.py, did: issue 52).
SAME_FEATURE = {
    "backend.py": "the public path django_bgtasks.backend, and queue/backend.py it names",
    "events.py": "the public path django_bgtasks.events, and http/events.py it names",
    "bulk.py": "bulk actions: the operation, the API's and the command's",
    "dashboard.py": "the dashboard: its reads, and the admin's view",
    "pauses.py": "pauses: the admin's actions and the command's (the operation is pause.py)",
    "queued.py": "the Django Tasks list: the operator's reads, and the admin's",
    "workers.py": "the workers: the operator's reads, and the command's",
    "driver.py": "an engine's driver: what one is (db/driver.py), and each engine's",
    "leases.py": "the leases: BackgroundTask.objects' operations, and each engine's statements",
    "enqueue.py": "the enqueue: enqueue_many(), and MySQL's statement of it",
    "schema.py": "the migrations' schema SQL: run on a connection's engine, and each engine's",
}
# Each engine's package (db/postgresql/, db/mysql/, db/sqlite/) names its
# modules by the role they play, alike in every engine on purpose: counted
# once, as db/<engine>/<name>.
ENGINE_PACKAGE = re.compile(r"^db/(postgresql|mysql|sqlite)/")


def test_a_module_name_is_one_feature() -> None:
    names: dict[str, list[str]] = {}
    for module in _modules():
        place = ENGINE_PACKAGE.sub("db/<engine>/", str(module))
        if place not in names.get(module.name, []):
            names.setdefault(module.name, []).append(place)
    repeated = {name for name, found in names.items() if len(found) > 1}
    assert repeated == set(SAME_FEATURE), {
        name: names.get(name) for name in repeated ^ set(SAME_FEATURE)
    }


# --- every module has its tests, in its mirror ----------------------------------------------

ROOT = PACKAGE.parent


def mirrors(module: Path) -> tuple[Path, Path]:
    """Where the tests of ``module`` (a path in the package) are by the
    package's shape: tests/<folder>/test_<module>.py, or a folder
    tests/<folder>/<module>/ (a command's, in tests/management/)."""
    folder = Path("tests", *(part for part in module.parts[:-1] if part != "commands"))
    return folder / f"test_{module.stem}.py", folder / module.stem


def untested(modules: list[Path], root: Path) -> list[str]:
    """The modules of ``modules`` whose mirror (mirrors()) is missing under
    ``root``, each said as what to add."""
    found = []
    for module in modules:
        mirror, folder = mirrors(module)
        if not ((root / mirror).is_file() or (root / folder).is_dir()):
            found.append(f"{module.as_posix()}: add {mirror}, its tests")
    return found


def test_every_module_has_its_tests() -> None:
    """Every module of the package has its own test module (or folder), in
    the package's shape, so that its tests are where a reader looks first.
    What also reaches it from elsewhere, CONTRIBUTING.md's "Where the tests
    are" says."""
    found = untested(_modules(), ROOT)
    assert found == [], "\n".join(found)


def test_the_tests_check_can_fail(tmp_path: Path) -> None:
    for name in ("tests/test_a.py", "tests/management/test_cmd.py", "tests/sub/c/x.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    modules = [
        Path(name)
        for name in ("a.py", "h.py", "management/commands/cmd.py", "sub/b.py", "sub/c.py")
    ]
    assert untested(modules, tmp_path) == [
        "h.py: add tests/test_h.py, its tests",
        "sub/b.py: add tests/sub/test_b.py, its tests",
    ]


# --- only db/ asks which engine a connection is -----------------------------------------


def _is_vendor(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "vendor"


def _tested_operands(node: ast.AST) -> list[ast.expr]:
    """What ``node`` tests or looks up by: a comparison's operands, a
    subscript's key, a ``.get()``'s first argument."""
    if isinstance(node, ast.Compare) and any(
        isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops
    ):
        return [node.left, *node.comparators]
    if isinstance(node, ast.Subscript):
        return [node.slice]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.args[:1] if node.func.attr == "get" else []
    return []


def engine_tests(tree: ast.AST) -> list[int]:
    """Lines that branch on a connection's engine: a comparison (``==``,
    ``!=``, ``in``, ``not in``) with a ``.vendor``, or a look-up by one
    (``BY[connection.vendor]``, ``BY.get(connection.vendor)``). Reading it,
    for a message, is not a test."""
    return sorted(
        {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.expr) and any(map(_is_vendor, _tested_operands(node)))
        }
    )


def test_only_db_asks_which_engine_a_connection_is() -> None:
    """Which engine a connection is decides which SQL runs, and db/ alone
    decides that (db/engines.py picks a connection's driver; db/schema.py runs
    the migrations' SQL by it): nowhere else, migrations included, branches
    on ``connection.vendor``."""
    walked = [
        path for path in sorted(PACKAGE.rglob("*.py")) if not path.is_relative_to(PACKAGE / "db")
    ]
    assert PACKAGE / "migrations" / "0027_finished_by_time.py" in walked  # migrations too
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in walked
        for line in engine_tests(ast.parse(path.read_text(), filename=str(path)))
    ]
    assert found == [], f"a test of a connection's vendor outside db/: {found}"
    sample = (
        'if connection.vendor == "postgresql":\n'  # 1
        '    x = c.vendor in ("a", "b")\n'  # 2
        "y = BY[schema_editor.connection.vendor]\n"  # 3
        "z = BY.get(connection.vendor, [])\n"  # 4
        'if "sqlite" != x.vendor: pass\n'  # 5
        'message = f"{connection.vendor} is not supported"\n'  # 6: read, not tested
        "vendor = connection.vendor\n"  # 7
        'ok = vendor == "sqlite"\n'  # 8: a name, not the attribute
    )
    assert engine_tests(ast.parse(sample)) == [1, 2, 3, 4, 5]
