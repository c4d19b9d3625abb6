"""Where the user stands: the checkout whose ``corpus/``, ``gpus/`` and ``build/`` a command uses.

Layer: engine (below every concern: it imports nothing of the engine). Like mkdocs with the ``mkdocs.yml`` of the current folder, ``archledger`` run
inside a checkout (its root or any folder below it) works on that checkout, not on the tree the
package happens to be installed from. A checkout is a folder holding ``corpus/models/`` and
``gpus/``. Outside any checkout the installed tree's corpus and GPU table are used and output
goes to ``./build``. ``--corpus DIR`` replaces only the corpus (its ``fusion/`` tables and
``grid.yaml`` come with it); ``--out DIR`` replaces only the output folder.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: The tree this package was installed from (an editable install) or shipped in.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
#: The grid the build evaluates when no ``--grid`` is given (engine/batch/grid.py; its ``sizing:``
#: block, engine/serving/fronts.py).
GRID_FILE = PACKAGE_ROOT / "corpus" / "grid.yaml"


def grid_file(corpus_root: Path, given: "Path | str | None" = None) -> Path:
    """The grid a command over ``corpus_root`` uses: ``given`` (``--grid``), else the corpus's own
    grid.yaml (a checkout's, or --corpus), else the installed default."""
    own = Path(corpus_root) / "grid.yaml"
    return Path(given) if given else own if own.exists() else GRID_FILE


def find_checkout(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` that holds ``corpus/models/`` and ``gpus/``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / "corpus" / "models").is_dir() and (folder / "gpus").is_dir():
            return folder
    return None


@dataclass(frozen=True, slots=True)
class Project:
    """The folders one command reads and writes; every path is absolute."""

    #: The checkout the command works on (or the installed tree when run outside any checkout).
    root: Path
    #: Specs, components, tables, snapshots, fusion rules and the default grid.
    corpus: Path
    #: One YAML file per accelerator.
    gpus: Path
    #: Output folder: ``results/`` (Parquet) and ``site/`` (the static site) live here.
    out: Path

    @property
    def fusion(self) -> Path:
        return self.corpus / "fusion"

    @property
    def grid(self) -> Path:
        return self.corpus / "grid.yaml"


def locate(corpus: str | Path | None = None, out: str | Path | None = None,
           cwd: Path | None = None) -> Project:
    """The project for a command started in ``cwd`` with the given ``--corpus`` / ``--out``."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    checkout = find_checkout(cwd)
    root = checkout or PACKAGE_ROOT
    default_out = (checkout or cwd) / "build"
    return Project(root=root,
                   corpus=(cwd / corpus).resolve() if corpus else root / "corpus",
                   gpus=root / "gpus",
                   out=(cwd / out).resolve() if out else default_out.resolve())


#: The cap on one input file's bytes (a corpus YAML, a GPU or measured table, an engine source): the
#: largest corpus YAML is about 31 KB (a modeling-source snapshot); 1 MiB leaves 30x room and still
#: parses in about a second with the pure-Python loader. Every read of an input is bounded by it
#: (engine.language.yamlio, the input hash), so a FIFO or /dev/zero is never read forever.
MAX_FILE_BYTES = 1 << 20
