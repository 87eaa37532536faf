"""Carry a patch series and an overlay on a pinned upstream vLLM tree.

Data flows one way: VERSION and ``--base`` pick a base, ``sources`` turns it into one commit,
``apply`` turns commit + series + overlay into the build tree, ``report`` describes what
happened. ``status`` and ``export`` read the same pieces.
"""
