"""The documentation's own checks: docstring examples and runnable page blocks run, every
public function of ``jaxsynth`` has an example and every Python block of a page is
runnable, module docstrings stay short and free of measured figures, every public name
has a docstring and a section in the API reference, the command line's synopses hold
every option, and the guide's figures exist where their pages show them."""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jaxsynth

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxsynth"
DOCS = ROOT / "docs"
NAMESPACES = ("jaxsynth", "jaxsynth.wasserstein")
MAX_MODULE_DOC_LINES = 25

MODULES = sorted(
    info.name for info in pkgutil.walk_packages(jaxsynth.__path__, "jaxsynth.")
    if not info.name.endswith("__main__")
)
SOURCES = sorted(PACKAGE.rglob("*.py"))

# A measured figure: a speed ratio ("3×", "1.5x faster"), or a time or size that reads as
# a measurement: approximate ("~350 MB", "about 2 s"), a range ("0.5–0.7 s"), a decimal
# ("5.5 GiB"), a rate ("3 ms per call"), what something took or costs ("takes 4 s"), or a
# number right after "measured".  Round settings ("a 2 GiB chunk", "skips those under
# 1 s") and parameters ("2^30", "float32", "Threefry-2x32", "ε = 1") do not match.
_NUMBER = r"\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_UNIT = r"\s*(?:s|ms|µs|us|ns|secs?|seconds?|min|minutes?|hours?|[KMGT]i?B|bytes)\b"
FIGURE = re.compile(
    rf"(?<![\w.^]){_NUMBER}\s*×"
    rf"|(?<![\w.^]){_NUMBER}x\b"
    rf"|(?:~|≈|\babout\s|\baround\s|\broughly\s){_NUMBER}{_UNIT}"
    rf"|(?<![\w.^]){_NUMBER}\s*[–-]\s*{_NUMBER}{_UNIT}"
    rf"|(?<![\w.^])\d+\.\d+{_UNIT}"
    rf"|(?<![\w.^]){_NUMBER}{_UNIT}\s+(?:per|a|an|each)\s"
    rf"|\b(?:takes?|took|taking|costs?|costing|ran|runs)\s+(?:in\s+)?{_NUMBER}{_UNIT}"
    r"|\bmeasured\s+(?:at\s+)?[-+~]?\d",
)


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def docstrings(path: Path):
    """(where, docstring) of the module and of every class and function in ``path``."""
    tree = ast.parse(path.read_text())
    yield relative(path), ast.get_docstring(tree, clean=False)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield f"{relative(path)}:{node.lineno} {node.name}", ast.get_docstring(node)


@pytest.mark.parametrize("path", SOURCES, ids=relative)
def test_module_docstring_is_short(path):
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    assert doc, f"{relative(path)} has no module docstring"
    lines = len(doc.strip().splitlines())
    assert lines <= MAX_MODULE_DOC_LINES, (
        f"{relative(path)}: module docstring of {lines} lines (at most "
        f"{MAX_MODULE_DOC_LINES}); move derivations to a page under docs/theory/")


@pytest.mark.parametrize("path", SOURCES, ids=relative)
def test_no_measured_figure_in_docstrings(path):
    found = [f"{where}: {match.group(0)!r}" for where, doc in docstrings(path) if doc
             for match in FIGURE.finditer(doc)]
    assert not found, "measured figures belong in benchmark results:\n" + "\n".join(found)


def test_figure_pattern():
    """The pattern finds timings, sizes and ratios, and leaves parameters alone."""
    for text in ("takes 0.5 s", "3 ms per call", "~350 MB", "5.5 GiB", "4–7× slower",
                 "1.5x faster", "measured 1.3e-5", "took 2 minutes", "about 300 MB",
                 "0.2–0.35 s", "costs 4 s"):
        assert FIGURE.search(text), text
    for text in ("Threefry-2x32", "float32 words", "2^30 − 1 counts", "ε = 1", "16 seeds",
                 "[n, d] points", "d = 3 dimensions", "O(n log n)", "3 sigmas",
                 "one chunk on a CPU (2 GiB)", "skips those under 1 s", "longer than 2 s"):
        assert not FIGURE.search(text), text


def public_objects():
    """(qualified name, object) of every public name, and of the members of public modules."""
    for namespace in NAMESPACES:
        module = importlib.import_module(namespace)
        for name in module.__all__:
            obj = getattr(module, name)
            yield f"{namespace}.{name}", obj
            if inspect.ismodule(obj):
                for member, value in vars(obj).items():
                    if (not member.startswith("_") and callable(value)
                            and getattr(value, "__module__", None) == obj.__name__):
                        yield f"{namespace}.{name}.{member}", value


