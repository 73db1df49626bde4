"""The mechanisms know nothing of W1: no module under jaxsynth/mechanisms imports the
W1 package (they emit metric-free level statistics; the tree W1 method weighs them)."""

import re
from pathlib import Path

import jaxsynth.mechanisms

PATTERN = re.compile(r"jaxsynth\.wasserstein|from\s+jaxsynth\s+import\s+[^\n]*\bwasserstein\b")


def test_no_module_under_mechanisms_imports_the_w1_package():
    root = Path(jaxsynth.mechanisms.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) >= 5  # the package was found
    hits = [f"{p.name}:{i}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if PATTERN.search(line)]
    assert hits == []
