# SPDX-License-Identifier: Apache-2.0
"""dspark/0001: a DeepSeek-V4 DSpark draft runs its full trained block when
num_speculative_tokens N is smaller, and every consumer of the block size agrees.

CPU only: a real SpeculativeConfig over a mocked draft ModelConfig, and a real
DeepseekSparseSWAMetadataBuilder on CPU tensors (its build() runs Triton kernels,
through the interpreter without CUDA).
"""

from collections import defaultdict
from types import SimpleNamespace
from unittest.mock import MagicMock, patch

import pytest
import torch

BLOCK = 5  # dspark_block_size of DeepSeek-V4-Flash


def make_speculative_config(
    hf_kwargs: dict,
    architecture: str,
    **speculative_kwargs,
):
    """A real SpeculativeConfig over a mocked draft ModelConfig, as upstream's
    tests/config/test_speculative_draft_hf_overrides.py builds it (CPU only,
    no checkpoint)."""
    from transformers import PretrainedConfig
    from vllm.config.parallel import ParallelConfig
    from vllm.config.speculative import SpeculativeConfig

    defaults = dict(
        architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=64
    )
    defaults.update(hf_kwargs)
    hf_config = SpeculativeConfig.hf_config_override(PretrainedConfig(**defaults))
    declared = {
        "Gemma4DSparkModel": (
            "vllm.v1.worker.gpu.spec_decode.dspark.config.DSparkSpeculatorConfig"
        )
    }
    draft = MagicMock(
        hf_config=hf_config,
        architectures=hf_config.architectures,
        max_model_len=128,
        speculator_config_class=declared.get(hf_config.architectures[0]),
    )
    draft.registry.inspect_model_cls.return_value = (None, architecture)
    target = MagicMock(
        model="target", max_model_len=128, quantization=None, hf_overrides={}
    )
    target.hf_config.model_type = hf_kwargs["model_type"]
    target.using_transformers_backend.return_value = False
    speculative_kwargs.setdefault("model", "draft")
    with patch("vllm.config.ModelConfig", return_value=draft):
        return SpeculativeConfig(
            **speculative_kwargs,
            target_model_config=target,
            target_parallel_config=ParallelConfig(),
        )


def dsv4_dspark_config(num_speculative_tokens: int, *, v41: bool = False, block=5):
    """DeepSeek-V4(.1) DSpark (draft weights in the target checkpoint)."""
    model_type = "deepseek_v41" if v41 else "deepseek_v4"
    arch = "DSparkV41DraftModel" if v41 else "DSparkDraftModel"
    return make_speculative_config(
        dict(
            model_type=model_type, num_nextn_predict_layers=3, dspark_block_size=block
        ),
        arch,
        method="dspark",
        num_speculative_tokens=num_speculative_tokens,
    )


@pytest.mark.parametrize("v41", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_short_n_runs_the_trained_block(n, v41):
    spec = dsv4_dspark_config(n, v41=v41)
    cfg = spec.speculator_config
    # Drafts, the Markov loop and verification stay at N ...
    assert spec.num_speculative_tokens == n
    # ... the query block, and so the draft KV written past the target's
    # scheduled tokens, is the trained block.
    assert cfg.num_draft_query_tokens == BLOCK
    assert cfg.num_lookahead_tokens == BLOCK
    # The draft pass holds BLOCK query rows per request.
    assert cfg.max_num_draft_seqs(8192) == 8192 // BLOCK


@pytest.mark.parametrize("n", [5, 7])
def test_n_at_or_above_the_block_is_unchanged(n):
    # Upstream 0.34.0: the query block is N (anchor-as-first-prediction).
    # (Passes on the unpatched tree too: that is the point.)
    cfg = dsv4_dspark_config(n).speculator_config
    assert cfg.num_lookahead_tokens == n
    assert cfg.max_num_draft_seqs(8192) == 8192 // n


def test_other_dspark_drafts_keep_upstream_sizing():
    # Only the DeepSeek-V4 drafts (sparse SWA attention) run the full block.
    spec = make_speculative_config(
        dict(
            model_type="gemma4_text", architectures=["Gemma4DSparkModel"], block_size=5
        ),
        "Gemma4DSparkModel",
        method="dspark",
        num_speculative_tokens=3,
    )
    assert spec.speculator_config.num_lookahead_tokens == 3


def _builder(n: int, window: int, max_tokens: int = 64, device: str = "cpu"):
    from transformers import PretrainedConfig
    from vllm.v1.attention.backends.mla.sparse_swa import (
        DeepseekSparseSWAMetadataBuilder,
    )
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec

    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(
            max_model_len=4096, hf_config=PretrainedConfig(sliding_window=window)
        ),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=max_tokens, max_num_seqs=8
        ),
        speculative_config=dsv4_dspark_config(n),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
    )
    kv_spec = SlidingWindowMLASpec(
        block_size=16,
        num_kv_heads=1,
        head_size=512,
        dtype=torch.bfloat16,
        sliding_window=window,
        cache_dtype_str="auto",
        model_version="deepseek_v4",
    )
    builder = DeepseekSparseSWAMetadataBuilder(
        kv_spec, ["draft.swa"], vllm_config, torch.device(device)
    )
    # The FlashMLA tile-scheduler planner is a compiled op; nothing here reads it.
    builder.build_tile_scheduler = lambda num_tokens: defaultdict(lambda: None)
    return builder, vllm_config