def constant_documented(namespace: str, name: str) -> bool:
    """Whether the assignment of the constant ``name`` that ``namespace`` re-exports is
    followed by a string (an attribute docstring)."""
    module = importlib.import_module(namespace)
    source = inspect.getsource(module)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            source = inspect.getsource(importlib.import_module(node.module))
            break
    body = ast.parse(source).body
    for node, after in zip(body, body[1:]):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str))
    return False


@pytest.mark.parametrize("qualname,obj", list(public_objects()), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_public_name_has_docstring(qualname, obj):
    if inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj):
        doc = inspect.getdoc(obj)
        assert doc and doc.strip(), f"{qualname} has no docstring"
    else:
        namespace, name = qualname.rsplit(".", 1)
        assert constant_documented(namespace, name), f"{qualname} has no docstring"


def jaxsynth_callables():
    """(qualified name, object) of every public class and function of ``jaxsynth`` and
    ``jaxsynth.wasserstein``: the names of ``__all__`` and the members of public modules.
    A module is not itself checked (its members are); a class is, its docstring showing
    how to build and use it."""
    return [(qualname, obj) for qualname, obj in public_objects() if not inspect.ismodule(obj)]


def examples(obj) -> list:
    return doctest.DocTestParser().get_examples(inspect.getdoc(obj) or "")


