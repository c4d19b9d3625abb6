"""The GPU table: every accelerator of the reference table, its figures, and clear errors."""
from __future__ import annotations

import re
import shutil

import pytest

from engine.deploy import Scenario
from engine.language.errors import SpecError
from engine.deploy.hardware import load_gpus

from tests.conftest import REPO

#: Vendor datasheet figures, copied into the repo with their sources named (independent of gpus/).
REFERENCE = REPO / "tests" / "reference" / "gpus.md"
# reference row name -> our GPU key(s) carrying it
ROWS = {"A100 SXM": ["A100"], "H100 SXM": ["H100"], "H800 SXM": ["H800"], "H200": ["H200"], "B200": ["B200"],
        "B300 / GB300": ["B300", "GB300-NVL72"], "Rubin": ["Rubin"], "MI300X": ["MI300X"],
        "MI325X": ["MI325X"], "MI355X": ["MI355X"]}


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", cell.replace(",", ""))]


def _reference_rows() -> dict[str, list[str]]:
    assert REFERENCE.exists(), f"reference table missing: {REFERENCE}"
    rows = {}
    for line in REFERENCE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in ROWS:
            rows[cells[0]] = cells
    return rows


def _figures(figure) -> set[float]:
    return {figure.value} | ({figure.alt} if figure.alt is not None else set())


def test_every_reference_gpu_and_gb200_nvl72_is_in_the_table():
    gpus = load_gpus()
    rows = _reference_rows()
    assert set(rows) == set(ROWS)
    for keys in ROWS.values():
        assert set(keys) <= set(gpus)
    assert gpus["GB200-NVL72"].scale_up_domain == 72 and gpus["GB200-NVL72"].arch == "sm_100"


@pytest.mark.parametrize("row", sorted(ROWS))
def test_figures_match_the_reference(row):
    cells = _reference_rows()[row]
    _, arch, bf16, fp8, fp4, hbm, bw, _link = cells
    for key in ROWS[row]:
        gpu = load_gpus()[key]
        assert arch.split()[-1].lower() in (gpu.arch, gpu.arch.replace("_", "")) or gpu.arch == "rubin"
        for cell, dtype in ((bf16, "bf16"), (fp8, "fp8"), (fp4, "fp4")):
            published = _numbers(cell)
            if cell.startswith("—"):
                assert dtype not in gpu.peak or gpu.peak[dtype].estimate, (key, dtype)
                continue
            ours = _figures(gpu.peak[dtype])
            # a range in the reference: both ends recorded (value and alt)
            assert set(published) <= ours or ours & set(published) == ours, (key, dtype, published, ours)
        assert set(_numbers(hbm)[:2]) & _figures(gpu.hbm), (key, hbm)
        assert set(_numbers(bw)[:2]) & _figures(gpu.hbm_bw), (key, bw)


def test_disagreeing_sources_record_both_values():
    gpus = load_gpus()
    assert (gpus["B200"].hbm.value, gpus["B200"].hbm.alt) == (180, 192)
    assert gpus["H800"].scale_up.alt is not None and "DeepSeek" in gpus["H800"].scale_up.note
    assert gpus["Rubin"].peak["bf16"].estimate


def test_units_and_native_dtypes():
    gpus = load_gpus()
    h100, a100, b200 = (gpus[k] for k in ("H100", "A100", "B200"))
    # capacity: the driver's total (nvidia-smi 81559MiB), not the datasheet's decimal 80 GB
    assert h100.hbm_bytes == 81559 * 2**20 == 85_520_809_984 and h100.hbm.value == 80
    # nvidia-smi: H200 143771MiB, B200 183359MiB (NVIDIA/TensorRT-LLM issue 10278), not 141e9 / 180e9
    assert gpus["H200"].hbm_bytes == 143771 * 2**20 == 150_754_820_096
    assert b200.hbm_bytes == 183359 * 2**20 == 192_265_846_784
    assert h100.hbm_bytes_per_s == 3.35e12
    assert h100.scale_up_bytes_per_s == 450e9                 # 900 GB/s both ways -> 450 one way
    assert h100.peak_flops("fp8") == 1979e12
    assert h100.compute_dtype("fp4") == "bf16" and a100.compute_dtype("fp8") == "bf16"
    assert b200.compute_dtype("fp4") == "fp4"


