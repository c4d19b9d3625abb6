"""The per-model documents' shortcuts give what the plain code gives.

* :func:`engine.batch.deploy_export.document_json` encodes each distinct step row of the formula
  document once: its text equals ``json.dumps(doc, separators=(",", ":"))`` (what the build wrote
  before) on real corpus exports (consistency test), and on documents that do not share their rows
  or hold other shapes;
* :func:`engine.batch.deploy_export.model_export` keys a program by its rows' numbers among the
  distinct rows and shares one list per distinct row: the programs are still distinct by content
  and every program's rows are the rows of its steps;
* :func:`engine.batch.export.model_document` prints an op's output sizes with the document's memo
  printer and a cache row's formula once for all its lengths: the texts are ``str()``'s.
"""
from __future__ import annotations

import json

import pytest
import yaml

# two GPU types (two archs), two GPU counts: several configs, regimes and frameworks share rows
GRID = {
    "doc": "Tiny grid for tests/test_export_speed3.py.",
    "gpus": ["H200", "B200"], "gpu_counts": [1, 2, 8, 16], "beyond_fit": 2,
    "parallel": {"max_pp": 2, "cp": [1], "ep": ["tp"], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 1},
    "frameworks": ["vllm", "sglang"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [4096], "beyond_max_context": 1, "output_lengths": [256], "batches": [1, 64]},
    "ops": {"kv_dtypes": [], "points": []},
}


def _plain(value) -> str:
    return json.dumps(value, separators=(",", ":"))


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    from engine.batch.grid_eval import evaluate_model
    from engine.language.api import evaluate
    path = tmp_path_factory.mktemp("export-speed3") / "grid.yaml"
    path.write_text(yaml.safe_dump(GRID, sort_keys=False))
    out = {}
    for model in ("Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-V3"):     # DeepSeek-V3: MTP draft programs too
        doc: dict = {}
        evaluate_model(evaluate(model), path, export=doc)
        out[model] = doc
    return out


def test_document_json_consistency_with_json_dumps(docs):
    from engine.batch.deploy_export import document_json
    for model, doc in docs.items():
        rows = [r for p in doc["programs"] for r in p]
        assert len({id(r) for r in rows}) < len(rows), model      # rows are shared: the memo is used
        assert document_json(doc) == _plain(doc), model
    assert "mtp" in docs["deepseek-ai/DeepSeek-V3"]["options"][0]


def test_document_json_of_other_documents_is_json_dumps():
    from engine.batch.deploy_export import document_json
    row = [1, 2.5, -0.0, float("inf"), "é\n\"", None, True]
    docs = [
        {},
        {"programs": []},
        {"programs": [[row, row], [list(row)], [], [tuple(row)], "text", 3, {"a": [1]}], "trees": [[1, "x"]]},
        {"a": 1, "programs": {"k": [row]}, "z": [row, row]},
        {1: "int key", "programs": [[row]]},              # a key the encoder converts
        {"programs": [[1.0, 1, True], [1, 1.0, True]], "strings": ["ü", "\u2028"]},
    ]
    for doc in docs:
        assert document_json(doc) == _plain(doc), doc


def test_programs_keyed_by_row_numbers_are_distinct_rows_of_their_steps(docs):
    for model, doc in docs.items():
        programs = [tuple(tuple(r) for r in p) for p in doc["programs"]]
        assert len(set(programs)) == len(programs), model          # one index per distinct program
        by_content: dict = {}
        for p in doc["programs"]:
            for r in p:
                assert isinstance(r, list) and len(r) == 22
                assert by_content.setdefault(tuple(r), r) is r, model   # equal rows: one shared list
        # a step's row is the plain row of the module doc: tree and string indices in range
        for p in doc["programs"]:
            for r in p:
                assert all(0 <= r[i] < len(doc["trees"]) for i in range(5))
                assert all(0 <= r[i] < len(doc["strings"]) for i in (*range(11, 20), 21))
                assert all(0 <= i < len(doc["strings"]) for i in r[20])       # parts: the members' uids
                assert isinstance(r[5], float) and all(isinstance(r[i], int) for i in range(6, 11))


@pytest.mark.parametrize("model", ["Qwen/Qwen3-8B", "nvidia/Nemotron-H-56B-Base-8K"])
def test_model_document_texts_consistency_with_str(model):
    """The model document prints an op's output sizes with its memo printer and a cache row's
    formula once for all its lengths: the texts are ``str()``'s, as before."""
    from engine.batch.export import SPLIT_LENGTHS, model_document
    from engine.language import kv
    from engine.language.api import evaluate
    ev = evaluate(model)
    doc = model_document(ev)
    for entry in doc["ops"]:
        assert entry["out_sizes"] == [str(a.size) for a in ev.numeric.rows[entry["uid"]].out.axes]
    split = doc["kv_split"]
    assert split["lengths"] == list(SPLIT_LENGTHS)
    total = kv.bytes_per_request(ev.symbolic)
    assert [q["formula"] for q in split["total"]] == [str(total)] * len(SPLIT_LENGTHS)
    assert [q["value"] for q in split["total"]] == [int(kv.bytes_per_request(ev.numeric, n)) for n in SPLIT_LENGTHS]
    for part in kv.PARTS:
        assert {q["formula"] for q in split["parts"][part]} == {str(kv.bytes_per_request(ev.symbolic, part=part))}
