#!/usr/bin/env python3
"""Build the wheel of the patched tree (default build/vllm) by upstream vLLM's own routes.

    python ci/build_wheel.py                          # Python-only wheel, no binaries
    python ci/build_wheel.py --variant precompiled    # with the base release's CUDA binaries

python-only   VLLM_TARGET_DEVICE=empty, no build isolation (run it in the venv ci/install.py
              made). Version <overlay version>.empty (upstream's own +empty convention), tag
              py3-none-any: it carries no compiled file, which the build checks.
precompiled   VLLM_USE_PRECOMPILED=1 with VLLM_PRECOMPILED_WHEEL_LOCATION = the verified
              upstream wheel of the base (see ci/install.py), build isolation on (pip brings
              the base's own torch). Version = [overlay].version of VERSION; the tags are
              copied from upstream's wheel (cp38-abi3-manylinux_2_28_x86_64), and every binary
              in it must be byte-identical to upstream's: nothing is recompiled.

The wheel is built from a clean clone of the tree's HEAD (files an earlier build extracted into
the tree cannot leak in; uncommitted edits are not in a wheel). Every exact pin (==) among its
requirements is looked up on the configured index: a wheel that pins a release the index does
not have is refused unless --allow-unavailable NAME says it is known (then the build report and
the printed summary say so). Output: the wheel, SHA256SUMS and build-report.json in --out.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import CIError  # noqa: E402

PURE_TAG = "py3-none-any"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ci/build_wheel.py", description=__doc__.split("\n\n")[0])
    p.add_argument("tree", nargs="?", type=Path, default=common.DEFAULT_TREE)
    p.add_argument("--variant", choices=("python-only", "precompiled"), default="python-only")
    p.add_argument("--out", type=Path, default=common.ROOT / "dist")
    p.add_argument("--wheel", type=Path, help="precompiled: the upstream wheel file to use (still verified)")
    p.add_argument("--version", help="the version to build (default: from VERSION and the base)")
    p.add_argument("--allow-unavailable", action="append", default=[], metavar="NAME",
                   help="accept an exact pin on NAME that the index cannot satisfy (recorded in the report)")
    p.add_argument("--skip-deps-check", action="store_true", help="do not look the exact pins up (offline)")
    p.add_argument("--no-build-isolation", action="store_true",
                   help="precompiled: build in this environment (it must have the base's CUDA torch)")
    return p


# --- wheel files ---------------------------------------------------------------------------------

def retag(wheel: Path, tags: list[str], purelib: bool, out_dir: Path) -> Path:
    """Rewrite a wheel's tags (and Root-Is-Purelib) with `wheel unpack` / `wheel pack`."""
    with tempfile.TemporaryDirectory() as tmp:
        common.run([sys.executable, "-m", "wheel", "unpack", "-d", tmp, wheel], quiet=True)
        (unpacked,) = Path(tmp).iterdir()
        (info,) = unpacked.glob("*.dist-info")
        lines = [line for line in (info / "WHEEL").read_text().splitlines()
                 if line.strip() and not line.startswith(("Tag:", "Root-Is-Purelib:"))]
        lines.insert(2, f"Root-Is-Purelib: {'true' if purelib else 'false'}")
        lines += [f"Tag: {t}" for t in tags]
        (info / "WHEEL").write_text("\n".join(lines) + "\n")
        packed = Path(tmp) / "packed"
        packed.mkdir()
        common.run([sys.executable, "-m", "wheel", "pack", "-d", packed, unpacked], quiet=True)
        (made,) = packed.glob("*.whl")
        out_dir.mkdir(parents=True, exist_ok=True)
        return Path(shutil.move(made, out_dir / made.name))


def requirements(metadata: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]


def exact_pins(reqs: list[str], platform_machine: str = "x86_64") -> list:
    """Requirements without an extra whose specifier pins a version (== or ===) on Linux."""
    from packaging.requirements import Requirement

    env = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": platform_machine, "extra": ""}
    out = []
    for text in reqs:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if any(s.operator in ("==", "===") for s in req.specifier):
            out.append(req)
    return out


def index_versions(project: str, settings: dict | None = None) -> set[str]:
    """Every version the configured indexes offer for ``project`` (yanked files left out)."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    packages, _ = common.index.project_packages(canonicalize_name(project), settings)
    found: set[str] = set()
    for pkg in packages:
        try:
            if pkg.version and not pkg.is_yanked:
                found.add(str(Version(pkg.version)))
        except InvalidVersion:  # odd file names are not versions we can use
            continue
    return found


def unavailable_pins(reqs: list[str], versions_of=index_versions, machine: str = "x86_64") -> list[str]:
    missing = []
    for req in exact_pins(reqs, machine):
        have = versions_of(req.name)
        if not any(req.specifier.contains(v, prereleases=True) for v in have):
            missing.append(str(req))
    return missing


def sha256sums(out_dir: Path, wheel: Path) -> Path:
    """Add or replace the wheel's line in SHA256SUMS (sha256sum -c format)."""
    sums = out_dir / "SHA256SUMS"
    lines = [line for line in (sums.read_text().splitlines() if sums.exists() else [])
             if not line.endswith(f"  {wheel.name}")]
    lines.append(f"{common.sha256_of(wheel)}  {wheel.name}")
    sums.write_text("\n".join(sorted(lines, key=lambda s: s.split("  ", 1)[1])) + "\n")
    return sums


