"""contracts.json is carried over when its inputs did not change, evaluated again when they did.

The module comparison does not depend on any model spec, so a one-spec rebuild must not pay for it
(it was a tenth of a DeepSeek-V3 edit); a changed contract file, or a damaged previous file, makes
the build evaluate it again.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path


from engine.batch import contract, corpus_tables, publish
from engine.language.corpus import load_corpus

REPO = Path(__file__).resolve().parent.parent
INPUTS = "0" * 64      # the shared inputs' hash: any fixed value, the same each call


def _publish(folder: Path, digest: str) -> None:
    (folder / "manifest.json").write_text(json.dumps(
        {"contracts_hash": digest, "files": {"contracts.json": publish.file_digest(folder / "contracts.json")}}))


def test_contracts_carried_when_unchanged_evaluated_when_changed(tmp_path, monkeypatch):
    corpus_dir = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus_dir)
    corpus = load_corpus(corpus_dir)
    final, again, third, fourth = (tmp_path / n for n in ("final", "again", "third", "fourth"))
    for folder in (final, again, third, fourth):
        folder.mkdir()
    calls = []
    real = contract.evaluate_contracts

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(contract, "evaluate_contracts", counting)

    digest = corpus_tables.write_contracts(corpus, final, final, INPUTS, REPO / "gpus")
    assert len(calls) == 1 and json.loads((final / "contracts.json").read_text())["attention"]["variants"]
    _publish(final, digest)
    # nothing changed: the same bytes, not evaluated
    assert corpus_tables.write_contracts(corpus, final, again, INPUTS, REPO / "gpus") == digest
    assert len(calls) == 1 and (again / "contracts.json").read_bytes() == (final / "contracts.json").read_bytes()
    # the shared inputs changed (an engine, GPU or component edit): evaluated
    assert corpus_tables.write_contracts(corpus, final, third, "1" * 64, REPO / "gpus") != digest
    assert len(calls) == 2
    # a contract file changed: evaluated, and the change shows
    spec = corpus_dir / "contracts" / "attention" / "contract.yaml"
    spec.write_text(spec.read_text().replace("batch: 1\n", "batch: 2\n"))
    changed = load_corpus(corpus_dir)
    assert corpus_tables.write_contracts(changed, final, fourth, INPUTS, REPO / "gpus") != digest
    assert len(calls) == 3 and json.loads((fourth / "contracts.json").read_text())["attention"]["batch"] == 2


def test_damaged_previous_contracts_are_evaluated_again(tmp_path, monkeypatch):
    corpus = load_corpus()
    final, again = tmp_path / "final", tmp_path / "again"
    final.mkdir(), again.mkdir()
    digest = corpus_tables.write_contracts(corpus, final, final, INPUTS, REPO / "gpus")
    _publish(final, digest)
    (final / "contracts.json").write_text("{}")
    corpus_tables.write_contracts(corpus, final, again, INPUTS, REPO / "gpus")
    assert json.loads((again / "contracts.json").read_text())["attention"]["variants"]


def test_a_second_fresh_folder_gets_the_same_contracts_without_evaluating_them(tmp_path, monkeypatch):
    """Per process, contracts.json's text is kept by its inputs' digest (the carry's key): a build
    into another fresh folder writes the same bytes and evaluates nothing; other inputs evaluate again."""
    from engine.batch import contract
    corpus = load_corpus()
    first, second, third = (tmp_path / n for n in ("a", "b", "c"))
    for d in (first, second, third):
        d.mkdir()
    digest = corpus_tables.write_contracts(corpus, first / "none", first, "2" * 64, REPO / "gpus")
    calls = []
    real = contract.evaluate_contracts
    monkeypatch.setattr(contract, "evaluate_contracts", lambda *a: calls.append(a) or real(*a))
    assert corpus_tables.write_contracts(corpus, second / "none", second, "2" * 64, REPO / "gpus") == digest
    assert (second / "contracts.json").read_bytes() == (first / "contracts.json").read_bytes() and not calls
    corpus_tables.write_contracts(corpus, third / "none", third, "3" * 64, REPO / "gpus")
    assert len(calls) == 1
