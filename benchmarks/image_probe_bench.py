#!/usr/bin/env python3
"""image_probe speed, measured side by side in one run (these machines are noisy).

    .venv/bin/python benchmarks/image_probe_bench.py [--rounds N]

Builds the test images if missing (tests/sandbox/probe_images.py), then
interleaves, round by round:
  cold-small   probe of the vLLM 0.16.0 image, result cache off
  cold-big     the same image plus 40 layers and a 2 GiB filler layer
  docker-cat   docker run --rm --entrypoint cat IMAGE .../vllm/_version.py
  cached       probe of the small image answered from the per-ID cache
It calls the same module_utils code the module runs (Ansible's own start-up,
about a second, is left out: it is the same for every variant) and prints
medians and the three ratios the issue sets targets for.

    .venv/bin/python benchmarks/image_probe_bench.py --baseline REV [--rounds N]

compares this checkout's probe with the one of git revision REV instead,
side by side: each round runs, in turn, a fresh process of each version
on the same image and reader (the small image and the big one through the
overlay2 layers, the small one through a created container), timing the
cold probe inside the process. It also times the seeds' layout (a source
checkout installed editable into a venv), which REV may not find at all.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "tests/sandbox"))

import probe_images  # noqa: E402
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient  # noqa: E402
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.probe import probe_image  # noqa: E402


def run(argv, binary=False):
    proc = subprocess.run(argv, capture_output=True)
    if binary:
        return proc.returncode, proc.stdout, proc.stderr.decode()
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# One cold probe in a fresh process of the collection under argv[1]; prints seconds and what it found.
_WORKER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.probe import probe_image
docker = DockerClient()
start = time.perf_counter()
found = probe_image(docker, sys.argv[2], use_cache=False, backend=sys.argv[3])
print(json.dumps([time.perf_counter() - start, (found["vllm"] or {}).get("version")]))
"""


def cold_probe(collections: Path, image: str, backend: str) -> tuple[float, str | None]:
    code, out, err = run([sys.executable, "-c", _WORKER, str(collections), image, backend])
    if code:
        raise SystemExit(f"probe of {image} failed: {err[-2000:]}")
    seconds, version = json.loads(out)
    return seconds, version


def baseline_tree(rev: str, into: Path) -> Path:
    """REV's plugins as an importable collection under into/."""
    target = into / "ansible_collections/vllmops/cluster"
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "plugins"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return into


def compare(rev: str, rounds: int) -> int:
    images = probe_images.build_all()
    variants = {"small overlay2": (images["vllm-0.16.0"], "auto"), "big overlay2": (images["big"], "auto"),
                "small container": (images["vllm-0.16.0"], "container"),
                "seeds' layout": (images["src-editable-finder"], "auto")}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {rev: baseline_tree(rev, Path(tmp)), "this checkout": ROOT / "collections"}
        samples = {(name, tree): [] for name in variants for tree in trees}
        found = {}
        for _ in range(rounds):
            for name, (image, backend) in variants.items():
                for tree, path in trees.items():
                    seconds, found[name, tree] = cold_probe(path, image, backend)
                    samples[name, tree].append(seconds)
    print(f"cold probe, median of {rounds} interleaved rounds (fresh process each, start-up not counted)")
    print(f"{'variant':<16} {rev[:12]:>14} {'this checkout':>14} {'ratio':>7}   vLLM found (before / now)")
    for name in variants:
        before, now = (statistics.median(samples[name, tree]) for tree in trees)
        print(f"{name:<16} {before:13.3f}s {now:13.3f}s {now / before:7.2f}   "
              f"{found[name, rev]} / {found[name, 'this checkout']}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", metavar="REV", help="compare with the probe of this git revision")
    args = parser.parse_args()
    if args.baseline:
        return compare(args.baseline, args.rounds)
    images = probe_images.build_all()
    small, big = images["vllm-0.16.0"], images["big"]
    docker = DockerClient()
    version_file = "/usr/local/lib/python3.11/dist-packages/vllm/_version.py"
    samples = {"cold-small": [], "cold-big": [], "docker-cat": [], "cached": []}
    with tempfile.TemporaryDirectory() as cache:
        probe_image(docker, small, cache_directory=cache)  # fill the cache once
        for _ in range(args.rounds):
            samples["cold-small"].append(timed(lambda: probe_image(docker, small, use_cache=False)))
            samples["cold-big"].append(timed(lambda: probe_image(docker, big, use_cache=False)))
            samples["docker-cat"].append(timed(lambda: run(["docker", "run", "--rm", "--entrypoint", "cat",
                                                             small, version_file])))
            samples["cached"].append(timed(lambda: probe_image(docker, small, cache_directory=cache)))
    median = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{'variant':<12} {'median s':>9} {'min s':>8} {'max s':>8}   ({args.rounds} rounds, interleaved)")
    for name, values in samples.items():
        print(f"{name:<12} {median[name]:9.3f} {min(values):8.3f} {max(values):8.3f}")
    big_vs_small = median["cold-big"] / median["cold-small"]
    probe_vs_cat = median["cold-small"] / median["docker-cat"]
    cold_vs_cached = median["cold-small"] / median["cached"]
    print()
    print(f"cold big / cold small      = {big_vs_small:6.2f}   target <= 1.5  {'ok' if big_vs_small <= 1.5 else 'MISSED'}")
    print(f"cold probe / docker run cat = {probe_vs_cat:6.2f}   target <= 1.0  {'ok' if probe_vs_cat <= 1.0 else 'MISSED'}")
    print(f"cold / cached              = {cold_vs_cached:6.1f}   target >= 20   {'ok' if cold_vs_cached >= 20 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
