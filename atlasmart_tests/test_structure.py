"""The package's shape: no import cycle (function-level imports included), and one module that names the contract
without importing anything of the package."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "atlasmart_assets"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every package module `path` imports, at any depth of the file (functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) - {name} for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_no_import_cycle_including_function_level_imports() -> None:
    cycle = find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_contract_imports_nothing_of_the_package() -> None:
    assert _graph()["atlasmart_assets.contract"] == set()


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "atlasmart_assets"
    pkg.mkdir()
    (pkg / "a.py").write_text("from atlasmart_assets import b\n")
    (pkg / "b.py").write_text("def late():\n    from atlasmart_assets import a\n")
    modules = {"atlasmart_assets.a", "atlasmart_assets.b"}
    graph = {f"atlasmart_assets.{n}": _imports(pkg / f"{n}.py", modules) for n in ("a", "b")}
    assert find_cycle(graph) == ["atlasmart_assets.a", "atlasmart_assets.b", "atlasmart_assets.a"]


def test_the_code_version_starts_with_the_installed_package_version() -> None:
    """The README: bump the package version to make a deployment that ships bytecode only build its days again.
    Until 2026-12-07 the package said 0.1.0 (pyproject.toml, __version__) and the code version 0.2.0 (a review):
    bumping the one changed nothing of the other. pyproject.toml now reads contract.PACKAGE_VERSION."""
    import importlib.metadata

    import atlasmart_assets
    from atlasmart_assets import contract

    installed = importlib.metadata.version("atlasmart_assets")
    assert atlasmart_assets.__version__ == installed == contract.PACKAGE_VERSION
    assert contract.CODE_VERSION.startswith(f"{installed}+")
