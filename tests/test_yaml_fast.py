"""engine/language/yamlio.py reads with libyaml's parser under its own Python composer (issue 42: YAML
parsing was most of `archledger deploy`'s CPU). The values must be those PyYAML's pure-Python
reader gives, and the module's limits must still hold on the fast path."""
from __future__ import annotations

import pytest
import yaml

from engine.language import yamlio
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not yamlio._FAST, reason="PyYAML without libyaml: one reader only")


def _same(a, b) -> bool:
    """Equal values, types, key order and the line of every key and item."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return (a.line, a.key_lines, list(a)) == (b.line, b.key_lines, list(b)) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return (a.line, a.item_lines, len(a)) == (b.line, b.item_lines, len(b)) and all(map(_same, a, b))
    return a == b


@pytest.mark.long
def test_every_corpus_and_gpu_file_reads_the_same_with_both_parsers_consistency():
    """Consistency: libyaml + the module's composer against PyYAML's own reader, file by file."""
    files = [p for folder in ("corpus", "gpus") for p in sorted((REPO / folder).rglob("*.yaml"))]
    assert len(files) > 200
    differ = [p.name for p in files
              if not _same(yaml.load(p.read_text(), Loader=yamlio._Loader),        # noqa: S506
                           yaml.load(p.read_text(), Loader=yamlio._FastLoader))]   # noqa: S506
    assert differ == []


def test_the_fast_reader_keeps_the_limits():
    """The composition is the module's (not libyaml's): 65 levels of nesting are refused there too,
    and a dict carries its lines (a plain libyaml load would give a dict without them)."""
    deep = "a: " + "[" * (yamlio.MAX_DEPTH + 1) + "]" * (yamlio.MAX_DEPTH + 1) + "\n"
    with pytest.raises(yamlio._Refused, match="nested more than 64 levels"):
        yaml.load(deep, Loader=yamlio._FastLoader)      # noqa: S506
    value = yaml.load("x: 1\ny:\n  - 2\n", Loader=yamlio._FastLoader)   # noqa: S506
    assert value.key_lines == {"x": 1, "y": 2} and value["y"].item_lines == (3,)


def test_a_file_libyaml_refuses_gets_pyyamls_message(tmp_path):
    """A bad file read through the fast path is re-read by PyYAML for the one-line error (same text
    as before the fast path): an unclosed bracket on line 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\nb: [1, 2\n")
    with pytest.raises(yamlio.SpecError) as caught:
        yamlio.load_yaml(bad, "bad.yaml")
    text = str(caught.value)
    assert text.startswith("bad.yaml:") and "invalid YAML: expected ',' or ']', but got" in text   # libyaml: 'did not find expected'
