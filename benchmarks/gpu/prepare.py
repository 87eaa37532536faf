# SPDX-License-Identifier: Apache-2.0
"""Pack what the selected GPU stages need into one git-ignored folder (CPU machine).

    python -m benchmarks.gpu.prepare --stages all --tree build/vllm --out .gpu-pack [--with-repo]

The folder holds:
  tree.tar.xz        the patched tree's vllm/ package at its HEAD commit (no .so, no tests),
                     plus the tree files stages name (upstream test files)
  base-delta.tar.gz  when a stage needs "base": the `base` tag's version of every vllm/ file the
                     series changed; the runner rebuilds the unpatched tree from it
  wheels/            the wheels the stages' needs name (needs.py), from a download cache
  <artifact>         prebuilt needs such as tilelang-site.tar.xz
  repo.tar.gz        with --with-repo: this checkout's files, for a device call that sends
                     another checkout (a helper's worktree)
  manifest.json      what is where, sizes, commits

The device machine takes at most 64 MiB of working tree, the repository's own files included,
so the pack is refused, with its sizes listed and an existing pack left as it was, when the
pack plus the repository's files plus 1 MiB is over --limit-mib.
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from benchmarks.gpu import needs as needs_mod
from benchmarks.gpu.stage import Stage
from benchmarks.gpu.stages import select

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from patchstack.apply import INSTALL_OUTPUTS  # noqa: E402 - what an editable install rewrites

MIB = 1 << 20
DEVICE_LIMIT_MIB = 64
MARGIN = 1 * MIB
REPO = Path(__file__).resolve().parents[2]


class PrepareError(Exception):
    """A pack that cannot be made; the message names the cause."""


class PackTooLarge(PrepareError):
    pass


def git(tree: Path, *args: str, binary: bool = False):
    proc = subprocess.run(["git", "-C", str(tree), *args], capture_output=True)
    if proc.returncode != 0:
        raise PrepareError(f"git {' '.join(args)} in {tree}: {proc.stderr.decode().strip()}")
    return proc.stdout if binary else proc.stdout.decode()


def cache_dir() -> Path:
    return Path(os.environ.get("VLLM_OVERLAY_CACHE", Path.home() / ".cache" / "vllm-overlay")) / "gpu"


def check_tree(tree: Path) -> str:
    if not (tree / ".git").exists():
        raise PrepareError(f"{tree} is not a git repository (build it with tools/apply.py)")
    # `bash ci/build.sh` installs the tree editable, which rewrites vllm/_version.py: the
    # install's output, not a change to pack (the pack is `git archive HEAD` either way)
    dirty = git(tree, "status", "--porcelain", "--", "vllm", *(f":!{p}" for p in sorted(INSTALL_OUTPUTS))).strip()
    if dirty:
        raise PrepareError(f"{tree}/vllm has uncommitted changes; the pack is made from commits:\n{dirty}")
    return git(tree, "rev-parse", "HEAD").strip()


def pack_tree(tree: Path, dest: Path, extra: list[str]) -> None:
    """git archive of HEAD's vllm/ (no .so files, no tests folders) and `extra`, xz-compressed."""
    for path in extra:
        if subprocess.run(["git", "-C", str(tree), "cat-file", "-e", f"HEAD:{path}"],
                          capture_output=True).returncode:
            raise PrepareError(f"{tree}: {path} is not in HEAD (named in a stage's tree_files)")
    data = git(tree, "archive", "--format=tar", "HEAD", "--", "vllm", ":(exclude,glob)**/*.so",
               ":(exclude,glob)vllm/**/tests/**", *extra, binary=True)
    dest.write_bytes(lzma.compress(data, preset=6))


