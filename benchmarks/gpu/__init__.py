# SPDX-License-Identifier: Apache-2.0
"""One harness for every GPU check of the patched tree (see README.md)."""
