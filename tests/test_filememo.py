"""The per-process memo of the grid, GPU, fusion and sizing loaders (engine/language/filememo.py), and
the build's other per-model shortcuts: each must give exactly what the plain computation gives.

A memoized loader is read once per content of its files: an edit between two calls is seen (even
one that keeps the file's size and modification time), an error is raised on every call, and a
caller that changes the dict it got does not change the next caller's."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import polars as pl
import pytest
import sympy

from engine.serving.fronts import load_sizing
from engine.batch.grid import load_grid
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.language.errors import SpecError
from tests.file_helpers import same_stat_edit

REPO = Path(__file__).resolve().parent.parent




def _gpu_copy(tmp_path: Path) -> Path:
    root = tmp_path / "gpus"
    shutil.copytree(REPO / "gpus", root)
    return root


def test_gpus_read_once_per_content(tmp_path):
    root = _gpu_copy(tmp_path)
    first, second = load_gpus(root), load_gpus(root)
    assert first == second and first is not second                 # each caller its own dict
    assert all(first[k] is second[k] for k in first)               # of the same (frozen) GPUs
    first.pop("H100")
    first["extra"] = second["B200"]
    assert "H100" in load_gpus(root) and "extra" not in load_gpus(root)
    # an edit that keeps the size and the modification time is seen: the key is the bytes
    same_stat_edit(root / "h100-sxm.yaml", "hbm_gb: 80 ", "hbm_gb: 81 ")
    assert load_gpus(root)["H100"].hbm.value == 81
    assert second["H100"].hbm.value == 80                          # what a caller holds stays as it was
    # a new file is a new key
    text = (root / "h100-sxm.yaml").read_text().replace("gpu: H100", "gpu: H100-PCIe")
    (root / "h100-pcie.yaml").write_text(text)
    assert "H100-PCIe" in load_gpus(root)
    # and so is the collectives table every GPU carries
    same_stat_edit(root / "collectives" / "nccl.yaml", "base_us: {ring: 6.6,", "base_us: {ring: 7.6,")
    assert load_gpus(root)["H100"].collectives.base["ring"] == pytest.approx(7.6e-6)


def test_bad_gpu_file_fails_on_every_call(tmp_path):
    root = _gpu_copy(tmp_path)
    load_gpus(root)
    path = root / "h100-sxm.yaml"
    good = path.read_text()
    path.write_text(good.replace("hbm_tb_s: 3.35", "hbm_tb_s: -1"))
    lines = []
    for _ in range(2):
        with pytest.raises(SpecError) as err:
            load_gpus(root)
        lines.append(err.value.one_line())
    assert lines[0] == lines[1] and "h100-sxm.yaml:13: hbm_tb_s: -1 TB/s is outside the plausible range" in lines[0]
    path.write_text(good)
    assert load_gpus(root)["H100"].hbm_bw.value == 3.35


def test_gpu_symlink_still_refused(tmp_path):
    root = _gpu_copy(tmp_path)
    load_gpus(root)
    (root / "h100-sxm.yaml").unlink()
    (root / "h100-sxm.yaml").symlink_to(REPO / "gpus" / "h100-sxm.yaml")
    for _ in range(2):
        with pytest.raises(SpecError, match="symbolic link"):
            load_gpus(root)


def test_fusion_tables_read_once_per_content(tmp_path):
    root = tmp_path / "corpus" / "fusion"
    shutil.copytree(REPO / "corpus" / "fusion", root)
    first, second = load_tables(root), load_tables(root)
    assert first == second and first is not second
    assert all(first[k] is second[k] for k in first)
    first.clear()
    assert load_tables(root) == second
    path = root / "vllm.yaml"
    text = path.read_text()
    assert 'version: "0.18.2"' in text
    path.write_text(text.replace('version: "0.18.2"', "version: memo-test", 1))
    assert load_tables(root)["vllm"].version == "memo-test"


def test_grid_and_sizing_read_once_per_content(tmp_path):
    (tmp_path / "corpus").mkdir()
    path = tmp_path / "corpus" / "grid.yaml"
    shutil.copy(REPO / "corpus" / "grid.yaml", path)
    grid, sizing = load_grid(path), load_sizing(path)
    assert load_grid(path) is grid and load_sizing(path) is sizing     # frozen: shared as is
    text = path.read_text()
    assert grid.max_pp == 16 and "  max_pp: 16\n" in text
    same_stat_edit(path, "  max_pp: 16\n", "  max_pp: 13\n")
    assert load_grid(path).max_pp == 13 and grid.max_pp == 16
    assert load_sizing(path) == sizing            # same block, read again: equal
    # a bad edit is one line on every call, then the good file again
    path.write_text(text.replace("  max_pp: 16\n", "  max_pp: zero\n", 1))
    lines = []
    for _ in range(2):
        with pytest.raises(SpecError) as err:
            load_grid(path)
        lines.append(err.value.one_line())
    assert lines[0] == lines[1] and "grid.yaml:" in lines[0] and "max_pp" in lines[0]
    path.write_text(text)
    assert load_grid(path) == grid


def test_long_text_column_same_parquet_bytes():
    """A long-text column gathered from its distinct values (results._series) holds the same values
    and writes the same Parquet bytes as polars' own conversion of the list."""
    from engine.batch.results import LONG_TEXT, _series
    formulas = ["w" * (LONG_TEXT + i) for i in range(3)]
    values = [formulas[i % 3] for i in range(1000)] + [None, formulas[1], "short"]
    ours, plain = _series("f", values, pl.String), pl.Series("f", values, dtype=pl.String)
    assert ours.to_list() == values and ours.dtype == plain.dtype

    def parquet(series):
        buffer = io.BytesIO()
        pl.DataFrame([series]).write_parquet(buffer, compression="zstd", compression_level=9, statistics=True)
        return buffer.getvalue()
    assert parquet(ours) == parquet(plain)


def test_kv_at_is_subs():
    """StructureCache.kv_at: sympy's subs of the expression, memoized per expression and values."""
    from engine.deploy.step_functions import KV_BYTES
    from engine.deploy.structure import LENGTH
    from engine.deploy.structure_cache import StructureCache
    cache = StructureCache(None, {})
    expr = sympy.Max(3 * LENGTH * KV_BYTES / 7, 11 * KV_BYTES) + sympy.Integer(5)
    for length, kv in ((1, 2.0), (4097, 1.0), (4097, 2.0), (1, 2.0)):
        assert cache.kv_at(expr, length, kv) == float(expr.subs({LENGTH: length, KV_BYTES: kv}))
    assert len(cache._kv) == 3


def test_gpu_folder_whose_collectives_is_a_file_falls_back_to_the_repo_table(tmp_path):
    """A GPU folder without its own ``collectives/nccl.yaml`` uses the repo's table, also when
    ``collectives`` is a plain file there (the memo's key reads that path too: a path through a
    file is absent, as ``Path.exists`` says, not an error)."""
    root = tmp_path / "gpus"
    root.mkdir()
    shutil.copy(REPO / "gpus" / "h100-sxm.yaml", root)
    (root / "collectives").write_text("not a folder\n")
    own, repo = load_gpus(root)["H100"], load_gpus(REPO / "gpus")["H100"]
    for op, n, nodes in (("send_recv", 2, 1), ("send_recv", 2, 2), ("all_reduce", 8, 1)):
        assert own.collective_latency(op, n, nodes) == repo.collective_latency(op, n, nodes) > 0
