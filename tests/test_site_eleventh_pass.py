"""The site render's eleventh pass (issue 42): the results' JSON texts copied where the site writes
them unchanged, not decoded and encoded again.

* ``site_builder.json_cuts.top_level`` walks a compact JSON object's top-level entries, giving each
  entry's span in the text and its decoded value (one value, ``cut``, left undecoded and cut at the
  next key's quote); anything else (white space, a repeated key, trailing text) is refused (None).
* ``site_builder.data.read_formulas`` reads a formula document with its programs as their step
  rows' texts (``RowTexts``), cut from the file's text; ``split_formulas`` renumbers each distinct
  row once. Checked by hand on a document whose programs repeat rows (the numbering is first use,
  program by program, as before) and, on real inputs, against the old path (the document decoded
  whole by json.loads and split row by row): the same index value and file texts, byte for byte.
  A document the cut cannot take (white space, a string in a row) is decoded whole: the same.
* The common file copies its trees' texts (``top_level``'s ``items``: ``Items``, each element's text
  beside it) and finds the tables they read by a regular expression over that text
  (``_lookup_refs``): by hand on awkward trees (the word as a symbol, inside a string, nested
  lookups) and, on real inputs, the same refs as a walk over the decoded trees.
* ``site_builder.json_cuts.json_without`` writes the playground's picks without their graphs by copying
  the other entries' texts: on the build's files it equals ``compact_json`` of the decoded document
  without ``graphs``, and on a non-compact text it falls back to that.
"""
from __future__ import annotations

import json

import pytest

from engine.batch.jsontext import compact_json
from site_builder import data
from site_builder import json_cuts
from site_builder.data import read_formulas, split_formulas
from site_builder.json_cuts import RowTexts, json_without, row_texts, top_level
from tests.site_helpers import H100_PAIR_GRID, H100_PAIR_MODELS, shared_small_site

pytestmark = pytest.mark.xdist_group("site_h100_pair")      # (the small site tests/test_site_numbers.py builds)


def test_top_level_gives_each_entrys_span_and_value():
    """By hand: ``{"a":1,"b":[2,"x"],"c":{"d":null}}`` has its entries at 1, 7 and 21; each span
    is the entry's text; the three joined in braces are the text again."""
    text = '{"a":1,"b":[2,"x"],"c":{"d":null}}'
    entries = top_level(text)
    assert [(name, key, value) for name, key, _, _, value in entries] == [("a", 1, 1), ("b", 7, [2, "x"]),
                                                                        ("c", 19, {"d": None})]
    assert [text[key:end] for _, key, _, end, _ in entries] == ['"a":1', '"b":[2,"x"]', '"c":{"d":null}']
    assert [text[start:end] for _, _, start, end, _ in entries] == ["1", '[2,"x"]', '{"d":null}']
    assert "{" + ",".join(text[key:end] for _, key, _, end, _ in entries) + "}" == text


def test_top_level_cuts_one_value_at_the_next_quote_undecoded():
    text = '{"a":1,"p":[[1,2],[3]],"z":"s"}'
    name, key, start, end, value = top_level(text, cut="p")[1]
    assert (name, value, text[start:end]) == ("p", None, "[[1,2],[3]]")
    last = top_level('{"a":1,"p":[[1,2]]}', cut="p")[-1]            # the last entry: cut at the object's end
    assert last[4] is None and '{"a":1,"p":[[1,2]]}'[last[2]:last[3]] == "[[1,2]]"


@pytest.mark.parametrize("text", ['{"a": 1}', '{ "a":1}', '{"a":1,"a":2}', '{"a":1}x', '[1]', '{"a":}', '{"a":1,}', ""])
def test_top_level_refuses_what_is_not_a_compact_object(text):
    """White space, a repeated key (json.loads keeps its last value), trailing text, not an object,
    a missing value: None (the readers then decode the text whole)."""
    assert top_level(text) is None


def _document(programs: list) -> dict:
    """A formula document (the shape of tests/test_site_data_size.py's) with these programs: one
    config and one option whose prefill is program 0 and decode program 1."""
    trees = ["t0", "t1", "t2", "t3", ["*", "batch", 2]]
    configs = [{"key": "1-tp1-d8", "n_gpus": 1, "config": "tp1", "kv_dev": 4, "weight_formula": 0}]
    options = [{"gpu": "H100", "framework": "vllm", "kv_dtypes": ["bf16"], "config": 0, "prefill": [0], "decode": [1]}]
    return {"format": 1, "configs": configs, "options": options, "programs": programs, "trees": trees,
            "strings": ["s0", "s1", "s2"]}


