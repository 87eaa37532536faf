# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""DeepSeek-V4 DSpark draft attention through a TileLang kernel.

Selected for the draft only (``speculative_config.attention_backend =
TILELANG_SPARSE_SWA_DSV4``). The draft's layers are SWA-only decode layers;
this class keeps the target's KV cache spec (fp8_ds_mla SWA pages, so KV
groups and the fused insert ops are unchanged) and replaces the decode call
with ``dspark_draft_attention``, which reads the paged cache in place and
needs neither FlashMLA nor a FlashInfer (heads, 192) decode instance.
"""

from typing import TYPE_CHECKING, ClassVar, cast

import torch

from vllm.forward_context import get_forward_context
from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention
from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLABackend
from vllm.v1.attention.backend import AttentionCGSupport
from vllm.v1.attention.backends.mla.sparse_swa import (
    DeepseekSparseSWABackend,
    DeepseekSparseSWAMetadataBuilder,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWAMetadata


class DeepseekV4TileLangDraftBackend(DeepseekV4FlashMLABackend):
    """Name of the draft backend; the draft's SWA-only layers own no KV cache."""

    @staticmethod
    def get_name() -> str:
        return "TILELANG_SPARSE_SWA_DSV4"


class DeepseekSparseSWATileLangMetadataBuilder(DeepseekSparseSWAMetadataBuilder):
    """SWA metadata for the TileLang draft decode: varlen, no FlashMLA planner."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.ALWAYS

    def build_tile_scheduler(self, num_decode_tokens: int) -> dict:
        # The TileLang kernel needs no tile scheduler; skipping it also keeps
        # FlashMLA out of the draft on arches that do not have it.
        return dict.fromkeys(super().build_tile_scheduler(0))


class DeepseekSparseSWATileLangBackend(DeepseekSparseSWABackend):
    @staticmethod
    def get_builder_cls() -> type[DeepseekSparseSWATileLangMetadataBuilder]:
        return DeepseekSparseSWATileLangMetadataBuilder


def round_up_to_8(num_heads: int) -> int:
    return -(-num_heads // 8) * 8


class DeepseekV4TileLangDraftAttention(DeepseekV4FlashMLAAttention):
    """DSpark draft layer: SWA-only decode via the TileLang kernel.

    Native head counts (8/16/32/64 per rank; others rounded up to 8, not 64),
    the FlashMLA layer's output projection, same fp8_ds_mla SWA cache.
    """

    backend_cls = DeepseekV4TileLangDraftBackend
    swa_backend_cls = DeepseekSparseSWATileLangBackend
    use_fp8_ds_mla_layout: ClassVar[bool] = True

    def __init__(self, vllm_config: "VllmConfig", *args, **kwargs) -> None:
        super().__init__(vllm_config, *args, **kwargs)
        from vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_tilelang import (
            _DSPARK_DRAFT_ATTN_TILELANG_KERNEL,
            dspark_live_slots,
            fp8_ds_mla_page_bytes,
        )
        from vllm.platforms import current_platform
        from vllm.v1.attention.backends.mla.compressor_utils import (
            get_dspark_num_query_tokens,
            get_dspark_swa_index_width,
        )

        if self.compress_ratio > 1:
            raise ValueError(
                "TILELANG_SPARSE_SWA_DSV4 serves only the SWA-only DSpark draft "
                f"layers, got compress_ratio={self.compress_ratio}"
            )
        spec_config = vllm_config.speculative_config
        if spec_config is None or not spec_config.use_dspark():
            raise ValueError(
                "TILELANG_SPARSE_SWA_DSV4 is a DSpark draft backend: select it "
                "with speculative_config.attention_backend"
            )
        self.num_draft_queries = get_dspark_num_query_tokens(spec_config)
        self.swa_index_width = get_dspark_swa_index_width(
            self.window_size, self.num_draft_queries
        )
        # the index kernel's lens are at most this (sizes small batches' splits)
        self.live_slots = dspark_live_slots(self.window_size, self.num_draft_queries)
        if vllm_config.kernel_config.enable_jit_warmup:
            capability = current_platform.get_device_capability()
            assert capability is not None
            _DSPARK_DRAFT_ATTN_TILELANG_KERNEL.register_warmup(
                num_heads=self.padded_heads,
                num_queries=self.num_draft_queries,
                block_size=self.swa_cache_layer.block_size,
                page_bytes=fp8_ds_mla_page_bytes(self.swa_cache_layer.block_size),
                scale=float(self.scale),
                capability=(capability.major, capability.minor),
                window_size=self.window_size,
            )

    @classmethod
    def get_padded_num_q_heads(cls, num_heads: int) -> int:
        return round_up_to_8(num_heads)

    def forward_mqa(
        self,
        q: torch.Tensor,
        kv: torch.Tensor,
        positions: torch.Tensor,
        output: torch.Tensor,
    ) -> None:
        from vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_tilelang import (
            dspark_draft_attention,
        )

        attn_metadata = get_forward_context().attn_metadata
        if attn_metadata is None:
            # Warmup dummy run: nothing to read yet.
            output.zero_()
            return
        assert isinstance(attn_metadata, dict)
        swa_metadata = cast(
            "DeepseekSparseSWAMetadata | None",
            attn_metadata.get(self.swa_cache_layer.prefix),
        )
        assert swa_metadata is not None
        if swa_metadata.num_prefills > 0:
            raise NotImplementedError(
                "TILELANG_SPARSE_SWA_DSV4 runs the DSpark draft decode only; "
                f"got {swa_metadata.num_prefills} prefill requests"
            )
        num_tokens = swa_metadata.num_decode_tokens
        if num_tokens == 0:
            return
        indices = swa_metadata.decode_swa_indices
        assert indices is not None and swa_metadata.decode_swa_lens is not None
        if indices.shape[-1] != self.swa_index_width:
            # Causal (per-token) windows differ per query; the kernel shares one
            # index list per request, which only the non-causal draft has.
            raise ValueError(
                "expected DSpark non-causal SWA indices of width "
                f"{self.swa_index_width}, got {indices.shape[-1]}"
            )
        swa_cache = self.swa_cache_layer.kv_cache
        dspark_draft_attention(
            q[:num_tokens],
            swa_cache,
            indices[:num_tokens],
            swa_metadata.decode_swa_lens[:num_tokens],
            self.attn_sink,
            output[:num_tokens],
            num_queries=self.num_draft_queries,
            scale=self.scale,
            block_size=self.swa_cache_layer.block_size,
            page_bytes=swa_cache.stride(0) * swa_cache.element_size(),
            live_slots=self.live_slots,
        )
