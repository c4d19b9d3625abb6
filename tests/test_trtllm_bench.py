"""benchmarks/trtllm_bench.py: trtllm-bench's batch limits, CUDA-graph padding and request waves,
each against a hand derivation from the TensorRT-LLM source it ports (tuning.py finetune_setting /
calc_engine_setting, model_engine.py _filter_cuda_graph_batch_sizes; provenance in
benchmarks/data/published.yaml ``harness:``), and the data file's harness entries refused when
malformed. No engine, no timing."""
from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest

from engine.language.errors import SpecError
from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("trtllm_bench", REPO / "benchmarks" / "trtllm_bench.py")
tb = sys.modules.setdefault("trtllm_bench", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(tb)
_pspec = importlib.util.spec_from_file_location("benchmarks_published", REPO / "benchmarks" / "published.py")
published = sys.modules.setdefault("benchmarks_published", importlib.util.module_from_spec(_pspec))
if not hasattr(published, "load_points"):
    _pspec.loader.exec_module(published)

#: The perf-overview recipe's cuda_graph_config.batch_sizes (perf-overview.md @ 00f37686).
RECIPE = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192]


@pytest.mark.parametrize("requests, isl, osl, pp, expected", [
    # 551.3 requests: 256 <= bs < 1024 -> 128 x ceil(4.31) = 640; tokens 551.3 x 2 = 1,102.6 < 4,096 -> max(2048, 1280)
    (551.3, 1000, 1000, 1, (640, 2048)),
    # 200: < 256 -> 32 x ceil(6.25) = 224; tokens 200 x (1 + 128/2048) = 212.5 -> 2,048
    (200.0, 128, 2048, 1, (224, 2048)),
    # 10: the floor of 64
    (10.0, 128, 128, 1, (64, 2048)),
    # 5,000 capped at 4,096: >= 1,024 -> 256 x 16 = 4,096; tokens 4,096 x 2 = 8,192 (not < 8,192) -> 1,024 x 8
    (5000.0, 128, 128, 1, (4096, 8192)),
    # 1,500 over pp 2 = 750 -> 128 x 6 = 768; tokens 750 x (1 + 5000/500) = 8,250 -> 1,024 x 9 = 9,216
    (1500.0, 5000, 500, 2, (768, 9216)),
    # tokens capped at 32,768: 3,000 x (1 + 2048/128) = 51,000 -> 32,768
    (3000.0, 2048, 128, 1, (3072, 32768)),
])
def test_finetune_setting_by_hand(requests, isl, osl, pp, expected):
    assert tb.finetune_setting(requests, isl, osl, pp) == expected


def test_engine_setting_by_hand_llama_8b_on_one_h100():
    """Llama-3.1-8B FP8 (8,030,261,248 parameters, 32 layers, 8 KV heads of 128), one H100 (NVML
    81,559 MiB), 128/2048, KV fraction 0.95, FP8 weights and KV (1 byte):
    KV per token 2 x 32 x 8 x 128 = 65,536 B; free (81,559 / 1,024 - 8,030,261,248 / 2^30) GiB
    = 79.6475 - 7.4787 = 72.1688 GiB, x 0.95 = 68.5604 GiB; one request 65,536 x 2,176 B = 0.1328125
    GiB -> 516.2 requests -> max_batch_size 128 x ceil(4.03) = 640; tokens 516.2 x 1.0625 = 548.5 -> 2,048."""
    got = tb.engine_setting(params=8_030_261_248, n_layers=32, n_kv_heads=8, d_head=128, tp=1, pp=1,
                            hbm_mib=81559, input_len=128, output_len=2048, kv_fraction=0.95,
                            weight_bytes=1.0, kv_bytes=1.0)
    assert got == (640, 2048)


