"""The framework's runtime reserve as data (corpus/fusion/<framework>.yaml ``runtime_reserve``):
read with its source, subtracted per GPU before the KV cache gets the rest, by hand.

vLLM sizes its KV cache as gpu_memory_utilization x total - (weights + the profiling run's peak
activations + non-torch memory) (Worker.determine_available_memory); its logs on an H100 show 0.13
GiB of non-torch memory at TP 1 and 0.55 GiB at TP 2 (NCCL and custom all-reduce buffers).
SGLang reserves 512 MiB of metadata, 2 MiB x cuda_graph_max_bs (256) for CUDA graphs and
tp x pp / 8 x 1024 MiB for parallel buffers (ServerArgs._handle_gpu_memory_settings).
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.deploy import Scenario
from engine.deploy.fusion_table import DEFAULT_ROOT, load_table, load_tables
from engine.deploy.parallel import ParallelConfig
from engine.language.errors import SpecError
from tests.conftest import hf_config
from tests.deploy_helpers import deploy

GIB, MIB = 2**30, 2**20
C8 = hf_config("meta-llama/Meta-Llama-3.1-8B")
HID, FF, L, VOCAB = C8["hidden_size"], C8["intermediate_size"], C8["num_hidden_layers"], C8["vocab_size"]
KVH, D = C8["num_key_value_heads"], C8["hidden_size"] // C8["num_attention_heads"]
#: Llama-3.1-8B at BF16: 32 layers of q, o (hidden^2), k, v (hidden x 8 x 128), gate/up/down
#: (hidden x 14336), two norms; embedding and head (vocab x hidden); final norm.
WEIGHTS = 2 * (L * (2 * HID * HID + 2 * HID * KVH * D + 3 * HID * FF + 2 * HID) + 2 * VOCAB * HID + HID)
USABLE = 0.9 * 81_559 * MIB                  # H100: nvidia-smi's 81,559 MiB, --hbm-fraction 0.9
STEP_SET = 3 * 8192 * FF * 2                 # vLLM's largest prefill kernel at 8192 tokens: SiLU-and-mul


def test_llama_8b_capacity_with_the_vllm_reserve_by_hand():
    """Llama-3.1-8B on one H100 under vLLM, 4096-token prompts + 1024 generated:
    KV per request = 2 x 32 layers x 8 heads x 128 x 2 B x 5120 = 671,088,640 B; room =
    76,968,728,985.6 - 16,060,522,496 - 139,586,437.12 (0.13 GiB) - 704,643,072 = 60,063,976,980.48 B;
    capacity floor(60,063,976,980.48 / 671,088,640) = 89 (89.50)."""
    s = deploy("Llama-3.1-8B", "H100", Scenario(1, 4096, 1024), framework="vllm", tp=1).summary
    reserve = 0.13 * GIB
    kv = 2 * L * KVH * D * 2 * (4096 + 1024)
    assert WEIGHTS == 16_060_522_496 and kv == 671_088_640
    assert s["reserve_bytes_per_gpu"] == reserve == 139_586_437.12
    assert s["activation_bytes_per_gpu"] == STEP_SET
    room = USABLE - WEIGHTS - reserve - STEP_SET
    assert s["kv_budget_bytes_per_gpu"] == pytest.approx(room, abs=1e-3)
    assert room == pytest.approx(60_063_976_980.48, abs=1e-3)
    assert s["max_concurrent_requests"] == math.floor(room / kv) == 89


def test_reserve_depends_on_framework_and_group():
    """vLLM: 0.13 GiB alone, + 0.42 GiB of collective buffers once a replica spans two GPUs;
    SGLang: 512 + 512 + 128 x tp x pp MiB; no framework, no reserve."""
    at = {}
    for framework, tp in (("vllm", 1), ("vllm", 2), ("sglang", 1), ("sglang", 8), ("none", 1)):
        at[framework, tp] = deploy("Llama-3.1-8B", "H100", Scenario(1, 4096, 1024), framework=framework,
                                   tp=tp).summary["reserve_bytes_per_gpu"]
    assert at["vllm", 1] == 0.13 * GIB
    assert at["vllm", 2] == (0.13 + 0.42) * GIB
    assert at["sglang", 1] == (512 + 512 + 128) * MIB
    assert at["sglang", 8] == (512 + 512 + 128 * 8) * MIB == 2 * GIB
    assert at["none", 1] == 0.0


def test_every_shipped_figure_has_its_source():
    tables = load_tables()
    assert {"vllm", "sglang"} <= set(tables)
    for table in tables.values():
        assert table.reserve, table.framework
        for entry in table.reserve:
            assert entry.src.strip() and entry.doc.strip(), (table.framework, entry.name)
    vllm = {r.name: r for r in tables["vllm"].reserve}
    assert "gpu_worker.py" in vllm["non_torch"].src and vllm["cuda_graphs"].bytes == 0
    assert vllm["collective_buffers"].for_config(ParallelConfig()) == 0.0


def _table(tmp_path: Path, reserve: str) -> Path:
    path = tmp_path / "fw.yaml"
    path.write_text("framework: fw\nversion: '1'\ndoc: test table\nrules: []\nruntime_reserve:\n" + reserve)
    return path


@pytest.mark.parametrize("reserve, match", [
    ("  - {name: graphs, mib: 512}\n", "runtime_reserve\\[0\\].*missing field 'src'.*add `src:`"),
    ("  - {name: graphs, mib: 512, src: ''}\n", "runtime_reserve\\[0\\].src: expected text, got an empty string"),
    ("  - {name: graphs, src: x.py}\n", "one size in MiB or GiB"),
    ("  - {name: graphs, mib: 1, gib: 1, src: x.py}\n", "one size in MiB or GiB"),
    ("  - {name: graphs, mib: -1, src: x.py}\n", "mib: -1 MiB is outside the plausible range"),
    ("  - {name: graphs, mib: 1, per: node, src: x.py}\n", "unknown scaling"),
    ("  - {name: graphs, mib: 1, src: x.py, when: {arch: sm_90}}\n", "when.arch: unknown field 'arch'"),
    ("  - {name: graphs, mib: 1, src: x.py, bytes: 3}\n", "unknown field 'bytes'"),
    ("  - {name: a, mib: 1, src: x.py}\n  - {name: a, mib: 2, src: y.py}\n", "declared twice"),
])
def test_bad_reserve_is_one_line(tmp_path, reserve, match):
    path = _table(tmp_path, reserve)
    with pytest.raises(SpecError, match=match) as err:
        load_table(path, tmp_path)
    text = str(err.value)
    assert "\n" not in text and "fw.yaml" in text


def test_a_good_entry_reads(tmp_path):
    path = _table(tmp_path, "  - {name: graphs, gib: 0.5, per: tp_pp, src: x.py, when: {min_replica_gpus: 2}}\n")
    (entry,) = load_table(path, tmp_path).reserve
    assert entry.for_config(ParallelConfig(tp=2, pp=2)) == 0.5 * GIB * 4
    assert entry.for_config(ParallelConfig()) == 0.0
    assert DEFAULT_ROOT.name == "fusion"
