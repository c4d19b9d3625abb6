"""variants.json carries one variant's comparison when its own inputs are unchanged (engine.batch.corpus_tables).

An edit of another model's spec changes the file's corpus-wide digest (the catalog and the uses of
components read every model), so the file is written again; a variant whose base, own file and the
shared inputs are unchanged keeps its entry from the previous file (only its binds' ``used_by`` are
made again), and the file equals a fresh evaluation's byte for byte (a consistency test). A value
planted in the previous file shows which entries were carried: it survives the other model's edit
and is gone after an edit of the variant's base.
"""
from __future__ import annotations

import json
import shutil

from engine.batch import corpus_tables, publish
from engine.language.corpus import load_corpus
from site_builder.sources import REPO

#: the hash of the inputs every model shares (grid, GPU files, engine): any fixed value, the same each call
INPUTS = "0" * 64
BASE = "meta-llama/Meta-Llama-3.1-70B"
NAMES = ("variants.json", "variants.parquet")
PLANTED = -1.0          # no evaluation gives a negative parameter count


def _write(corpus, final, staging):
    staging.mkdir(exist_ok=True)
    corpus_tables.write_variants(corpus, final, staging, INPUTS, REPO / "gpus", [BASE])


def _record(folder, plant: bool = False):
    """Make ``folder`` a previous results tree: its manifest records variants.*; ``plant``: the
    variant's whole-model parameter count replaced by :data:`PLANTED` first."""
    if plant:
        doc = json.loads((folder / "variants.json").read_text())
        doc["variants"][0]["model"]["new"]["params"] = PLANTED
        (folder / "variants.json").write_text(json.dumps(doc, separators=(",", ":")))
    (folder / "manifest.json").write_text(json.dumps({"files": {n: publish.file_digest(folder / n) for n in NAMES}}))


def _params(folder) -> float:
    return json.loads((folder / "variants.json").read_text())["variants"][0]["model"]["new"]["params"]


def _edit(root, model_file: str):
    spec = root / "models" / model_file
    spec.write_text(spec.read_text() + "\n# an edit\n")


def test_a_variant_is_carried_across_another_models_edit_and_evaluated_after_its_bases(tmp_path):
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    first = tmp_path / "first"
    _write(load_corpus(root), tmp_path / "none", first)
    assert json.loads((first / "variants.json").read_text())["variant_hashes"].keys() == {"Llama-3.1-70B-MLA"}
    _record(first)
    planted = tmp_path / "planted"
    shutil.copytree(first, planted)
    _record(planted, plant=True)

    _edit(root, "Qwen--Qwen3-8B.yaml")              # another model: the digest changes, the variant's inputs do not
    edited = load_corpus(root)
    carried, fresh, kept = tmp_path / "carried", tmp_path / "fresh", tmp_path / "kept"
    _write(edited, first, carried)
    _write(edited, tmp_path / "none", fresh)
    assert json.loads((carried / "variants.json").read_text())["hash"] != \
        json.loads((first / "variants.json").read_text())["hash"]
    for name in NAMES:
        assert (carried / name).read_bytes() == (fresh / name).read_bytes(), name
    _write(edited, planted, kept)
    assert _params(kept) == PLANTED                 # carried, not evaluated again
    assert _params(fresh) > 1e10                    # (tens of billions: an evaluation, not the plant)

    _edit(root, "meta-llama--Meta-Llama-3.1-70B.yaml")    # its base: evaluated again
    again = tmp_path / "again"
    _write(load_corpus(root), planted, again)
    assert _params(again) == _params(fresh)
