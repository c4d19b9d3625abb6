"""Every script under static/js/ has a role (issue 37: one rule, one place): an interpreter of a rule
the Python exports as data, a port that still writes an engine rule a second time (each named with the
Python it mirrors, until it is exported), or page glue (reads, fetches, draws; no engine rule). A new
script fails here until it is given one, so a rule cannot be written again in JavaScript unnoticed.

Each interpreter's rule is looked up in the engine (it must exist, as data) and the script's own
header must name the Python that defines it; a port's header names what it mirrors.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

JS = REPO / "static" / "js"

#: script -> (role, the Python the rule lives in, the exported rule's module attribute or None)
ROLES = {
    "formula.js": ("interpreter", "engine/spec/formula_tree.py", "OPS"),         # formula trees and selection rules
    "site.js": ("interpreter", "engine/cli/units.py", "FORMAT"),                # archFmt; the rest is page glue
    "deploy_eval.js": ("port", "engine/deploy/sol.py", None),                   # summarize's capacity, schedule, TTFT/TPOT
    "sizing.js": ("port", "engine/serving/pairing.py", None),                   # pair_points, prefill_choice; disagg.join
    "charts.js": ("glue", None, None),
    "compare.js": ("glue", None, None),
    "deploy.js": ("glue", None, None),
    "gallery.js": ("glue", None, None),
    "model.js": ("glue", None, None),
    "panzoom.js": ("glue", None, None),
    "playground.js": ("glue", None, None),
    "roofline.js": ("glue", None, None),
}


def test_every_script_has_a_role():
    scripts = sorted(p.name for p in JS.glob("*.js"))
    assert scripts, JS
    assert sorted(ROLES) == scripts, f"give each new script in static/js/ a role here: {sorted(set(scripts) - set(ROLES))}"


@pytest.mark.parametrize("name", sorted(n for n, r in ROLES.items() if r[0] != "glue"))
def test_a_rule_reader_names_its_python(name):
    role, source, attribute = ROLES[name]
    assert (REPO / source).is_file(), source
    text = (JS / name).read_text(encoding="utf-8")
    assert source in text, f"static/js/{name} never names {source}, the rule it {'reads' if role == 'interpreter' else 'mirrors'}"
    if role == "interpreter":        # the rule is data the Python exports (JSON: the page reads it as is)
        module = importlib.import_module(source.removesuffix(".py").replace("/", "."))
        assert isinstance(getattr(module, attribute), dict), (source, attribute)


def test_the_grid_batch_rule_is_read_not_written_again():
    """The grid's batch list is the build's rule (GRID_BATCHES) read by formula.js, not a port."""
    text = (JS / "deploy_eval.js").read_text(encoding="utf-8")
    assert "gridBatches" not in text and "archFormula.select(model.grid_batches" in text
