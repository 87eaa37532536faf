# SPDX-License-Identifier: Apache-2.0
"""What each stage need ("needs" in stage.py) puts into the pack.

The GPU machine has Python 3.12, torch, Triton, numpy and pytest but no vLLM, none of
vLLM's other dependencies and no network. Wheels are CPython 3.12 manylinux builds, pinned
to versions seen to work there (2026-12-02); the preparation step downloads them once into
its cache.
"""

WHEELS: dict[str, tuple[str, ...]] = {
    # what vllm.v1.worker.gpu (sampler, spec decode, async utils) imports on the way
    "vllm-sampler-deps": (
        "pydantic==2.14.4",
        "pydantic_core==2.50.5",
        "annotated-types==0.8.0",
        "typing-inspection==0.4.5",
        "pyzmq==27.3.0",
        "msgspec==0.23.0",
        "cachetools==8.0.2",
        "pybase64==1.5.1",
        "dill==0.4.1",
        "truststore==0.10.5",
    ),
    # what vllm.config and the linear kernels add (the FP8 self-check builds a VllmConfig)
    "vllm-config-deps": (
        "cbor2==6.3.0",
        "xgrammar==0.2.8",
        "llguidance==1.7.6",
        "apache-tvm-ffi==0.1.15.post2",
    ),
}

# needs served by one prebuilt file: need -> file name in the pack (built by prepare.py)
ARTIFACTS: dict[str, str] = {
    "tilelang": "tilelang-site.tar.xz",  # h200-kit/prepare_tilelang_carry.sh, ~44 MB
}

# the tilelang vLLM 0.34.0 pins; prepare --tilelang packs another one
TILELANG_PINNED = "0.1.12"

# the unpatched tree, from the patched tree's `base` tag
BASE = "base"

KNOWN = {BASE, *WHEELS, *ARTIFACTS}

MACHINE_PYTHON = "3.12"


def pip_download_args(python_version: str = MACHINE_PYTHON) -> list[str]:
    return ["download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", python_version,
            *PLATFORM]


PLATFORM = (
    "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform",
    "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform",
    "manylinux_2_24_x86_64", "--platform", "manylinux_2_31_x86_64",
)