def pack_base_delta(tree: Path, dest: Path) -> dict:
    """The base tag's version of the vllm/ files HEAD changed or removed; the added ones by name."""
    if subprocess.run(["git", "-C", str(tree), "rev-parse", "-q", "--verify", "refs/tags/base"],
                      capture_output=True).returncode:
        raise PrepareError(f"{tree} has no `base` tag (tools/apply.py tags the commit it starts from)")
    changed, added = [], []
    for line in git(tree, "diff", "--no-renames", "--name-status", "base", "HEAD", "--", "vllm").splitlines():
        status, path = line.split("\t", 1)
        (added if status == "A" else changed).append(path)
    data = git(tree, "archive", "--format=tar", "base", "--", *changed, binary=True) if changed else b""
    with tarfile.open(dest, "w:gz") as out:
        if data:
            with tarfile.open(fileobj=io.BytesIO(data)) as src:
                for member in src:
                    out.addfile(member, src.extractfile(member) if member.isfile() else None)
    return {"commit": git(tree, "rev-parse", "base^{commit}").strip(), "changed": changed, "added": added}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def find_wheel(wheelhouse: Path, requirement: str) -> Path | None:
    name, version = requirement.split("==")
    for whl in sorted(wheelhouse.glob("*.whl")):
        parts = whl.name.split("-")
        if len(parts) >= 5 and _norm(parts[0]) == _norm(name) and parts[1] == version:
            return whl
    return None