def test_engine_setting_counts_one_kv_head_per_tensor_parallel_rank():
    """Qwen3-235B-A22B has 4 KV heads; at tp 8 trtllm-bench counts max(8, 4) = 8 per token, so its
    estimate halves against 4 heads: 8 x 141 GiB-class GPUs, FP8, 1000/1000.
    KV per token 2 x 94 x 8 x 128 = 192,512 B; free 8 x 143,771 / 1,024 - 235,093,634,560 / 2^30
    = 1,123.21 - 218.95 = 904.26 GiB, x 0.95 = 859.05 GiB; a request 192,512 x 2,000 B = 0.35858 GiB
    -> 2,395.7 requests -> 256 x ceil(9.36) = 2,560; tokens 2,395.7 x 2 = 4,791 -> 512 x 10 = 5,120."""
    got = tb.engine_setting(params=235_093_634_560, n_layers=94, n_kv_heads=4, d_head=128, tp=8, pp=1,
                            hbm_mib=143771, input_len=1000, output_len=1000, kv_fraction=0.95,
                            weight_bytes=1.0, kv_bytes=1.0)
    assert got == (2560, 5120)


@pytest.mark.parametrize("max_bs, max_tokens, expected", [
    # cap 640: the sizes up to 512, then the cap itself (1,024 lies above it)
    (640, 2048, (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 640)),
    # cap 4,096 is a listed size: no extra entry
    (4096, 8192, (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096)),
    # cap min(4,096, 2,048 tokens) = 2,048
    (4096, 2048, (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048)),
    # cap 224 between 128 and 256
    (224, 2048, (1, 2, 4, 8, 16, 32, 64, 128, 224)),
])
def test_captured_sizes_by_hand(max_bs, max_tokens, expected):
    assert tb.captured(RECIPE, max_bs, max_tokens) == expected


def test_captured_sizes_shrink_with_draft_tokens():
    # 3 draft tokens: a decode request takes 4 tokens of the 2,048 -> cap 512
    assert tb.captured(RECIPE, 4096, 2048, draft_tokens=3)[-1] == 512


@pytest.mark.parametrize("batch, expected", [(375, 384), (384, 384), (551, 640), (1, 1), (3, 4), (641, 641)])
def test_padded_batch_by_hand(batch, expected):
    sizes = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 640)
    assert tb.padded(batch, sizes) == expected      # 641: above every captured size, eager at its own batch


@pytest.mark.parametrize("requests, limit, expected", [
    (3000, 1688, [1688, 1312]), (3000, 4040, [3000]), (1500, 500, [500, 500, 500]), (1, 7, [1])])
def test_waves_by_hand(requests, limit, expected):
    assert tb.waves(requests, limit) == expected


def test_waves_refuse_an_empty_run():
    with pytest.raises(ValueError):
        tb.waves(0, 8)


_DATA = """\
    harness:
      bench:
        cuda_graph_batch_sizes: [1, 2, 4]
        num_requests: {"128/128": 30000}
    sources:
      s: {title: t, where: w, date: d, checked: c}
    points:
      - id: p
        source: s
        model: meta-llama/Meta-Llama-3.1-8B
        gpu: H100
        gpus: 1
        tp: 1
        framework: trtllm
        harness: bench
        metric: output
        requests_per_gpu: capacity
        derivation: x
        runs:
          - [128, 128, 1000]
"""


def _write(tmp_path, body: str):
    path = tmp_path / "published.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_point_under_a_harness_carries_its_run_settings(tmp_path):
    _, points = published.load_points(_write(tmp_path, _DATA))
    assert points[0].harness == {"name": "bench", "requests": 30000, "batch_sizes": (1, 2, 4)}


@pytest.mark.parametrize("old, new", [
    ("        harness: bench\n", "        harness: other\n"),                          # unknown harness
    ('{"128/128": 30000}', '{"128/2048": 3000}'),                                       # no count for the run
    ("cuda_graph_batch_sizes: [1, 2, 4]", "cuda_graph_batch_sizes: [1, -2]"),           # absurd sizes
])
def test_a_bad_harness_is_one_line_naming_the_field(tmp_path, old, new):
    assert old in _DATA
    with pytest.raises(SpecError) as exc:
        published.load_points(_write(tmp_path, _DATA.replace(old, new)))
    assert exc.value.where.field == "harness"
    assert "\n" not in str(exc.value)
