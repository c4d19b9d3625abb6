"""What the bad-input test modules share: a corpus copy, the CLI's exit status, and two fixtures.

Import the fixtures into a test module to switch them on there (they are autouse):
``from tests.bad_input_helpers import fresh_api_cache, parse_each_yaml_once  # noqa: F401``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.language import api
from engine.language import yamlio
from engine.cli import main as cli_main
from tests.conftest import REPO


def copy_corpus(tmp_path: Path) -> Path:
    """The real corpus under ``tmp_path/corpus`` (errors say corpus/...); git keeps no empty drafts/."""
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    (root / "components" / "drafts").mkdir(exist_ok=True)
    return root


def cli_status(argv: list[str]) -> int:
    """The CLI's exit status, whether it returns it or (argparse's rejections) exits with it."""
    try:
        return cli_main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.fixture(autouse=True)
def fresh_api_cache():
    """`show` caches loaded corpora per root; never let one case see another's corpus."""
    api._corpus.cache_clear()
    yield
    api._corpus.cache_clear()


_PARSED: dict[tuple, object] = {}


@pytest.fixture(autouse=True)
def parse_each_yaml_once(monkeypatch):
    """Speed only: a file whose exact bytes were parsed before (in another case's copy) is not
    parsed again. The broken file's bytes are new, so its error always comes from the real
    loader (errors are never cached); the loader never mutates what it returns."""
    from engine.language import reader as reader_module   # Reader loads every corpus file
    from engine.verify import evidence
    real = yamlio.load_yaml

    def load_yaml(path, display=None, **options):
        path = Path(path)
        if not path.is_file() or path.stat().st_size > yamlio.MAX_FILE_BYTES:
            return real(path, display, **options)   # devices and oversized files: the real thing
        key = (display, path.read_bytes(), tuple(sorted(options.items())))
        if key not in _PARSED:
            _PARSED[key] = real(path, display, **options)
        return _PARSED[key]

    for module in (yamlio, reader_module, evidence):
        monkeypatch.setattr(module, "load_yaml", load_yaml)