#: Two rows (22 fields, as the build writes them: trees at 0-4, numbers 5-10, strings 11-21, parts at 20).
ROW_A = [3, 1, 1, 1, 1, 36.0, 0, 0, -1, 0, 0, 2, 0, 0, 0, 1, 1, 1, 1, 1, [1, 2], 0]
ROW_B = [0, 2, 2, 2, 2, 1.0, 0, 1, -1, 2, 1, 1, 2, 2, 2, 0, 0, 0, 0, 0, [], 1]


def test_a_repeated_row_is_renumbered_once_with_the_same_first_use_numbering(tmp_path):
    """By hand: programs [[A, B], [B, A, A]]. First use numbers A's trees 3 -> 0, 1 -> 1, then B's
    0 -> 2, 2 -> 3; A's strings 2 -> 0, 0 -> 1, then B's 1 -> 2 (its 2 is numbered already). So A is
    written [0,1,1,1,1,36.0,0,0,-1,0,0,0,1,1,1] and B [2,3,3,3,3,1.0,0,1,-1,2,1,2,0,0,0] wherever
    they stand, and the shared file holds trees t3, t1, t0, t2 and strings s2, s0, s1. The decoded
    document (its rows encoded: row_texts) and json.loads' split alike."""
    doc = _document([[ROW_A, ROW_B], [ROW_B, ROW_A, ROW_A]])
    path = tmp_path / "f.json"
    path.write_text(compact_json(doc))
    read = read_formulas(path)
    assert isinstance(read["programs"], RowTexts)
    assert read["programs"] == [[compact_json(ROW_A), compact_json(ROW_B)], [compact_json(ROW_B), compact_json(ROW_A),
                                                                            compact_json(ROW_A)]]
    _, files = split_formulas(read)
    a, b = "[0,1,1,1,1,36.0,0,0,-1,0,0,0,1,1,1]", "[2,3,3,3,3,1.0,0,1,-1,2,1,2,0,0,0]"
    assert files["1-tp1-d8"] == '{"programs":[[' + a + "," + b + "],[" + b + "," + a + "," + a + ']],"common":"common"}'
    assert json.loads(files["common"]) == {"trees": ["t3", "t1", "t0", "t2"], "strings": ["s2", "s0", "s1"]}
    assert (split_formulas(read), split_formulas(doc)) == (split_formulas(json.loads(path.read_text())),) * 2


@pytest.mark.parametrize("written", [
    lambda doc: json.dumps(doc, indent=1),                                          # not compact
    lambda doc: compact_json({**doc, "programs": [[ROW_A + ["x"]], [ROW_B]]}),       # a string in a row
    lambda doc: compact_json({k: doc[k] for k in ("programs", "format", "configs", "options", "trees", "strings")}),
])
def test_a_document_the_cut_cannot_take_is_decoded_whole_with_the_same_split(tmp_path, written):
    """A non-compact file and a row holding a string are not cut (their programs decoded and their
    rows encoded again); programs first in the file are cut like any other entry: each splits as
    json.loads' document does."""
    path = tmp_path / "f.json"
    path.write_text(written(_document([[ROW_A, ROW_B], [ROW_B, ROW_A]])))
    read = read_formulas(path)
    whole = json.loads(path.read_text())
    assert read["programs"] == row_texts(whole["programs"])
    assert {k: v for k, v in read.items() if k != "programs"} == {k: v for k, v in whole.items() if k != "programs"}
    assert split_formulas(read) == split_formulas(whole)


def test_programs_that_do_not_join_back_are_not_cut():
    """_cut_rows takes exactly a list of lists of string-free rows of the writer's shape."""
    assert json_cuts.cut_rows("[[[1,[2],3]],[]]") == [["[1,[2],3]"], []]
    for raw in ("[[[1,[2],3]],[]", "[[[1,2,3]]]", '[[[1,["x"],3]]]', "[[[1,[2],3]][]]", "[[1,[2],3]]", "[]x"):
        assert json_cuts.cut_rows(raw) is None, raw


def test_items_give_each_elements_text_as_it_stands():
    text = '{"t":[["+",1,"x"],"lookup",2.5,[]],"u":[]}'
    entries = top_level(text, items="t")
    trees = entries[0][4]
    assert isinstance(trees, json_cuts.Items) and trees == [["+", 1, "x"], "lookup", 2.5, []]
    assert trees.texts == ['["+",1,"x"]', '"lookup"', "2.5", "[]"] == [compact_json(t) for t in trees]
    assert top_level('{"t":[]}', items="t")[0][4].texts == []
    assert top_level('{"t":3}', items="t") is None and top_level('{"t":[1;2]}', items="t") is None


