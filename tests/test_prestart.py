"""The --jobs workers the command starts before it imports the build (engine/batch/prestart.py): a
lone model's two halves run in them, seeded with the build's corpus, and write the bytes a build in
one process writes (a consistency test of the two ways); a build that stops before its pool leaves
no worker behind.

The corpus is the checkout's cut to one small model (as tests/test_build_uptodate.py cuts it); the
previous build's timing is planted above SPLIT_SECONDS so the edit's build runs the halves.
"""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from engine.batch import tasks
from site_builder.cli import main
from tests.test_build_uptodate import SPEC, TINY, corpus  # noqa: F401 (the fixture)


def _build(corpus: Path, out: Path, jobs: str) -> None:
    assert main(["--corpus", str(corpus), "build", "--out", str(out), "--grid", str(TINY), "--quiet",
                 "--no-site", "--jobs", jobs]) == 0


def _files(results: Path) -> dict[str, bytes]:
    return {p.relative_to(results).as_posix(): p.read_bytes() for p in sorted(results.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def test_a_lone_models_halves_in_prestarted_workers_write_what_one_process_writes(corpus, tmp_path):  # noqa: F811
    two, one = tmp_path / "two", tmp_path / "one"
    _build(corpus, two, "1")
    manifest = two / "results" / "manifest.json"
    planted = json.loads(manifest.read_text())
    for entry in planted["models"].values():
        entry["seconds"] = tasks.SPLIT_SECONDS * 2          # so the next build splits the lone model
    manifest.write_text(json.dumps(planted))
    spec = corpus / SPEC
    spec.write_text(spec.read_text() + "\n# edited\n")
    _build(corpus, two, "2")
    _build(corpus, one, "1")
    assert _files(two / "results") == _files(one / "results")
    ran, alone = (json.loads((out / "results" / "manifest.json").read_text())["models"] for out in (two, one))
    assert {m: {k: v for k, v in e.items() if not k.endswith("seconds")} for m, e in ran.items()} == \
        {m: {k: v for k, v in e.items() if not k.endswith("seconds")} for m, e in alone.items()}
    assert not multiprocessing.active_children()


def test_a_build_stopped_before_its_pool_leaves_no_worker(corpus, tmp_path, capsys):  # noqa: F811
    (corpus / SPEC).write_text((corpus / SPEC).read_text().replace("hidden: config.hidden_size", "hidden: [", 1))
    assert main(["--corpus", str(corpus), "build", "--out", str(tmp_path / "out"), "--grid", str(TINY),
                 "--quiet", "--jobs", "2"]) == 2
    assert "error:" in capsys.readouterr().err
    assert not multiprocessing.active_children()