def test_every_gpu_file_states_the_driver_total_or_an_estimate(tmp_path):
    """Capacity is the total the driver reports (hbm_mib); a part with none published says it is an
    estimate and how. Either way the figure lies between the datasheet's decimal GB and its GiB
    (a "192 GB" part reports 183,359 MiB = 192.3e9 B; a "80 GB" A100 80 GiB)."""
    import yaml
    gpus = load_gpus()
    for path in sorted((REPO / "gpus").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())["hbm_mib"]
        assert isinstance(raw, dict) and raw["note"], path.name
        assert raw.get("estimate", False) == raw["note"].startswith("estimate"), path.name
    for key, gpu in gpus.items():
        low, high = min(gpu.hbm.value, gpu.hbm.alt or gpu.hbm.value), max(gpu.hbm.value, gpu.hbm.alt or gpu.hbm.value)
        assert low * 1e9 * 0.99 <= gpu.hbm_bytes <= high * 2**30, key
    assert {k for k, g in gpus.items() if g.hbm_reported.estimate} == {"H800", "MI325X", "MI355X", "Rubin"}
    # the schema refuses a GPU file without the figure, or with a bare number (no source)
    text = (REPO / "gpus" / "h100-sxm.yaml").read_text()
    line = next(l for l in text.splitlines() if l.startswith("hbm_mib:"))
    shutil.copytree(REPO / "gpus", tmp_path / "gpus")
    for bad, said in (("", "missing field 'hbm_mib'"), ("hbm_mib: 81559", "h100-sxm.yaml:12: hbm_mib")):
        (tmp_path / "gpus" / "h100-sxm.yaml").write_text(text.replace(line, bad))
        with pytest.raises(SpecError, match=said):
            load_gpus(tmp_path / "gpus")


def test_adding_a_gpu_is_one_file(tmp_path):
    for path in (REPO / "gpus").glob("*.yaml"):
        shutil.copy(path, tmp_path)
    text = (REPO / "gpus" / "h100-sxm.yaml").read_text()
    (tmp_path / "h100-pcie.yaml").write_text(text.replace("gpu: H100", "gpu: H100-PCIe")
                                             .replace("hbm_tb_s: 3.35", "hbm_tb_s: 2.0"))
    gpus = load_gpus(tmp_path)
    assert gpus["H100-PCIe"].hbm_bytes_per_s == 2.0e12
    from engine.api import evaluate
    from engine.deploy import plan
    from engine.deploy.parallel import ParallelConfig
    ev = evaluate("Llama-3.1-8B")
    slow = plan(ev, gpus["H100-PCIe"], ParallelConfig()).at(Scenario(1, 1024, 16))
    fast = plan(ev, gpus["H100"], ParallelConfig()).at(Scenario(1, 1024, 16))
    assert slow.summary["tpot_s"] == pytest.approx(fast.summary["tpot_s"] * 3.35 / 2.0, rel=1e-3)


@pytest.mark.parametrize("edit,needle", [
    (("hbm_tb_s: 3.35", "hbm_tb_s: -1"), "h100-sxm.yaml:13: hbm_tb_s: -1 TB/s is outside the plausible range"),
    (("peak_tflops: {bf16: 989, fp8: 1979}", "peak_tflops: {bf16: 989, int3: 5}"), "unknown dtype 'int3'"),
    (("peak_tflops: {bf16: 989, fp8: 1979}", "peak_tflops: {fp8: 1979}"), "missing bf16"),
    (("scale_up: {link: NVLink4, gb_s: 900, domain: 8, hw: nvlink}", "scale_up: {link: NVLink4, gb_s: 900, domain: many, hw: nvlink}"),
     "scale_up.domain: expected a whole number, got the string 'many'"),
    (("arch: sm_90", "arch: sm_90\ncolour: green"), "unknown field 'colour'"),
    (("domain: 8, hw: nvlink}", "domain: 8, hw: copper}"), "unknown link class 'copper'"),
])
def test_bad_gpu_files_fail_on_one_line(tmp_path, edit, needle):
    text = (REPO / "gpus" / "h100-sxm.yaml").read_text()
    assert edit[0] in text
    (tmp_path / "h100-sxm.yaml").write_text(text.replace(*edit))
    with pytest.raises(SpecError) as err:
        load_gpus(tmp_path)
    line = err.value.one_line()
    assert needle in line and "\n" not in line and "h100-sxm.yaml:" in line
