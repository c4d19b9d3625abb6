"""The site render's tenth pass (issue 42): one compact JSON encoder, and each page group fsynced
while the next ones render.

* ``engine.batch.jsontext.compact_json`` is the one encoder of the results' JSON and the site's
  data (``site_builder.data.compact_json`` is that object): its text is ``json.dumps(value,
  separators=(",", ":"))``'s, byte for byte, on hand-picked values whose text differs between
  encoders (floats of every magnitude and their exponent forms, NaN and the infinities, integers
  past 64 bits, non-ASCII and control characters, non-string keys, tuples); a cyclic value is
  refused, as json.dumps refuses it; importing it brings no evaluation into a render (no sympy).
* ``engine.batch.publish.Presync`` fsyncs every file it is handed before :meth:`close` returns,
  raises nothing (a missing file is the publish's own fsync to report) and queues nothing after
  it is closed; ``site_builder.render._presync_group`` hands it a worker's group only when the
  group was written there (not a cancelled or failed future); and a render with a worker process
  presyncs exactly the files its page groups wrote (the site manifest's records), whichever
  process rendered each group.
"""
from __future__ import annotations

import json
import math
import multiprocessing
import subprocess
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import pytest

from engine.batch import publish
from engine.batch.jsontext import compact_json
from site_builder import data, render
from site_builder.render import render_pages
from tests.site_helpers import build_small_site

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"

#: Values whose JSON text depends on the encoder's choices (each checked against json.dumps)
AWKWARD = [
    0.0, -0.0, 1.0, 0.1, 1e-4, 9.99e-5, 1.0199999999999999e-05, 1e-7, 5e-324, 1e15, 1e16, 1.5e16,
    312000000000000.0, 2.1217570310597217e+28, -1.7976931348623157e308,
    math.nan, math.inf, -math.inf,
    2 ** 63, 2 ** 64 + 1, -(2 ** 70), 21217570310597216825451279360, True, False, None,
    "plain", "é ü 漢字 😀", "tab\tnew\nline\x00\x1f\x7f", 'quote " and \\ backslash', "</script>",
    {1: "int key", 2.5: "float key", True: "bool key", None: "none key"},
    (1, 2, (3, 4)), [], {}, [[[]]],
]


def test_compact_json_is_json_dumps_text_byte_for_byte():
    """The consistency check: every awkward value, alone and nested, gives json.dumps' text."""
    for value in AWKWARD + [AWKWARD, {"all": AWKWARD, "nested": {"x": AWKWARD[:5]}}]:
        assert compact_json(value) == json.dumps(value, separators=(",", ":")), value


def test_the_site_writes_with_the_engines_encoder():
    assert data.compact_json is compact_json


def test_a_cyclic_value_is_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises((ValueError, RecursionError)):
        compact_json(loop)


def test_the_encoder_brings_no_evaluation_into_a_render():
    """site_builder.data imports the encoder, and with it no sympy (engine.batch.export would)."""
    code = "import sys, site_builder.data; print('sympy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "False"


@pytest.fixture
def synced(monkeypatch) -> list[Path]:
    """The paths publish._fsync was called on (the real fsync still runs)."""
    calls: list[Path] = []
    real = publish._fsync

    def record(path, directory=False):
        calls.append(Path(path))
        real(path, directory)
    monkeypatch.setattr(publish, "_fsync", record)
    return calls


def test_presync_fsyncs_every_file_before_close_and_raises_nothing(tmp_path, synced):
    files = [tmp_path / f"f{i}.json.gz" for i in range(40)]
    for f in files:
        f.write_bytes(b"x")
    presync = publish.Presync(threads=3)
    presync.add(files[:25])
    presync.add(iter(files[25:]))                  # any iterable, a generator too
    presync.add([tmp_path / "gone.json.gz"])       # missing: left to the publish's own fsync
    presync.close()
    assert sorted(synced) == sorted(files + [tmp_path / "gone.json.gz"])
    presync.add(files)                              # closed: nothing queued, nothing raised
    assert len(synced) == len(files) + 1


def test_a_group_is_presynced_only_when_a_worker_wrote_it(tmp_path):
    handed: list[list[Path]] = []

    class Recorder:
        def add(self, paths):
            handed.append(list(paths))

    done, cancelled, failed = Future(), Future(), Future()
    done.set_result(["models/a/index.html", "data/deploy/a/index.json.gz"])
    cancelled.cancel()
    failed.set_exception(RuntimeError("render failed"))
    for future in (done, cancelled, failed):
        render._presync_group(Recorder(), tmp_path, future)
    assert handed == [[tmp_path / "models/a/index.html", tmp_path / "data/deploy/a/index.json.gz"]]


def test_a_render_with_a_worker_presyncs_exactly_what_its_groups_wrote(tmp_path, synced):
    """Two models on the tiny grid, their groups offered to a worker process; whoever rendered each
    group, the files presynced before render_pages returned are those the site manifest records."""
    import yaml
    (tmp_path / "built").mkdir()
    out = build_small_site(tmp_path / "built", yaml.safe_load(TINY.read_text()), ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"])
    staging = tmp_path / "staging"
    synced.clear()
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as workers:
        render_pages(out / "results", staging, workers=workers)
        presynced = set(synced)
    manifest = json.loads((staging / render.SITE_MANIFEST).read_text())
    written = {staging / rel for group in manifest["groups"].values() for rel in group["files"]}
    assert written and presynced == written
