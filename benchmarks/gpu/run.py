# SPDX-License-Identifier: Apache-2.0
"""Run GPU stages from a pack made by benchmarks/gpu/prepare.py (on the GPU machine).

    python3 -m benchmarks.gpu.run --pack .gpu-pack --out $OUT [--stages a,b] [--budget-s 570]
    python3 -m benchmarks.gpu.run --pack .gpu-pack --out $OUT \\
        --step ab:tilelang_ablate "ABLATE_ARGS=--kernel resident" \\
        --step tests:tilelang_draft_attn DRAFT_ATTN_WHAT=pytest DRAFT_ATTN_PYTEST_K=resident

Sets up once (unpacks the patched tree, rebuilds the base tree, installs the wheels into a
scratch site folder, finds the stand-ins), then runs each stage in its own process, capped at
min(its time_cap_s, the budget left), so that a call limited to 10 minutes always returns.
A --step runs a stage under a name of its own with environment variables of its own, so
that one call runs the same stage twice (an A/B and a test selection) on one setup.
$OUT gets at most 2 + (number of stages or steps) files, within the device's 8-file limit:
  summary.json     machine, versions, stand-ins, each stage's status and time
  <name>.json      each stage's (or step's) results (written as it goes, so a timeout keeps
                   what was done)
  logs.tar.gz      every log: setup, each stage and each of its steps
Also runs on a CPU machine (stages then skip or run small), to check a pack before a GPU call.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.gpu.stage import Context, Stage, run_capped
from benchmarks.gpu.stages import select

REPO = Path(__file__).resolve().parents[2]
SITECUSTOMIZE = "import benchmarks.gpu.standins\n\nbenchmarks.gpu.standins.install()\n"
# the device returns at most 8 files: summary.json and logs.tar.gz leave 6 for the steps
MAX_STEPS = 6


@dataclass(frozen=True)
class Step:
    """One stage run: its name names $OUT/<name>.json and its work folder."""

    name: str
    stage: Stage
    env: dict = field(default_factory=dict)


def plan(stage_names: str | None, step_specs: list[list[str]], pack_stages: list[str]) -> list[Step]:
    """The steps of a run: --step NAME:STAGE [VAR=value ...] each, else one per stage."""
    if stage_names and step_specs:
        raise SystemExit("give --stages or --step, not both")
    if not step_specs:
        steps = [Step(s.name, s) for s in select(stage_names or pack_stages)]
    else:
        steps = []
        for spec in step_specs:
            name, _, stage_name = spec[0].rpartition(":")
            env = {}
            for item in spec[1:]:
                var, eq, value = item.partition("=")
                if not eq or not var.isidentifier():
                    raise SystemExit(f"--step {spec[0]}: {item!r} is not VAR=value")
                env[var] = value
            (stage,) = select([stage_name])
            steps.append(Step(name or stage_name, stage, env))
    names = [s.name for s in steps]
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", n)]
    if bad:
        raise SystemExit(f"step names must be letters, digits, '_', '.', '-': {', '.join(bad)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SystemExit(f"two steps named {', '.join(twice)}: give each --step a NAME:")
    if len(steps) > MAX_STEPS:
        raise SystemExit(f"{len(steps)} steps: the device returns 8 files, so at most {MAX_STEPS} a run")
    return steps


def log(msg: str, t0: float = time.time()) -> None:
    print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)


def extract(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


def tree_version(tree: Path) -> str:
    version_py = tree / "vllm" / "_version.py"
    for line in version_py.read_text().splitlines() if version_py.exists() else []:
        if line.startswith(("__version__", "version")) and "=" in line:
            return line.split("=")[-1].strip().strip("'\"")
    return "0.0.0"


def setup(pack: Path, work: Path, stages, logs: Path) -> tuple[dict, dict]:
    """Unpack everything; returns (environment for the stages, what was set up)."""
    manifest = json.loads((pack / "manifest.json").read_text())
    missing = [s.name for s in stages if s.name not in manifest["stages"]]
    if missing:
        raise SystemExit(f"the pack was made for {manifest['stages']}, not {missing}: rerun prepare")
    shutil.rmtree(work, ignore_errors=True)
    tree, site, boot = work / "tree", work / "site", work / "boot"
    extract(pack / manifest["tree"]["file"], tree)
    info = {"tree_commit": manifest["tree"]["commit"], "pack_created": manifest["created"]}
    base = None
    if "base" in manifest:
        base = work / "base"
        shutil.copytree(tree / "vllm", base / "vllm")
        extract(pack / manifest["base"]["file"], base)
        for path in manifest["base"]["added"]:
            (base / path).unlink()
        info["base_commit"] = manifest["base"]["commit"]
    site.mkdir(parents=True)
    wheels = sorted(str(p) for p in (pack / "wheels").glob("*.whl")) if (pack / "wheels").exists() else []
    if wheels:
        with open(logs / "pip.log", "w") as f:
            rc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                                 "--target", str(site), *wheels], stdout=f, stderr=subprocess.STDOUT).returncode
        if rc:
            raise SystemExit("pip install of the carried wheels failed (logs.tar.gz: pip.log)")
    # vLLM reads its own version from package metadata; a source tree has none.
    dist = site / f"vllm-{tree_version(tree)}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {tree_version(tree)}\n")
    extra = []
    for need, name in manifest.get("artifacts", {}).items():
        extract(pack / name, work / need)
        extra.append(str(work / need))
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = [str(boot), str(REPO), str(site), str(tree), *extra]
    env = {"PYTHONPATH": os.pathsep.join(path + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "GPU_STANDIN_C_OPS": "1"}
    info.update(wheels=[Path(w).name for w in wheels], artifacts=manifest.get("artifacts", {}),
                metadata_standin=dist.name, tree=str(tree), base=str(base) if base else None)
    return env, info


def machine(env: dict) -> dict:
    out = {"python": platform.python_version(), "host": platform.node()}
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True) if shutil.which("nvidia-smi") else None
    out["gpu"] = smi.stdout.strip() if smi and smi.returncode == 0 else "none"
    probe = subprocess.run([sys.executable, "-c", "import torch, triton, json; print(json.dumps(dict("
                            "torch=torch.__version__, triton=triton.__version__, cuda=torch.cuda.is_available(),"
                            "device=torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu',"
                            "capability=torch.cuda.get_device_capability() if torch.cuda.is_available() else None)))"],
                           capture_output=True, text=True, env={**os.environ, **env})
    try:
        out.update(json.loads(probe.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        out["probe_error"] = probe.stderr[-500:]
    return out


def run_stages(args) -> int:
    t0 = time.time()
    deadline = t0 + args.budget_s
    out, work, pack = args.out.resolve(), args.work.resolve(), args.pack.resolve()
    out.mkdir(parents=True, exist_ok=True)
    logs = work.parent / (work.name + "-logs")
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "stages": {}}
    try:
        manifest_stages = json.loads((pack / "manifest.json").read_text())["stages"]
        steps = plan(args.stages, args.step, manifest_stages)
        stages = list({s.stage.name: s.stage for s in steps}.values())
        log("setup")
        env, info = setup(pack, work, stages, logs)
        summary["setup"] = info
        summary["machine"] = machine(env)
        log(f"machine: {summary['machine']}")
        imports = sorted({m for s in stages for m in s.imports})
        proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.standins", "discover", info["tree"], *imports],
                              capture_output=True, text=True, env={**os.environ, **env}, timeout=180)
        (logs / "standins.log").write_text(proc.stdout + proc.stderr)
        standins = json.loads(proc.stdout.strip().splitlines()[-1])
        standins["vllm_metadata"] = info["metadata_standin"]
        summary["standins"] = standins
        env["GPU_STANDIN_COMPILED"] = ",".join(standins["compiled_vllm_modules"])
        env["GPU_STANDIN_PACKAGES"] = ",".join(standins["packages"])
        log(f"stand-ins: {json.dumps(standins)[:800]}")
    except Exception as e:  # noqa: BLE001 - a failed setup still writes summary.json
        summary["setup_error"] = "".join(traceback.format_exception(e))[-3000:]
        log(f"setup failed: {e}")
        steps = []
    caps = dict(item.split("=") for item in args.cap)
    for step in steps:
        stage = step.stage
        want = caps.get(step.name, caps.get(stage.name, stage.time_cap_s))
        cap = min(float(want), deadline - time.time() - 15)
        if cap < 10:
            summary["stages"][step.name] = {"status": "not run: budget spent"}
            log(f"{step.name}: not run, budget spent")
            continue
        swork = work / "stages" / step.name
        swork.mkdir(parents=True, exist_ok=True)
        json_path = out / f"{step.name}.json"
        ctx = {"name": step.name, "stage": stage.name, "repo": str(REPO), "tree": info["tree"],
               "base": info["base"], "work": str(swork), "json_path": str(json_path),
               "deadline": time.time() + cap}
        (swork / "ctx.json").write_text(json.dumps(ctx))
        log(f"{step.name}: start (cap {cap:.0f}s)" + (f" {step.env}" if step.env else ""))
        s0 = time.time()
        with open(swork / "stage.log", "w") as f:
            rc = run_capped([sys.executable, "-m", "benchmarks.gpu.run", "stage-process", str(swork / "ctx.json")],
                            cap, stdout=f, env={**os.environ, **env, **step.env}, cwd=REPO)
        result = json.loads(json_path.read_text()) if json_path.exists() else {}
        status = "timeout" if rc == "timeout" else ("ok" if rc == 0 and result.get("ok", False) else "failed")
        harness = {"status": status, "rc": rc, "seconds": round(time.time() - s0, 1), "cap_s": round(cap)}
        if step.name != stage.name or step.env:
            harness.update(stage=stage.name, env=step.env)
        result["harness"] = harness
        json_path.write_text(json.dumps(result, indent=1, default=str) + "\n")
        summary["stages"][step.name] = harness
        log(f"{step.name}: {status} rc={rc} {harness['seconds']}s")
        for line in (swork / "stage.log").read_text(errors="replace").splitlines()[-args.tail:]:
            print(f"    {line[:200]}")
    summary["seconds"] = round(time.time() - t0, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="setup")
        if (work / "stages").exists():
            for path in sorted((work / "stages").rglob("*")):
                if path.is_file() and path.stat().st_size < 8 << 20:
                    tar.add(path, arcname=str(path.relative_to(work)))
    log(f"done: {json.dumps({k: v['status'] for k, v in summary['stages'].items()})}")
    return 0 if summary["stages"] and all(v["status"] == "ok" for v in summary["stages"].values()) else 1


def stage_process(ctx_path: Path) -> int:
    """One stage, in the process the runner caps."""
    from benchmarks.gpu import standins

    raw = json.loads(ctx_path.read_text())
    (stage,) = select([raw.get("stage", raw["name"])])
    ctx = Context(name=raw["name"], repo=Path(raw["repo"]), tree=Path(raw["tree"]),
                  base=Path(raw["base"]) if raw["base"] and "base" in stage.needs else None,
                  work=Path(raw["work"]), json_path=Path(raw["json_path"]), deadline=raw["deadline"])
    ctx.save(stage=stage.name, doc=stage.doc, ok=False)
    try:
        result = stage.run(ctx) or {}
        rc = 0
    except Exception as e:  # noqa: BLE001 - recorded in the stage's JSON
        result = {"ok": False, "error": "".join(traceback.format_exception(e))[-4000:]}
        traceback.print_exc()
        rc = 1
    ctx.save(**result, standins_served=list(standins.SERVED))
    return rc


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["stage-process"]:
        return stage_process(Path(argv[1]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", type=Path, required=True, help="folder made by benchmarks.gpu.prepare")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    ap.add_argument("--stages", default=None, help="comma-separated (default: the pack's stages)")
    ap.add_argument("--budget-s", type=float, default=570, help="wall-clock budget for the whole run")
    ap.add_argument("--step", action="append", nargs="+", default=[], metavar=("NAME:STAGE", "VAR=value"),
                    help="run STAGE as NAME with these environment "
                         "variables (repeatable, run in order; instead of --stages)")
    ap.add_argument("--cap", action="append", default=[], metavar="NAME=SECONDS",
                    help="this run's cap for a stage or step instead of its time_cap_s (repeatable)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu-harness"))
    ap.add_argument("--tail", type=int, default=12, help="lines of each stage's log to print")
    return run_stages(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