def fetch_wheels(requirements: list[str], wheelhouse: Path, python_version: str) -> list[Path]:
    """Wheels from the cache; what is missing is downloaded once with pip."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    missing = [r for r in requirements if find_wheel(wheelhouse, r) is None]
    if missing:
        cmd = [sys.executable, "-m", "pip", *needs_mod.pip_download_args(python_version), "-d", str(wheelhouse),
               *missing]
        if subprocess.run(cmd).returncode:
            raise PrepareError(f"pip could not download {', '.join(missing)} into {wheelhouse}")
    wheels = []
    for r in requirements:
        whl = find_wheel(wheelhouse, r)
        if whl is None:
            raise PrepareError(f"no CPython {python_version} manylinux wheel for {r} in {wheelhouse}")
        wheels.append(whl)
    return wheels


def fetch_artifact(need: str, cache: Path, h200_kit: Path,
                   tilelang_version: str = needs_mod.TILELANG_PINNED) -> Path:
    """A prebuilt need, built once into the cache (tilelang: h200-kit's recipe; a version
    other than the pinned one gets its own cache folder)."""
    if need == "tilelang" and tilelang_version != needs_mod.TILELANG_PINNED:
        cache = cache / f"tilelang-{tilelang_version}"
    path = cache / needs_mod.ARTIFACTS[need]
    if path.exists():
        return path
    if need == "tilelang":
        script = h200_kit / "prepare_tilelang_carry.sh"
        if not script.exists():
            raise PrepareError(f"{path} is not built and {script} is missing (--h200-kit)")
        cache.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["bash", str(script), str(cache), tilelang_version]).returncode or not path.exists():
            raise PrepareError(f"{script} did not produce {path}")
        return path
    raise PrepareError(f"no recipe for need {need!r}")


def repo_files(repo: Path) -> list[str]:
    """What a device call sends of a checkout: tracked and untracked-not-ignored files."""
    out = git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return [p for p in out.split("\0") if p and (repo / p).is_file()]


def repo_bytes(repo: Path) -> int:
    return sum((repo / p).stat().st_size for p in repo_files(repo))


def pack_repo(repo: Path, dest: Path) -> None:
    with tarfile.open(dest, "w:gz") as tar:
        for path in repo_files(repo):
            tar.add(repo / path, arcname=path, recursive=False)


def folder_bytes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def prepare(stages: list[Stage], tree: Path, out: Path, *, repo: Path = REPO, with_repo: bool = False,
            limit_bytes: int = DEVICE_LIMIT_MIB * MIB, cache: Path | None = None,
            h200_kit: Path | None = None, python_version: str = needs_mod.MACHINE_PYTHON,
            tilelang_version: str = needs_mod.TILELANG_PINNED) -> dict:
    """Write the pack for `stages` to `out`; returns its manifest. Raises PrepareError."""
    cache = cache or cache_dir()
    h200_kit = h200_kit or Path(os.environ.get("H200_KIT", repo.parent / "shared" / "tools" / "h200-kit"))
    tree, out = tree.resolve(), out.resolve()
    if out.exists() and not (out / "manifest.json").exists() and any(out.iterdir()):
        raise PrepareError(f"{out} exists and is not a pack made by this tool; not touching it")
    need_set = sorted({n for s in stages for n in s.needs})
    unknown = [n for n in need_set if n not in needs_mod.KNOWN]
    if unknown:
        raise PrepareError(f"unknown need(s) {unknown}; known: {sorted(needs_mod.KNOWN)} (benchmarks/gpu/needs.py)")
    commit = check_tree(tree)

    tmp = out.with_name(out.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        tree_files = sorted({f for s in stages for f in s.tree_files})
        pack_tree(tree, tmp / "tree.tar.xz", tree_files)
        manifest = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "stages": [s.name for s in stages],
            "needs": need_set,
            "tree": {"commit": commit, "file": "tree.tar.xz", "tree_files": tree_files},
        }
        if needs_mod.BASE in need_set:
            manifest["base"] = {"file": "base-delta.tar.gz", **pack_base_delta(tree, tmp / "base-delta.tar.gz")}
        requirements = [r for n in need_set for r in needs_mod.WHEELS.get(n, ())]
        if requirements:
            (tmp / "wheels").mkdir()
            wheelhouse = cache / f"wheels-cp{python_version.replace('.', '')}"
            for whl in fetch_wheels(requirements, wheelhouse, python_version):
                shutil.copy2(whl, tmp / "wheels" / whl.name)
        manifest["wheels"] = sorted(p.name for p in (tmp / "wheels").glob("*.whl")) if requirements else []
        manifest["artifacts"] = {}
        for need in need_set:
            if need in needs_mod.ARTIFACTS:
                src = fetch_artifact(need, cache, h200_kit, tilelang_version)
                shutil.copy2(src, tmp / src.name)
                manifest["artifacts"][need] = src.name
                if need == "tilelang":
                    manifest["tilelang_version"] = tilelang_version
        if with_repo:
            pack_repo(repo, tmp / "repo.tar.gz")
            manifest["repo"] = "repo.tar.gz"

        sizes = folder_bytes(tmp)
        travelling = repo_bytes(repo)
        total = sum(sizes.values()) + travelling + MARGIN
        manifest.update(sizes=sizes, repo_bytes=travelling, total_bytes=total, limit_bytes=limit_bytes)
        if total > limit_bytes:
            biggest = sorted(sizes.items(), key=lambda item: -item[1])[:15]
            listing = "\n".join(f"  {n}: {b / MIB:.2f} MiB" for n, b in biggest)
            raise PackTooLarge(
                f"pack for stages {', '.join(manifest['stages'])} is {total / MIB:.1f} MiB with the "
                f"repository's files ({travelling / MIB:.1f} MiB) and 1 MiB margin, over the "
                f"{limit_bytes / MIB:.0f} MiB the GPU machine takes; run these stages in separate packs:\n"
                f"{listing}")
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default="all", help="comma-separated stage names, or all")
    ap.add_argument("--tree", type=Path, default=REPO / "build" / "vllm", help="the patched tree")
    ap.add_argument("--out", type=Path, required=True, help="a git-ignored folder of the repository")
    ap.add_argument("--with-repo", action="store_true", help="also pack this checkout (repo.tar.gz)")
    ap.add_argument("--limit-mib", type=float, default=DEVICE_LIMIT_MIB)
    ap.add_argument("--cache", type=Path, default=None, help="download/build cache (default ~/.cache/vllm-overlay/gpu)")
    ap.add_argument("--h200-kit", type=Path, default=None, help="folder of prepare_tilelang_carry.sh")
    ap.add_argument("--python-version", default=needs_mod.MACHINE_PYTHON,
                    help="wheels for this Python (default: the GPU machine's; another one for a local dry run)")
    ap.add_argument("--tilelang", default=needs_mod.TILELANG_PINNED, metavar="VERSION",
                    help=f"tilelang version to pack (default {needs_mod.TILELANG_PINNED}, vLLM's pin)")
    args = ap.parse_args(argv)
    try:
        manifest = prepare(select(args.stages), args.tree, args.out, with_repo=args.with_repo,
                           limit_bytes=int(args.limit_mib * MIB), cache=args.cache, h200_kit=args.h200_kit,
                           python_version=args.python_version, tilelang_version=args.tilelang)
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, size in manifest["sizes"].items():
        print(f"{size / MIB:8.2f} MiB  {name}")
    print(f"{manifest['total_bytes'] / MIB:8.2f} MiB  total with the repository and margin "
          f"(limit {manifest['limit_bytes'] / MIB:.0f} MiB)")
    rel = args.out.resolve().relative_to(REPO) if args.out.resolve().is_relative_to(REPO) else args.out
    print(f"\nrun(carry=[\"{rel}\"], timeout_s=600, command=\"python3 -m benchmarks.gpu.run --pack {rel} "
          f"--out $OUT\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