def test_index_width_agrees_across_consumers():
    """Window 60: the block (60 + 5 = 65) needs a 128-wide index row, where
    N (60 + 3 = 63) would give 64 and cut off the block's last two keys."""
    from vllm.models.deepseek_v4.nvidia.flashinfer_sparse import (
        required_sm120_sparse_topk,
    )
    from vllm.v1.attention.backends.mla.compressor_utils import (
        get_dspark_num_query_tokens,
    )
    from vllm.v1.attention.backends.mla.sparse_swa import (
        _COMPUTE_DSPARK_NONCAUSAL_SWA_INDICES_KERNEL as kernel,
    )

    builder, vllm_config = _builder(3, window=60)
    assert get_dspark_num_query_tokens(vllm_config.speculative_config) == BLOCK
    assert builder.noncausal_index_width == 128
    draft_config = SimpleNamespace(
        attention_config=SimpleNamespace(use_non_causal=True),
        speculative_config=vllm_config.speculative_config,
    )
    assert required_sm120_sparse_topk(draft_config, 60) == 128
    warmup_widths = {
        key.index_width
        for key in kernel.get_warmup_keys(
            window_size=60,
            num_query_tokens=get_dspark_num_query_tokens(
                vllm_config.speculative_config
            ),
            block_size=16,
        )
    }
    assert warmup_widths == {128}


def test_decode_threshold_admits_the_draft_block_only():
    builder, _ = _builder(3, window=60)
    # Target verification (causal, 1 + N) is unchanged; the non-causal
    # draft block is a decode at its full length.
    assert builder.decode_threshold == 4
    assert builder.get_decode_threshold(non_causal=False) == 4
    assert builder.get_decode_threshold(non_causal=True) == BLOCK


def test_n_equal_block_builder_matches_upstream(kernel_device):
    # Upstream: threshold 1 + N, width cdiv(window + N, 64) * 64, and the
    # N-token draft block is a decode. (Passes on the unpatched tree too.)
    builder, _ = _builder(BLOCK, window=60, device=kernel_device)
    assert builder.decode_threshold == BLOCK + 1
    assert builder.noncausal_index_width == 128
    cm, _ = _block_metadata(BLOCK, [40, 70], causal=False, device=kernel_device)
    md = builder.build(0, cm)
    assert md.num_decode_tokens == 2 * BLOCK
    assert md.max_decode_query_len == BLOCK
    assert md.decode_swa_lens.tolist() == [40] * BLOCK + [65] * BLOCK


def _block_metadata(num_query: int, seq_lens: list[int], causal: bool, device: str = "cpu"):
    """Metadata as the model runner builds it: tensors on the kernels' device, the
    *_cpu fields on the host (the Triton kernels need device tensors on a GPU)."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    num_reqs = len(seq_lens)
    query_start_loc = torch.arange(num_reqs + 1, dtype=torch.int32) * num_query
    block_table = torch.arange(1, 1 + num_reqs * 8, dtype=torch.int32).view(num_reqs, 8)
    slots = [
        int(block_table[r, pos // 16]) * 16 + pos % 16
        for r, seq_len in enumerate(seq_lens)
        for pos in range(seq_len - num_query, seq_len)
    ]
    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32)
    return (
        CommonAttentionMetadata(
            query_start_loc=query_start_loc.to(device),
            query_start_loc_cpu=query_start_loc.clone(),
            seq_lens=seq_lens_t.to(device),
            seq_lens_cpu_upper_bound=seq_lens_t.clone(),
            num_reqs=num_reqs,
            num_actual_tokens=num_reqs * num_query,
            max_query_len=num_query,
            max_seq_len=max(seq_lens),
            block_table_tensor=block_table.to(device),
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            causal=causal,
        ),
        block_table,
    )


def test_build_treats_the_full_draft_block_as_decode(kernel_device):
    """N = 3, block 5, window 60: two draft requests of 5 query tokens take the
    non-causal decode path, each row indexing the window before the block plus
    the whole block (no key cut off)."""
    builder, _ = _builder(3, window=60, device=kernel_device)
    seq_lens = [40, 70]
    cm, block_table = _block_metadata(BLOCK, seq_lens, causal=False, device=kernel_device)
    md = builder.build(0, cm)

    assert md.num_decodes == 2
    assert md.num_decode_tokens == 2 * BLOCK
    assert md.num_prefill_tokens == 0
    assert md.decode_swa_width == 128
    assert md.max_decode_query_len == BLOCK
    # Request 0: prefix 35 < window, so 35 + 5 keys; request 1: 60 + 5.
    assert md.decode_swa_lens.tolist() == [40] * BLOCK + [65] * BLOCK
    for row in range(BLOCK, 2 * BLOCK):
        start = seq_lens[1] - BLOCK - 60
        want = [
            int(block_table[1, pos // 16]) * 16 + pos % 16
            for pos in range(start, seq_lens[1])
        ]
        got = md.decode_swa_indices[row, 0].tolist()
        assert got[: len(want)] == want
        assert all(i == -1 for i in got[len(want) :])


def test_build_keeps_target_split_for_causal_queries(kernel_device):
    # A causal 5-token query (e.g. a short prefill chunk of the target) is
    # still a prefill at N = 3: the target's decode split is untouched.
    builder, _ = _builder(3, window=60, device=kernel_device)
    cm, _ = _block_metadata(BLOCK, [40, 70], causal=True, device=kernel_device)
    md = builder.build(0, cm)
    assert md.num_decode_tokens == 0
    assert md.num_prefill_tokens == 2 * BLOCK
