"""No import cycles inside sagerl/: every module's imports (top-level and inside functions) form a DAG.

A cycle hidden behind a function-level import still means two modules each need the other: the shared
names belong in the module that owns them. Read statically (ast), so optional engines need not import.
"""

import ast
from pathlib import Path

import pytest

import sagerl

ROOT = Path(sagerl.__file__).parent


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the sagerl modules it imports anywhere in its body.

    ``from pkg import sub`` where ``sub`` is a module counts as an import of ``pkg.sub`` only (the package
    ``__init__`` is merely initialised first); a name that is not a module counts as an import of ``pkg``.
    """
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                subs = {f"{base}.{a.name}" for a in node.names} & modules.keys()
                deps |= subs
                if base in modules and len(subs) < len(node.names):
                    deps.add(base)
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_sagerl_has_no_import_cycles():
    found = cycles(import_graph(ROOT))
    assert found == [], "import cycles in sagerl/: " + "; ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("lazy", [False, True])
def test_a_cycle_is_found(tmp_path, lazy):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import f\n")
    (pkg / "a.py").write_text("from pkg.b import g\n\ndef f():\n    return g()\n")
    body = "def g():\n    from pkg.a import f\n    return f\n" if lazy else "from pkg.a import f\n"
    (pkg / "b.py").write_text(body)
    (pkg / "c.py").write_text("from pkg import a, b\n")  # submodule imports: no edge to pkg itself
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"]]
