# SPDX-License-Identifier: Apache-2.0
"""patches tilelang/0001 + 0002: selecting the TileLang DSpark draft attention.

CPU only, so the device is mocked: ``current_platform`` (is_cuda, device capability) and
FlashInfer's dispatch-table query ``has_flashinfer_sparse_mla_sm120_config`` are patched per
test; the selection code itself is the patched tree's.
- 0001: an explicit TILELANG_SPARSE_SWA_DSV4 maps to DeepseekV4TileLangDraftAttention on SM90+
  (SM90 and SM12x alike), is refused below SM90, and does not change other choices.
- 0002: with no draft backend, SM12x + no FlashInfer (heads, 192) instance selects it with one
  log line; an instance present, another arch, an explicit draft backend or a non-FlashInfer
  target leave the choice alone.
"""

from types import SimpleNamespace
from unittest import mock

import pytest
from vllm.models.deepseek_v4.nvidia import model as dsv4_model
from vllm.models.deepseek_v4.nvidia import tilelang_draft_attn
from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backends.registry import AttentionBackendEnum as Backend
from vllm.v1.worker.gpu.spec_decode.dspark import utils as dspark_utils

TILELANG = Backend.TILELANG_SPARSE_SWA_DSV4


def _vllm_config(backend=None, heads=64, tp=4, n=5, model_type="deepseek_v4"):
    hf = SimpleNamespace(num_attention_heads=heads, sliding_window=128, model_type=model_type)
    spec = SimpleNamespace(
        draft_model_config=SimpleNamespace(hf_config=hf),
        draft_parallel_config=SimpleNamespace(tensor_parallel_size=tp),
        speculator_config=SimpleNamespace(num_draft_query_tokens=n),
    )
    return SimpleNamespace(attention_config=SimpleNamespace(backend=backend), speculative_config=spec)


def _platform(monkeypatch, module, major, minor=0, cuda=True):
    plat = mock.MagicMock()
    plat.is_cuda.return_value = cuda
    plat.get_device_capability.return_value = DeviceCapability(major, minor)
    monkeypatch.setattr(module, "current_platform", plat)
    return plat


@pytest.mark.parametrize("major,minor", [(9, 0), (10, 0), (12, 0), (12, 1)])
def test_explicit_backend_selects_tilelang_class(monkeypatch, major, minor):
    _platform(monkeypatch, dsv4_model, major, minor)
    cls = dsv4_model._select_dsv4_attn_cls(_vllm_config(TILELANG))
    assert cls is tilelang_draft_attn.DeepseekV4TileLangDraftAttention
    assert cls.backend_cls.get_name() == "TILELANG_SPARSE_SWA_DSV4"
    assert TILELANG.get_class() is tilelang_draft_attn.DeepseekV4TileLangDraftBackend


def test_explicit_backend_refused_below_sm90(monkeypatch):
    _platform(monkeypatch, dsv4_model, 8, 9)
    with pytest.raises(ValueError, match="9.0 or newer"):
        dsv4_model._select_dsv4_attn_cls(_vllm_config(TILELANG))


def test_other_choices_unchanged(monkeypatch):
    _platform(monkeypatch, dsv4_model, 12, 0)
    assert dsv4_model._select_dsv4_attn_cls(_vllm_config(None)) is dsv4_model.DeepseekV4FlashInferSM120Attention
    _platform(monkeypatch, dsv4_model, 9, 0)
    assert dsv4_model._select_dsv4_attn_cls(_vllm_config(None)) is dsv4_model.DeepseekV4FlashMLAAttention


def test_draft_layer_contract():
    cls = tilelang_draft_attn.DeepseekV4TileLangDraftAttention
    # native heads: 64/32/16/8 per rank stay as they are (FlashMLA pads them to 64)
    assert [cls.get_padded_num_q_heads(h) for h in (64, 32, 16, 8, 12)] == [64, 32, 16, 8, 16]
    assert cls.use_fp8_ds_mla_layout  # the target's SWA cache spec
    builder = tilelang_draft_attn.DeepseekSparseSWATileLangMetadataBuilder
    assert builder.build_tile_scheduler.__qualname__.startswith("DeepseekSparseSWATileLang")


def _resolve(monkeypatch, major, has_instance, draft=None, target=None, minor=0, **cfg):
    plat = _platform(monkeypatch, __import__("vllm.platforms", fromlist=["x"]), major, minor)
    query = mock.MagicMock(return_value=has_instance)
    monkeypatch.setattr("vllm.utils.flashinfer.has_flashinfer_sparse_mla_sm120_config", query)
    log = mock.MagicMock()
    monkeypatch.setattr(dspark_utils.logger, "info_once", log)
    vllm_config = _vllm_config(target, **cfg)
    spec = vllm_config.speculative_config
    got = dspark_utils._resolve_dspark_attention_backend(spec.draft_model_config, draft, target, vllm_config)
    return got, query, log, plat


@pytest.mark.parametrize("minor", [0, 1])
def test_sm12x_without_instance_selects_tilelang_with_one_log_line(monkeypatch, minor):
    got, query, log, _ = _resolve(monkeypatch, 12, False, minor=minor, heads=64, tp=4)
    assert got is TILELANG
    query.assert_called_once_with(16, 192)  # 64 heads / TP4, index width for N=5
    assert log.call_count == 1 and "TILELANG_SPARSE_SWA_DSV4" in log.call_args[0][0]


def test_sm12x_pads_heads_like_flashinfer(monkeypatch):
    _, query, _, _ = _resolve(monkeypatch, 12, False, heads=64, tp=16, n=7)
    query.assert_called_once_with(8, 192)  # 4 heads pad to FlashInfer's 8


def test_sm12x_with_instance_keeps_target(monkeypatch):
    got, _, log, _ = _resolve(monkeypatch, 12, True, target=Backend.FLASHINFER_MLA_SPARSE_DSV4)
    assert got is Backend.FLASHINFER_MLA_SPARSE_DSV4
    assert not any("TILELANG" in str(c) for c in log.call_args_list)


@pytest.mark.parametrize("major", [9, 10])
def test_never_on_other_archs(monkeypatch, major):
    got, query, _, _ = _resolve(monkeypatch, major, False)
    assert got is None  # the target's (default) choice
    query.assert_not_called()


def test_explicit_draft_backend_wins(monkeypatch):
    got, query, _, _ = _resolve(monkeypatch, 12, False, draft=Backend.FLASHINFER_MLA_SPARSE_DSV4)
    assert got is Backend.FLASHINFER_MLA_SPARSE_DSV4
    query.assert_not_called()


def test_non_flashinfer_target_left_alone(monkeypatch):
    got, _, _, _ = _resolve(monkeypatch, 12, False, target=Backend.FLASHMLA_SPARSE_DSV4)
    assert got is Backend.FLASHMLA_SPARSE_DSV4


def test_not_cuda_left_alone(monkeypatch):
    plat = _platform(monkeypatch, __import__("vllm.platforms", fromlist=["x"]), 12, 0, cuda=False)
    vllm_config = _vllm_config(None)
    spec = vllm_config.speculative_config
    assert dspark_utils._resolve_dspark_attention_backend(spec.draft_model_config, None, None, vllm_config) is None
    assert plat.is_cuda.called
