"""Every script under static/js/ has a role (issue 37: one rule, one place), and no glue script writes
an engine rule a second time.

Roles: an **interpreter** evaluates a rule the Python exports as data (formula.js: formula trees,
rule programs and selection rules; site.js's archFmt: engine/cli/units.py FORMAT); **page glue**
reads the page's data and form, calls an interpreter and writes the DOM (deploy_eval.js and
sizing.js gather the inputs of the rule programs of engine/deploy/rules.py and engine/serving/rules.py
and run them with formula.js); **chart glue** fills and draws the build's chart specs. A new script
fails here until it is given one. Each rule reader's header must name the Python that defines the
rule it reads, and that rule must exist there as data.

The arithmetic check (:func:`engine_arithmetic`) is a heuristic, stated here so a reader can judge
it: in a glue script, with comments removed and string literals blanked, a binary ``+ - * / %`` (or
``+= -= *= /=``) one of whose operands names an engine quantity (a word of :data:`QUANTITY_WORDS`:
ttft, tpot, batch, bytes, kv, tokens, replicas, ...), or a ``Math.max/min/ceil/floor/pow/log/exp/
sqrt/round/abs`` call whose arguments name one, is flagged. Not flagged: string concatenation (an
operand is a string literal), a sort comparator's ``a.f - b.f`` (an order, not a value), and DOM
layout (offsetWidth and the like). What it misses: arithmetic on a quantity held under a neutral
name (``x * y``), or a rule written with comparisons alone (which plan's tie-breaks in sizing.js
are, on purpose: they select, they compute nothing). What it flags that is not a rule is listed in
:data:`ALLOWED` with the reason, line by line, so a new flag fails until it is judged.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

JS = REPO / "static" / "js"

#: script -> (role, the Python the rule it reads or runs lives in, that module's exported rule)
ROLES = {
    "formula.js": ("interpreter", "engine/language/formula_tree.py", "OPS"),       # trees, rule programs, selections
    "site.js": ("interpreter", "engine/cli/units.py", "FORMAT"),               # archFmt; the rest is page glue
    "deploy_eval.js": ("page glue", "engine/deploy/rules.py", "exported"),     # runs the deploy summary's programs
    "sizing.js": ("page glue", "engine/serving/rules.py", "exported"),         # runs the pairing and join programs
    "compare.js": ("page glue", None, None),
    "deploy.js": ("page glue", None, None),
    "gallery.js": ("page glue", None, None),
    "model.js": ("page glue", None, None),
    "playground.js": ("page glue", None, None),
    "charts.js": ("chart glue", None, None),
    "panzoom.js": ("chart glue", None, None),
    "roofline.js": ("chart glue", None, None),
}

#: the words that make an operand an engine quantity (substrings of identifiers, case-insensitive)
QUANTITY_WORDS = ("ttft", "tpot", "batch", "flop", "byte", "kv", "token", "replica", "gpus", "cap", "room",
                  "weight", "second", "time", "rate", "demand", "share", "price", "cost", "usd", "hbm", "peak",
                  "alpha", "bw", "latency", "step", "prefill", "decode", "input", "output", "length", "ctx",
                  "context", "throughput", "bound", "sol", "budget", "mtp", "per_rank", "intensity", "attained")
_LAYOUT = ("offset", "width", "height", "client", "scroll", "px")
_OPERAND = r"[\w.$\]\)]+"
_BINARY = re.compile(r"(" + _OPERAND + r")\s*(\*|/|%|\+(?![+=])|-(?![-=])|[-+*/]=)\s*([\w.$(\[]+)")
_MATH = re.compile(r"Math\.(max|min|ceil|floor|pow|log|exp|sqrt|round|abs)\s*\(([^)]*)")

#: (script, flagged text) -> why it is not an engine rule
ALLOWED = {
    ("sizing.js", "step + d"): "decodeDoubles: the page data's number format (site_builder/sizing.py encode_doubles)",
    ("sizing.js", "bits += step"): "decodeDoubles: the page data's number format",
    ("sizing.js", "s.tpot) / 1000"): "the form's TPOT is typed in ms: seconds for the comparison with the build's",
    ("sizing.js", "r.prefill_batch + (r.prefill_batch"): "text: a count then its noun, singular or plural",
    ("deploy.js", "model.mtp_modules + 1"): "the form's choices of draft tokens: 0 .. the model's MTP modules",
    ("panzoom.js", "1 / STEP"): "a zoom factor (a chart's scale step), no engine quantity",
}


def _code_lines(text: str) -> list[str]:
    """``text`` with comments removed and string literals blanked to ``""``, line by line."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out = []
    for line in text.split("\n"):
        line = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`(?:\\.|[^`\\])*`', '""', line)
        out.append(re.sub(r"//.*", "", line))
    return out


def _quantity(token: str) -> bool:
    return any(w in token.lower() for w in QUANTITY_WORDS)


def _layout(token: str) -> bool:
    return any(w in token.lower() for w in _LAYOUT)


def engine_arithmetic(text: str) -> list[tuple[int, str]]:
    """(line, text) of each arithmetic on an engine quantity in a script (the module doc's heuristic)."""
    found = []
    for n, line in enumerate(_code_lines(text), 1):
        for m in _BINARY.finditer(line):
            a, op, b = m.groups()
            if '""' in (a, b) or a.endswith('""') or b.startswith('""'):
                continue                    # string concatenation
            if op == "-" and "." in a and "." in b and a.split(".", 1)[1] == b.split(".", 1)[1]:
                continue                    # a comparator: a.f - b.f orders, computes nothing
            if _layout(a) or _layout(b):
                continue                    # DOM layout: pixels
            if _quantity(a) or _quantity(b):
                found.append((n, m.group(0)))
        found.extend((n, m.group(0)) for m in _MATH.finditer(line) if _quantity(m.group(2)) and not _layout(m.group(2)))
    return found


def test_every_script_has_a_role():
    scripts = sorted(p.name for p in JS.glob("*.js"))
    assert scripts, JS
    assert sorted(ROLES) == scripts, f"give each new script in static/js/ a role here: {sorted(set(scripts) - set(ROLES))}"


@pytest.mark.parametrize("name", sorted(n for n, r in ROLES.items() if r[1]))
def test_a_rule_reader_names_its_python(name):
    role, source, attribute = ROLES[name]
    assert (REPO / source).is_file(), source
    text = (JS / name).read_text(encoding="utf-8")
    assert source in text, f"static/js/{name} never names {source}, the rule it {'reads' if role == 'interpreter' else 'runs'}"
    module = importlib.import_module(source.removesuffix(".py").replace("/", "."))
    rule = getattr(module, attribute)
    rule = rule() if callable(rule) else rule
    assert isinstance(rule, dict) and rule, (source, attribute)    # data: the page reads it as JSON


@pytest.mark.parametrize("name", sorted(n for n, r in ROLES.items() if r[0] != "interpreter"))
def test_glue_does_no_engine_arithmetic(name):
    """No glue script computes an engine quantity (the module doc's heuristic; ALLOWED: judged not a rule)."""
    flagged = [(n, t) for n, t in engine_arithmetic((JS / name).read_text(encoding="utf-8")) if (name, t) not in ALLOWED]
    assert not flagged, f"static/js/{name} computes engine quantities (export the rule instead): {flagged}"


def test_every_allowance_is_still_needed():
    """An ALLOWED entry whose text is gone is removed (the list says what the check passes over today)."""
    for name, text in ALLOWED:
        assert any(t == text for _, t in engine_arithmetic((JS / name).read_text(encoding="utf-8"))), (name, text)


def test_the_heuristic_flags_ported_rules():
    """The check catches the rules the ports wrote before issue 37 (lines of the old deploy_eval.js and
    sizing.js), and passes string concatenation, a comparator and layout arithmetic."""
    ported = ["var ttft = steps * prefill.step_time_s / cfg.pp;",
              "var perRank = Math.ceil(batch / cfg.dp_attn);",
              "var reps = Math.max(1, Math.ceil(demand[d] / xMax * ROUND));",
              "t.step_time_s += v.sol;",
              "kv_need = perRank * kvDev;"]
    for line in ported:
        assert engine_arithmetic(line), line
    innocent = ['out.textContent = "TTFT " + fmt.time(d.ttft_bound_s) + ", TPOT";',
                "rows.sort(function (p, q) { return p.n_gpus - q.n_gpus; });",
                "var x = room - label.offsetWidth;",
                "// ttft = steps * t / pp (a comment)"]
    for line in innocent:
        assert not engine_arithmetic(line), line


def test_the_grid_batch_rule_is_read_not_written_again():
    """The grid's batch list is the build's rule (GRID_BATCHES) read by formula.js, not a port."""
    text = (JS / "deploy_eval.js").read_text(encoding="utf-8")
    assert "gridBatches" not in text and "archFormula.select(model.grid_batches" in text