def check_binaries(ours: Path, upstream: Path) -> dict:
    """Every binary in our wheel is upstream's, byte for byte; report what upstream has that we lack."""
    mine, theirs = common.compiled_members(ours), common.compiled_members(upstream)
    foreign = sorted(n for n in mine if n not in theirs)
    changed = sorted(n for n in mine if n in theirs and mine[n] != theirs[n])
    if foreign or changed:
        raise CIError("the precompiled wheel holds binaries that are not upstream's: "
                      + ", ".join(foreign + [f"{n} (differs)" for n in changed]))
    if not mine:
        raise CIError("the precompiled wheel holds no binaries: upstream's were not extracted")
    return {"binaries": len(mine), "identical_to_upstream": True,
            "upstream_only": sorted(n for n in theirs if n not in mine)}


# --- build ---------------------------------------------------------------------------------------

def clean_clone(tree: Path, dest: Path) -> str:
    """A checkout of the tree's HEAD in ``dest``; returns the commit."""
    head = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        raise CIError(f"{tree}: not a git tree (make it with `python tools/apply.py`)")
    dirty = subprocess.run(["git", "-C", tree, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        print(f"note: uncommitted changes in {tree} are not in the wheel:\n{dirty}", file=sys.stderr)
    common.run(["git", "clone", "--quiet", "--shared", "--no-tags", tree, dest], quiet=True)
    return head.stdout.strip()


def build(args) -> dict:
    t0 = time.monotonic()
    tree = args.tree.absolute()
    pin = common.load_pin()
    base = common.read_base(tree, pin)
    python_only = args.variant == "python-only"
    version = args.version or common.package_version(pin, base, python_only)
    if not version:
        raise CIError(f"base {base.spec} has no known version: pass --version")
    env = {"VLLM_VERSION_OVERRIDE": version}
    upstream = None
    if python_only:
        # no binaries: also tell setuptools-rust there is no cargo, so the optional Rust
        # frontend (vllm-rs) is skipped rather than compiled where cargo and crates.io exist
        env.update(VLLM_TARGET_DEVICE="empty", CARGO="false")
        upstream_info = None
    else:
        from install import precompiled_wheel

        wheel_ref, variant = precompiled_wheel(tree, pin, base, None, args.wheel, check_torch=False)
        upstream = common.fetch_wheel(wheel_ref, local=args.wheel)
        env.update(VLLM_USE_PRECOMPILED="1", VLLM_PRECOMPILED_WHEEL_LOCATION=str(upstream),
                   VLLM_TARGET_DEVICE="cuda")
        upstream_info = {"file": upstream.name, "sha256": common.sha256_of(upstream), "why": wheel_ref.why,
                         "variant": variant}
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as tmp:
        src, raw = Path(tmp) / "src", Path(tmp) / "raw"
        commit = clean_clone(tree, src)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", raw, src]
        if python_only or args.no_build_isolation:
            cmd.insert(4, "--no-build-isolation")
        common.run(cmd, env)
        (built,) = raw.glob("*.whl")
        got_version = built.name.split("-")[1].replace("_", "-")
        from packaging.version import Version

        if Version(got_version) != Version(version):
            raise CIError(f"built {built.name}: version {got_version}, expected {version}")
        if python_only:
            compiled = common.compiled_members(built)
            if compiled:
                raise CIError(f"the Python-only wheel holds compiled files: {', '.join(compiled)}")
            tags, purelib = [PURE_TAG], True
        else:
            # upstream's file name says manylinux_2_28, its WHEEL file still linux_x86_64:
            # the name is what installers match, so both of ours carry the name's tags
            tags, purelib = common.filename_tags(upstream), False
        args.out.mkdir(parents=True, exist_ok=True)
        wheel = retag(built, tags, purelib, args.out.absolute())
    report = {"wheel": wheel.name, "sha256": common.sha256_of(wheel), "size": wheel.stat().st_size,
              "variant": args.variant, "version": version, "tags": tags, "tree": str(tree), "commit": commit,
              "base": base.spec, "upstream_wheel": upstream_info}
    if upstream is not None:
        report["binaries"] = check_binaries(wheel, upstream)
    reqs = requirements(common.wheel_metadata(wheel))
    report["requires"] = len(reqs)
    if args.skip_deps_check:
        report["unavailable_pins"] = "not checked (--skip-deps-check)"
    else:
        missing = unavailable_pins(reqs)
        allowed = {re.split(r"[=<>!~ \[;]", m, maxsplit=1)[0].lower() for m in missing} & \
                  {a.lower() for a in args.allow_unavailable}
        report["unavailable_pins"] = missing
        refused = [m for m in missing if re.split(r"[=<>!~ \[;]", m, maxsplit=1)[0].lower() not in allowed]
        if refused:
            wheel.unlink()
            raise CIError(f"{wheel.name} would require releases the configured index does not have: "
                          f"{', '.join(refused)}. Such a wheel cannot be installed with its dependencies. "
                          "If that is known and accepted, rebuild with --allow-unavailable NAME (recorded in "
                          "build-report.json); see docs/install.md")
    report["seconds"] = round(time.monotonic() - t0, 1)
    sha256sums(args.out, wheel)
    rep_path = args.out / "build-report.json"
    reports = json.loads(rep_path.read_text()) if rep_path.exists() else {}
    reports[wheel.name] = report
    rep_path.write_text(json.dumps(reports, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        rep = build(args)
    except (CIError, common.ToolError) as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print(f"wheel    {args.out / rep['wheel']}")
    print(f"version  {rep['version']}  tags {'.'.join(rep['tags'])}  {rep['size'] >> 20} MiB  {rep['seconds']} s")
    print(f"sha256   {rep['sha256']}  (also in {args.out / 'SHA256SUMS'})")
    if rep.get("binaries"):
        b = rep["binaries"]
        print(f"binaries {b['binaries']} files, byte-identical to {rep['upstream_wheel']['file']}")
    if rep["unavailable_pins"]:
        print(f"WARNING  requires releases the index does not have (accepted): {rep['unavailable_pins']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
