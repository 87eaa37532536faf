# SPDX-License-Identifier: Apache-2.0
"""Benchmarks the stages run in their own process (python -m benchmarks.gpu.bench.NAME)."""
