"""MkDocs hook: the API reference pages, generated from ``__all__``.

One page per public namespace (``jaxsynth``, ``jaxsynth.wasserstein``), one section per
name of its ``__all__``, each rendered by mkdocstrings from the object's own module, so a
name renamed or added on another branch renders without editing the pages.
``tests/test_docs.py`` checks that every public name has its section.
"""

from __future__ import annotations

import importlib
import inspect
import warnings

# ott-jax imports JAXopt, which warns on import that it is no longer maintained; the
# warning is ott's to act on, and would print a traceback in every documentation build
warnings.filterwarnings("ignore", message="JAXopt is no longer maintained",
                        category=DeprecationWarning)

NAMESPACES = {
    "api/jaxsynth.md": ("jaxsynth", "The names of `jaxsynth.__all__` (`import jaxsynth as js`)."),
    "api/wasserstein.md": (
        "jaxsynth.wasserstein",
        "The names of `jaxsynth.wasserstein.__all__`: W1 by method, and its prepared data.",
    ),
}


def target(namespace: str, name: str) -> str:
    """The dotted path mkdocstrings renders for ``namespace.name``: where it is defined."""
    obj = getattr(importlib.import_module(namespace), name)
    if inspect.ismodule(obj):
        return obj.__name__
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    return f"{namespace}.{name}"  # a constant: griffe follows the import


def page(namespace: str, intro: str) -> str:
    """The Markdown of one reference page: a section per name of ``namespace.__all__``."""
    module = importlib.import_module(namespace)
    lines = [f"# `{namespace}`", "", intro, ""]
    for name in module.__all__:
        lines += [f"## `{namespace}.{name}`", "", f"::: {target(namespace, name)}",
                  "    options:", "      show_root_heading: false", "      heading_level: 3", ""]
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """Every reference page, by its path under ``docs/``."""
    return {path: page(namespace, intro) for path, (namespace, intro) in NAMESPACES.items()}


def on_files(files, config):
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files