@pytest.mark.parametrize("trees, refs", [
    ([["lookup", 3, "batch", "seq"]], {3}),
    ([["min", ["lookup", 0, "b"], ["lookup", 12, ["lookup", 7, "s"]]]], {0, 12, 7}),   # nested in a coordinate
    ([["+", "lookup", 4], ["*", "lookup", ["lookup"]]], set()),      # the word as a symbol, a node of no ref
    ([["pw", [["lookup", 1, "x"], [">", "x", 0]], ["t_sol", True]]], {1}),
    (["a [\"lookup\",5 b", ['["lookup",6'], ["lookup", 2.5]], set()),    # inside strings; a float is no ref
])
def test_lookup_refs_are_the_lookup_nodes_tables(trees, refs):
    """By hand: the refs of exactly the lists whose first element is the string ``lookup`` and whose
    second is an integer."""
    assert json_cuts.lookup_refs(compact_json(trees)) == refs


def _walked_refs(trees: list) -> set:
    """The oracle: every lookup node's ref, by walking the decoded trees (what the site did before)."""
    found, todo = set(), list(trees)
    while todo:
        t = todo.pop()
        if isinstance(t, list) and t:
            if t[0] == "lookup" and len(t) > 1 and isinstance(t[1], int):
                found.add(t[1])
            todo.extend(t)
    return found


def test_json_without_copies_the_other_entries():
    text = compact_json({"a": [1.0, 1e-05, "é"], "graphs": {"g": [1, 2]}, "z": {"k": None}})
    assert json_without(text, "graphs") == compact_json({"a": [1.0, 1e-05, "é"], "z": {"k": None}})
    assert json_without(text, "absent") == text
    loose = json.dumps({"a": 1, "graphs": 2}, indent=2)
    assert json_without(loose, "graphs") == '{"a":1}'


@pytest.fixture(scope="module")
def small_site(tmp_path_factory):
    return shared_small_site(tmp_path_factory, H100_PAIR_GRID, H100_PAIR_MODELS)


def test_on_the_builds_files_the_copied_texts_equal_the_old_decode_and_encode(small_site):
    """The consistency check on real inputs (the build's own formula and playground files): the
    formula documents are cut (not the fallback), and their split is the old path's (decoded
    whole by json.loads, rows renumbered one by one) byte for byte; each playground file without
    its graphs is compact_json of its decoded document without them."""
    results = small_site / "results"
    formulas = sorted((results / "formulas").glob("*.json"))
    playground = sorted((results / "playground").glob("*.json"))
    assert len(formulas) == len(H100_PAIR_MODELS) and playground
    for path in formulas:
        text = path.read_text()
        assert top_level(text, cut="programs") is not None and json_cuts.cut_rows(
            text[text.index('"programs":') + 11:text.index(',"trees":')]) is not None
        read = read_formulas(path)
        assert isinstance(read["trees"], json_cuts.Items) and read["trees"].texts == [compact_json(t) for t in read["trees"]]
        model, files = split_formulas(read)
        doc = json.loads(text)
        assert json_cuts.lookup_refs(compact_json(doc["trees"])) == _walked_refs(doc["trees"]) != set()
        assert (model, files) == split_formulas(doc), path.name
        _assert_rows_resolve_to_the_documents(doc, model, files)
    for path in playground:
        whole = json.loads(path.read_text())
        assert "graphs" in whole
        assert json_without(path.read_text(), "graphs") == compact_json({k: v for k, v in whole.items() if k != "graphs"})


def _assert_rows_resolve_to_the_documents(doc: dict, model: dict, files: dict[str, str]) -> None:
    """Every option's programs in its config file, resolved through the common file (trees and
    strings by their index there), are the document's own steps: the same trees, numbers and texts
    (the deploy page reads nothing else of a step)."""
    common = json.loads(files[data.COMMON])
    for site_option, option in zip(model["options"], doc["options"]):
        body = json.loads(files[site_option["file"]])
        for phase in ("prefill", "decode"):
            assert len(site_option[phase]) == len(option[phase])
            for local, pid in zip(site_option[phase], option[phase]):
                steps, own = body["programs"][local], doc["programs"][pid]
                assert len(steps) == len(own)
                for step, row in zip(steps, own):
                    assert [common["trees"][i] for i in step[:5]] == [doc["trees"][i] for i in row[:5]]
                    assert step[5:11] == row[5:11]
                    assert [common["strings"][i] for i in step[11:15]] == [doc["strings"][i] for i in row[11:15]]
