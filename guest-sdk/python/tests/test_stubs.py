"""The types of the workflow API (`wfhost-stubs`) name what the runtime's `wfhost` module has,
no more and no less, and are installed with the package."""

import ast
import importlib.util
from pathlib import Path

from conftest import ROOT

RUNTIME = ROOT / "runtimes" / "python" / "py" / "wfhost.py"


def public(tree):
    """The module's public names, and each public class's public methods."""
    names, methods = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            names.add(node.name)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name) and not t.id.startswith("_"))
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            methods[node.name] = {
                item.name
                for item in node.body
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_")
            }
    return names, methods


def test_the_stubs_match_the_runtime_module():
    stubs = Path(importlib.util.find_spec("wfhost_client").origin).parents[1] / "wfhost-stubs" / "__init__.pyi"
    assert stubs.exists(), f"the stubs are not installed beside the client: {stubs}"
    runtime_names, runtime_methods = public(ast.parse(RUNTIME.read_text()))
    stub_names, stub_methods = public(ast.parse(stubs.read_text()))
    # The stubs' own helpers for the types (JSON, HttpResponse) are not the runtime's.
    assert runtime_names <= stub_names, f"missing from the stubs: {runtime_names - stub_names}"
    assert stub_names - runtime_names == {"JSON", "HttpResponse"}
    for cls, methods in runtime_methods.items():
        assert methods == stub_methods[cls], f"{cls}: runtime {methods}, stubs {stub_methods[cls]}"
