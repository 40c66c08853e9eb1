"""The code's structure: every project module imports, no import cycle
(counting imports inside functions), and the hardware specification in
``golden/`` never depends on the system-level models in ``golden/system/``
or on the RTL, the testbenches or the flow."""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("golden", "hw", "sim", "tb")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Project modules ``name`` imports anywhere in its file."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:  # a name inside a module: the module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert _cycles() == []


def test_the_cycle_finder_finds_cycles(monkeypatch):
    """The check can fail: an edge back from golden.dcs to golden.channel
    (the cycle this layout removed) is found."""
    monkeypatch.setitem(GRAPH, "golden.dcs", GRAPH["golden.dcs"] | {"golden.channel"})
    assert ["golden.channel", "golden.dcs"] in _cycles()


def test_specification_stands_alone():
    """golden/ (outside golden/system/) imports only golden/ itself: not the
    system models and studies, the RTL, the testbenches or the flow."""
    spec = [m for m in GRAPH if m.startswith("golden") and not m.startswith("golden.system")]
    assert "golden.hub" in spec and "golden.alu" in spec and "golden.channel" in spec
    bad = {m: sorted(t for t in GRAPH[m] if not t.startswith("golden")
                     or t.startswith("golden.system")) for m in spec}
    assert {m: t for m, t in bad.items() if t} == {}


def test_rtl_depends_only_on_the_specification():
    """hw/ takes its encodings and configurations from golden/, never from
    the system models, the testbenches or the flow."""
    bad = {m: sorted(t for t in GRAPH[m] if not (t.startswith("hw") or t.startswith("golden"))
                     or t.startswith("golden.system")) for m in GRAPH if m.startswith("hw")}
    assert {m: t for m, t in bad.items() if t} == {}


#: cocotb test modules import only under a simulator
SIMULATOR_ONLY = ("tb.test_",)


@pytest.mark.parametrize("name", [m for m in MODULES if not m.startswith(SIMULATOR_ONLY)])
def test_module_imports(name):
    importlib.import_module(name)


# ---- sizes: every block readable on its own ----------------------------------

#: the longest an ``elaborate`` may be, in lines (docs/architecture.md)
ELABORATE_MAX_LINES = 150


def elaborate_sizes() -> dict[str, int]:
    """Lines of every ``elaborate`` method in hw/ (its nested helpers
    included), by ``module.Class``."""
    out = {}
    for name, path in MODULES.items():
        if not name.startswith("hw"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "elaborate":
                        out[f"{name}.{node.name}"] = item.end_lineno - item.lineno + 1
    return out


def module_sizes(prefix: str) -> dict[str, int]:
    """Lines of every module whose name starts with ``prefix``."""
    return {n: len(p.read_text().splitlines()) for n, p in MODULES.items()
            if n.startswith(prefix)}


def test_no_elaborate_is_too_long():
    sizes = elaborate_sizes()
    assert "hw.hub.module.PimModule" in sizes and "hw.dcs.DcsController" in sizes
    assert {k: v for k, v in sizes.items() if v > ELABORATE_MAX_LINES} == {}


if __name__ == "__main__":  # python tests/test_architecture.py: the sizes table
    for title, sizes in (("elaborate (hw/)", elaborate_sizes()),
                         ("modules (hw/)", module_sizes("hw")),
                         ("modules (golden/, specification)",
                          {k: v for k, v in module_sizes("golden").items()
                           if not k.startswith("golden.system")})):
        print(f"{title}:")
        for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:5]:
            print(f"  {v:5}  {k}")
