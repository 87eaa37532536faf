# SPDX-License-Identifier: Apache-2.0
"""Shared builders for the DSpark patch tests (imported by the tests)."""

from unittest.mock import MagicMock, patch


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
        dict(model_type=model_type, num_nextn_predict_layers=3, dspark_block_size=block),
        arch,
        method="dspark",
        num_speculative_tokens=num_speculative_tokens,
    )