@pytest.mark.parametrize("qualname,obj", jaxsynth_callables(), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_public_callable_has_an_example(qualname, obj):
    """Every public function and class shows a ``>>>`` example (run by
    ``test_docstring_examples_run``), written in the package."""
    assert examples(obj), f"{qualname} has no '>>>' example in its docstring"
    assert Path(inspect.getsourcefile(obj)).resolve().is_relative_to(PACKAGE), qualname


def script(path: Path):
    """The Python file ``path`` (a hook, a script), loaded as a module of its own."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_hook(name: str):
    """The MkDocs hook ``docs/_hooks/<name>.py``, loaded as mkdocs loads it."""
    return script(DOCS / "_hooks" / f"{name}.py")


def test_api_reference_lists_every_public_name():
    hook = load_hook("reference")
    pages = hook.pages()
    assert set(hook.NAMESPACES.values()) and {ns for ns, _ in hook.NAMESPACES.values()} == set(
        NAMESPACES)
    for path, (namespace, _) in hook.NAMESPACES.items():
        text = pages[path]
        for name in importlib.import_module(namespace).__all__:
            assert f"## `{namespace}.{name}`" in text, f"{namespace}.{name} missing from {path}"
            # the rendered object is the public one
            target = hook.target(namespace, name)
            module_name, _, attr = target.rpartition(".")
            try:
                rendered = importlib.import_module(target)
            except ImportError:
                rendered = getattr(importlib.import_module(module_name), attr)
            assert rendered is getattr(importlib.import_module(namespace), name), target
            assert f"::: {target}\n" in text


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module):
    """Every ``>>>`` example of the package's docstrings runs and prints what it shows."""
    mod = importlib.import_module(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(mod, module, globs={"js": jaxsynth}):
        if test.examples and test.filename and Path(test.filename).resolve().is_relative_to(
                PACKAGE):
            runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{failed} of {attempted} docstring examples of {module} failed"


RUNNABLE = re.compile(r"<!-- runnable(: new process)? -->\s*```python\n(.*?)```", re.S)
"""A block the tests run: in the test's process, or (``: new process``, for a block that
changes the process's JAX configuration) in a new Python process of its own."""
PAGES = sorted(p for p in DOCS.rglob("*.md") if RUNNABLE.search(p.read_text()))
PYTHON_BLOCK = re.compile(r"^\s*```\s*(?:python|py|pycon)\s*$", re.M)


def test_some_pages_have_runnable_blocks():
    assert PAGES, "no documentation page marks a runnable block"


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=relative)
def test_every_python_block_is_runnable(page):
    """Every Python block of a page is marked ``<!-- runnable -->``, so the test below
    runs it."""
    text = page.read_text()
    unmarked = len(PYTHON_BLOCK.findall(text)) - len(RUNNABLE.findall(text))
    assert not unmarked, (f"{relative(page)}: {unmarked} Python block(s) not marked "
                          "<!-- runnable --> (immediately above the fence)")


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_runnable_page_blocks(page, tmp_path, monkeypatch):
    """The blocks a page marks ``<!-- runnable -->`` run, in order, in one namespace (a
    new process, with ``HOME`` in a temporary folder, where one block asks for it)."""
    monkeypatch.chdir(tmp_path)
    blocks = RUNNABLE.findall(page.read_text())
    if any(alone for alone, _ in blocks):
        env = {k: v for k, v in os.environ.items()
               if k not in ("JAXSYNTH_CACHE_DIR", "JAXSYNTH_NO_CACHE", "XDG_CACHE_HOME")}
        source = "\n".join(code for _, code in blocks)
        subprocess.run([sys.executable, "-c", source], env={**env, "HOME": str(tmp_path)},
                       check=True, timeout=600)
        return
    namespace: dict = {}
    for _, code in blocks:
        exec(compile(code, str(page), "exec", dont_inherit=True), namespace)  # noqa: S102


def test_every_page_is_in_the_nav():
    """``mkdocs build --strict`` refuses a page left out of ``nav``: catch it here first."""
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    title = r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\n:\"']*)"  # quoted, a colon inside, or bare
    listed = set(re.findall(rf"^\s*-\s+(?:{title}:\s+)?(\S+\.(?:md|ipynb))\s*$", nav, re.M))
    pages = {relative(p).removeprefix("docs/") for p in DOCS.rglob("*")
             if p.suffix in (".md", ".ipynb") and "_hooks" not in p.parts}
    assert pages and not pages - listed, f"pages missing from mkdocs.yml nav: {pages - listed}"
    assert not listed - pages - {"api/jaxsynth.md", "api/wasserstein.md"}, listed - pages


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""Control characters other than tab and newline: none belongs in a page or a docstring."""
DAMAGED = re.compile(r"\$[^$]*?(?:\n|\t)(?:ho|au|heta|ext|rac|imes|eq|ar|ot|abla|eta)\b")
"""A TeX command whose backslash became a control character (``\\rho`` written as a
carriage return and ``ho``, ``\\tau`` as a tab and ``au``) inside inline math."""


def test_pages_and_docstrings_hold_no_control_characters():
    texts = [(relative(p), p.read_text()) for p in [ROOT / "README.md", *DOCS.rglob("*.md")]]
    texts += [(where, doc) for path in SOURCES for where, doc in docstrings(path) if doc]
    bad = [where for where, text in texts if CONTROL.search(text) or DAMAGED.search(text)]
    assert not bad, f"control characters or damaged TeX escapes in: {bad}"


def test_the_control_character_check_sees_damage():
    assert CONTROL.search("1 − \rho")
    assert DAMAGED.search("the law's $\nho$ and") and DAMAGED.search("$x\tau$")
    assert not DAMAGED.search("$1-\\rho^2$") and not CONTROL.search("a\tb\nc")


def test_cli_page_holds_every_option():
    """The command-line page, as the hook renders it, holds the help of every command,
    and so every option its parser documents."""
    cli = load_hook("cli")
    rendered = cli.render((DOCS / "guide" / "cli.md").read_text())
    assert not cli.MARKER.search(rendered)
    commands = cli.commands()
    assert set(commands) == {"jaxsynth", *(f"jaxsynth {c}" for c in
                                           ("demo", "simulate", "launch", "rate", "audit"))}
    for command, parser in commands.items():
        assert f"usage: {command} " in rendered, f"{command} has no synopsis on the page"
        missing = [option for option in cli.options(parser) if option not in rendered]
        assert not missing, f"{command}: options missing from the page: {missing}"
    for option in ("--precision", "--max-seeds", "--dry-run", "--quiet", "--precision-control",
                   "--data-array", "--intrinsic-dim", "--platform", "--one-device-per-process"):
        assert option in rendered, option
    assert "--ground" not in cli.options(commands["jaxsynth simulate"])  # hidden former flag


def test_cli_hook_refuses_an_unknown_command():
    with pytest.raises(ValueError, match="jaxsynth simulat"):
        load_hook("cli").render("<!-- cli: jaxsynth simulat -->\n")


def test_rates_page_names_the_intrinsic_dimension_option():
    rendered = load_hook("cli").render((DOCS / "guide" / "rates.md").read_text())
    assert "usage: jaxsynth rate " in rendered and "--intrinsic-dim" in rendered


FIGURES_SCRIPT = DOCS / "figures" / "make.py"


PNG = b"\x89PNG\r\n\x1a\n"


def test_figures_exist_and_their_pages_show_them():
    """Every figure of ``docs/figures/make.py`` is committed and shown by its page (a
    relative link, which ``mkdocs build --strict`` checks), and no other PNG lies there."""
    figures = script(FIGURES_SCRIPT).FIGURES
    assert figures
    for name, (page, _) in figures.items():
        path = DOCS / "figures" / name
        assert path.is_file() and path.read_bytes()[:8] == PNG, f"{name}: run docs/figures/make.py"
        assert f"](../figures/{name})" in (DOCS / page).read_text(), f"{page} does not show {name}"
    assert {p.name for p in (DOCS / "figures").glob("*.png")} == set(figures)


@pytest.mark.slow
def test_figures_script_draws_every_figure(tmp_path):
    """The figures script runs (at its reduced sizes) and writes every figure as a PNG."""
    import matplotlib.image

    figures = script(FIGURES_SCRIPT).FIGURES
    run = subprocess.run([sys.executable, str(FIGURES_SCRIPT), "--small", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in figures:
        image = matplotlib.image.imread(tmp_path / name)
        assert image.ndim == 3 and min(image.shape[:2]) > 200, (name, image.shape)
