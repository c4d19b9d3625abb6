"""A process's loaded corpora (engine.language.corpus.load_corpus): the same files from the same folder
are the same Corpus object; any change of a file's bytes or names is a new load.

Expectations are by construction here: an edit planted in a copy must show in the next load (a memo
keyed by the folder alone, or by file times, would hand back the old spec); a link planted after a
load must still be refused (a memo consulted before the link check would publish whatever it names);
a corpus holding a file over the input cap is never hashed, so it is loaded each time.
"""
from __future__ import annotations

import shutil

import pytest

from engine.language.corpus import DEFAULT_ROOT, load_corpus
from engine.language.errors import SpecError
from engine.project import MAX_FILE_BYTES

SPEC = "models/Qwen--Qwen3-8B.yaml"


@pytest.fixture
def copy(tmp_path):
    root = tmp_path / "corpus"
    shutil.copytree(DEFAULT_ROOT, root)
    return root


def test_consistency_the_same_files_load_once(copy):
    first = load_corpus(copy)
    assert load_corpus(copy) is first
    assert load_corpus(copy, missing_snapshots_ok=True) is not first    # another reading of them


def test_an_edit_is_read_and_a_link_is_refused_after_a_load(copy, tmp_path):
    first = load_corpus(copy)
    assert first.models["Qwen/Qwen3-8B"].display_name == "Qwen3 8B"
    spec = copy / SPEC
    text = spec.read_text()
    assert "\nname: Qwen3 8B\n" in text
    spec.write_text(text.replace("\nname: Qwen3 8B\n", "\nname: Qwen3 8X\n"))   # the same size
    edited = load_corpus(copy)
    assert edited is not first and edited.models["Qwen/Qwen3-8B"].display_name == "Qwen3 8X"
    spec.write_text(text)
    assert load_corpus(copy).models["Qwen/Qwen3-8B"].display_name == "Qwen3 8B"
    # a folder swapped for a link to an empty folder outside: the files hashed are the same
    (copy / "extra").mkdir()
    kept = load_corpus(copy)
    (copy / "extra").rmdir()
    (tmp_path / "outside").mkdir()
    (copy / "extra").symlink_to(tmp_path / "outside", target_is_directory=True)
    with pytest.raises(SpecError, match="symbolic link"):
        load_corpus(copy)
    assert kept.models["Qwen/Qwen3-8B"].display_name == "Qwen3 8B"


def test_a_file_over_the_cap_is_not_hashed_and_the_corpus_loads_each_time(copy):
    (copy / "big.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))     # under no folder the loader reads
    first = load_corpus(copy)
    second = load_corpus(copy)
    assert second is not first and sorted(second.models) == sorted(first.models)
