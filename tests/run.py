#!/usr/bin/env python3
"""The one test command (`make test`): every quality gate in order, each
timed, all of them run even after a failure, then one closing line:

    N passed, N failed

Gates: the test harness (Docker Engine + node image), syntax check + unit +
sanity + package on the oldest supported ansible-core (.venv-oldest),
yamllint, ansible-lint (profile production), ruff, pytest (unit), pytest
(integration: modules through Ansible against real images), ansible-test
sanity on plugins/, the built collection installed and used, the docs
(antsibull-docs, antsibull-changelog, ansible-builder create), the molecule
scenarios, `make sandbox` run twice (the second run must change nothing) and
tests/e2e on it, and the Ray backend's stories on a second sandbox
(tests/e2e_ray). `--only NAME` (repeatable) runs a subset. The molecule
scenarios start in the background after `oldest`, while the gates from
yamllint to docs run; their output is printed when they end. Once those gates
are done, the sandboxes' images are built beside molecule (`make
sandbox-images`); the sandbox gate and the ray gate run last, side by side (the
ray gate's output is printed when it ends). The summary gives each gate's time
against its budget (docs/development.md, "Time budget") and the total against
3450 s, names a gate over its budget, and repeats the last lines of each failed
gate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# The suite's whole budget (CI stops a run at 5400 s; this leaves room to grow).
TOTAL_BUDGET_S = 3450
# Each gate's budget in seconds: the table under "### Time budget" there (one owner: the docs).
BUDGETS_DOC = ROOT / "docs/development.md"


OLDEST = ROOT / ".venv-oldest/bin"  # `make venv-oldest`: the oldest supported ansible-core


def tool(name: str, bin_dir: Path = BIN) -> str:
    return str(bin_dir / name)


class Tail:
    """This script's output, passed on as it comes; its last lines are kept,
    so that the summary can repeat how a failed gate ended (CI shows only the
    end of a long log)."""

    def __init__(self, out, keep: int = 30) -> None:
        self.out, self.lines, self.partial = out, deque(maxlen=keep), ""

    def write(self, text: str) -> int:
        self.out.write(text)
        *done, self.partial = (self.partial + text).split("\n")
        self.lines.extend(line[:300] for line in done)
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def take(self) -> list[str]:
        taken = [*self.lines, *([self.partial[:300]] if self.partial else [])]
        self.lines.clear()
        self.partial = ""
        return taken


def sh(argv: list[str], cwd: Path = ROOT, env: dict | None = None) -> int:
    """Run a command, its output through this script's (so Tail sees it)."""
    print(f"$ {' '.join(argv)}", flush=True)
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
        sys.stdout.flush()
    return proc.returncode


def gate_harness() -> int:
    nodes = [sys.executable, str(ROOT / "tests/sandbox/nodes.py")]
    return sh([*nodes, "ensure-docker"]) or sh([*nodes, "build-image"])


def gate_yamllint() -> int:
    return sh([tool("yamllint"), "--strict", "."])


def gate_ansible_lint(bin_dir: Path = BIN) -> int:
    return sh([tool("ansible-lint", bin_dir), "--profile", "production", "--offline"])


def gate_ruff() -> int:
    return sh([tool("ruff"), "check", "."])


def gate_pytest(bin_dir: Path = BIN) -> int:
    return sh([tool("python", bin_dir), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit"])


def gate_integration() -> int:
    """Modules through Ansible against the real Docker Engine and test images."""
    return sh([sys.executable, "-m", "pytest", "-q", "tests/integration"])


def _offline_get_pip(cache: Path) -> None:
    """ansible-test downloads pip's bootstrap script from a host that is not
    reachable here; a cached stand-in that runs the bundled ensurepip does the
    same job (notes/infra.md)."""
    cache.mkdir(parents=True, exist_ok=True)
    for version in ("24_2", "25_2", "25_3"):
        target = cache / f"get_pip_{version}.py"
        if not target.exists():
            target.write_text("import ensurepip\nensurepip.bootstrap(upgrade=True, default_pip=True)\n")


def gate_sanity(bin_dir: Path = BIN) -> int:
    if not any((ROOT / "plugins").rglob("*.py")):
        print("no plugins yet: ansible-test sanity has nothing to check")
        return 0
    _offline_get_pip(Path.home() / ".ansible/test/cache")
    with tempfile.TemporaryDirectory(prefix="vllmops-sanity-") as tmp:
        dest = _collection_tree(Path(tmp))
        subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
        subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
        python = subprocess.run([tool("python", bin_dir), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                capture_output=True, text=True, check=True).stdout.strip()
        return sh([tool("ansible-test", bin_dir), "sanity", "--local", "--python", python, "plugins/"],
                  cwd=dest, env=env)


def gate_package(bin_dir: Path = BIN) -> int:
    """The built tarball installs, and its playbooks and plugins resolve from
    the install, with this checkout's ansible.cfg out of the way."""
    with tempfile.TemporaryDirectory(prefix="vllmops-package-") as tmp:
        Path(tmp, "ansible.cfg").write_text("[defaults]\n")
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", ANSIBLE_CONFIG=f"{tmp}/ansible.cfg",
                   ANSIBLE_COLLECTIONS_PATH=f"{tmp}/installed")
        tarball = f"{tmp}/vllmops-cluster.tar.gz"
        return (sh([tool("ansible-galaxy", bin_dir), "collection", "build", "--output-path", tmp], env=env)
                or sh(["sh", "-c", f"mv {tmp}/vllmops-cluster-*.tar.gz {tarball}"])
                or sh([tool("ansible-galaxy", bin_dir), "collection", "install", "--no-deps", "-p", f"{tmp}/installed",
                       tarball], env=env)
                or sh([tool("ansible-doc", bin_dir), "-t", "filter", "vllmops.cluster.docker_daemon_json"], cwd=Path(tmp),
                      env=env)
                or sh([tool("ansible-playbook", bin_dir), "--syntax-check", "-i", "localhost,", "vllmops.cluster.deploy"],
                      cwd=Path(tmp), env=env))


def _collection_tree(tmp: Path) -> Path:
    """This checkout's tracked and unignored files under
    tmp/ansible_collections/vllmops/cluster (the path the docs tools need)."""
    dest = tmp / "ansible_collections/vllmops/cluster"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_symlink() or not src.is_file():
            continue  # the checkout's collections/ symlink points back here
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    return dest


def gate_docs() -> int:
    """Every plugin's and role's documentation renders and links resolve
    (antsibull-docs), the changelog fragments and changelog.yaml are valid and
    CHANGELOG.md is what antsibull-changelog generates from them, and
    execution-environment.yml becomes a build context holding the built
    collection (ansible-builder create; building the image is left out)."""
    with tempfile.TemporaryDirectory(prefix="vllmops-docs-") as tmp:
        dest = _collection_tree(Path(tmp))
        Path(tmp, "ansible.cfg").write_text("[defaults]\n")  # not this checkout's collections path
        env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=f"{tmp}/ansible.cfg")
        context = Path(tmp, "ee-context")
        rc = (sh([tool("antsibull-docs"), "lint-collection-docs", "--plugin-docs", "."], cwd=dest, env=env)
              or sh([tool("antsibull-changelog"), "lint"], cwd=dest, env=env)
              or sh([tool("antsibull-changelog"), "lint-changelog-yaml", "changelogs/changelog.yaml"], cwd=dest, env=env)
              or sh([tool("antsibull-changelog"), "generate"], cwd=dest, env=env))
        if rc:
            return rc
        if sh(["git", "diff", "--no-index", "--stat", str(ROOT / "CHANGELOG.md"), "CHANGELOG.md"], cwd=dest):
            print("FAILED: CHANGELOG.md is not what `antsibull-changelog generate` makes of changelogs/", flush=True)
            return 1
        rc = (sh([tool("ansible-galaxy"), "collection", "build", "--output-path", "build"], cwd=dest, env=env)
              or sh([tool("ansible-builder"), "create", "-f", "execution-environment.yml", "-c", str(context),
                     "--output-filename", "Dockerfile"], cwd=dest, env=env))
        if rc:
            return rc
        if not any((context / "_build/collections").glob("vllmops-cluster-*.tar.gz")):
            print("FAILED: the execution environment's build context lacks the collection tarball", flush=True)
            return 1
        return 0


def gate_syntax(bin_dir: Path) -> int:
    """Every playbook parses on this ansible-core: its keywords, modules and
    roles' argument specs resolve (ansible-lint, on the current core, lints
    the rest)."""
    playbooks = ["deploy.yml", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "playbooks").glob("*.yml"))]
    return sh([tool("ansible-playbook", bin_dir), "--syntax-check", "-i", "localhost,", *playbooks])


def gate_oldest() -> int:
    """The fast gates again on the oldest supported ansible-core (its own
    venv, requirements-oldest.txt): every playbook's syntax check, unit tests,
    sanity, the built package."""
    rc = sh(["make", "--no-print-directory", "venv-oldest"])
    if rc:
        return rc
    version = subprocess.run([tool("ansible", OLDEST), "--version"], capture_output=True, text=True).stdout
    print(version.splitlines()[0] if version else "ansible --version printed nothing", flush=True)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{OLDEST}:{path}"  # every step finds the oldest venv's ansible commands first
    try:  # the first failure ends the gate: its output is the last the summary repeats
        failed = next((name for name, gate in (("syntax", gate_syntax), ("pytest", gate_pytest),
                                               ("sanity", gate_sanity), ("package", gate_package)) if gate(OLDEST)), None)
    finally:
        os.environ["PATH"] = path
    print(f"on the oldest ansible-core: {'FAILED ' + failed if failed else 'all passed'}", flush=True)
    return 1 if failed else 0


def molecule_command() -> tuple[list[str], dict]:
    """Every scenario under molecule/ (default, gpu, nccl), each on the base
    config that molecule finds from the repository root
    (.config/molecule/config.yml)."""
    return [tool("molecule"), "test", "--all"], dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")


def gate_molecule() -> int:
    argv, env = molecule_command()
    return sh(argv, env=env)


def sandbox_images_command() -> tuple[list[str], dict]:
    """What `make sandbox` builds before its nodes start (real vLLM's image and
    its archive, the tiny model) and what the second sandbox uses (the Ray
    stand-in's archive, the toolkit repository), built while the molecule
    scenarios run once the gates beside them are done (on a fresh machine, CI,
    the build takes minutes)."""
    return (["make", "--no-print-directory", "sandbox-images"],
            dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}"))


def gate_sandbox() -> int:
    """The README's main job: `make sandbox` on a fresh sandbox, then again
    (the re-run must change nothing and end with a healthy endpoint and a real
    completion; it takes deploy.yml's fast path, and tests/e2e/test_fast_rerun.py
    runs every play again on the converged cluster, changing nothing), then the
    tests over that converged cluster (tests/e2e), then `make sandbox-down`. It uses the
    sandbox's own names and network, so a sandbox left running is replaced."""
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    make = ["make", "--no-print-directory"]
    try:
        rc = sh([*make, "sandbox-down"], env=env) or sh([*make, "sandbox"], env=env)
        if rc:
            return rc
        print("$ make sandbox  (again: must report changed=0)", flush=True)
        again = subprocess.run([*make, "sandbox"], cwd=ROOT, env=env, capture_output=True, text=True)
        print(again.stdout[-3000:], again.stderr[-2000:], flush=True)
        recap = [line for line in again.stdout.splitlines() if " changed=" in line and " ok=" in line]
        if again.returncode or not recap or any(" changed=0 " not in line for line in recap):
            print("FAILED: the second run changed something (or failed)", flush=True)
            return 1
        if "nothing to do" not in again.stdout:
            print("FAILED: the re-run did not take deploy.yml's fast path", flush=True)
            return 1
        if "healthy (/health 200)" not in again.stdout or " completed " not in again.stdout:
            print("FAILED: make sandbox did not end with a healthy endpoint serving a completion", flush=True)
            return 1
        # Real vLLM on the converged cluster: changes, failures, rollback, a dead rank.
        return sh([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--durations=12", "tests/e2e"], env=env)
    finally:
        sh([*make, "sandbox-down"], env=env)


def ray_command() -> tuple[list[str], dict]:
    """The Ray backend's stories (tests/e2e_ray) on a second sandbox of their own, which they start and remove."""
    return ([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--durations=15", "tests/e2e_ray"],
            dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}"))


def gate_ray() -> int:
    argv, env = ray_command()
    return sh(argv, env=env)


GATES = {
    "harness": gate_harness,
    "oldest": gate_oldest,  # alone: it builds its venv (CI: on a fresh machine) and failed once beside molecule
    "yamllint": gate_yamllint,
    "ansible-lint": gate_ansible_lint,
    "ruff": gate_ruff,
    "pytest": gate_pytest,
    "integration": gate_integration,
    "sanity": gate_sanity,
    "package": gate_package,
    "docs": gate_docs,
    "molecule": gate_molecule,
    "sandbox": gate_sandbox,
    "ray": gate_ray,  # in the background beside sandbox: the two sandboxes side by side
}


# These gates only read the checkout and use this machine's CPU. They run
# while the molecule scenarios start (creating nodes, installing packages in
# them and converging wait on apt, SSH and Docker much of the time). The
# sandbox gate and the ray gate (two sandboxes) run side by side, last.
BESIDE_MOLECULE = ("yamllint", "ansible-lint", "ruff", "pytest", "integration", "sanity", "package", "docs")
# The Ray backend's stories run on a second sandbox of their own (tests/e2e_ray), beside the sandbox gate: each
# leaves the cores idle much of the time (waiting on vLLM, Ray, the watchdogs' windows) that the other uses.
BESIDE_SANDBOX = ("ray",)


class Background:
    """One gate's command in the background, its output kept in a file and
    printed once it ends."""

    def __init__(self, argv: list[str], env: dict) -> None:
        print(f"$ {' '.join(argv)}  (in the background; its output follows its end)", flush=True)
        fd, name = tempfile.mkstemp(prefix="vllmops-gate-", suffix=".log")
        self.log = Path(name)
        self.started, self.ended = time.monotonic(), None
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=fd, stderr=subprocess.STDOUT)
        os.close(fd)
        # When it ended, which may be before anyone waits for it (its time in the summary).
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()

    def wait(self) -> int:
        rc = self.proc.wait()
        sys.stdout.write(self.log.read_text(errors="replace"))
        sys.stdout.flush()
        self.log.unlink()
        return rc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def budgets(doc: Path = BUDGETS_DOC) -> dict[str, int]:
    """Gate -> seconds, from the rows `| `gate` | seconds | ... |` of the "### Time budget" table."""
    found, inside = {}, False
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            inside = line.strip() == "### Time budget"
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if inside and len(cells) >= 2 and cells[0].startswith("`") and cells[1].isdigit():
            found[cells[0].strip("`")] = int(cells[1])
    return found


def budget_report(results: list[tuple[str, int, float]], total: float, budget: dict[str, int]) -> list[str]:
    """The summary's rows: each gate's time against its budget, the total against TOTAL_BUDGET_S, and the gates
    that went over, by name."""
    rows, over = [], []
    for name, rc, seconds in results:
        allowed = budget.get(name)
        mark = "" if allowed is None or seconds <= allowed else "  OVER"
        if mark:
            over.append(f"{name} ({seconds:.0f} s of {allowed} s)")
        rows.append(f"{'PASS' if rc == 0 else 'FAIL'}  {name:<13} {seconds:7.1f} s"
                    f"{f' of {allowed:5d} s' if allowed is not None else ' (no budget)':>12}{mark}")
    rows.append(f"total {total:.0f} s of {TOTAL_BUDGET_S} s ({100 * total / TOTAL_BUDGET_S:.0f} %)"
                + ("  OVER" if total > TOTAL_BUDGET_S else ""))
    if over:
        rows.append("over budget: " + ", ".join(over) + " (docs/development.md, Time budget)")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=list(GATES), help="run only this gate (repeatable)")
    args = parser.parse_args()
    selected = [name for name in GATES if not args.only or name in args.only]
    results, endings = [], {}
    began = time.monotonic()
    molecule = images = ray = None
    sys.stdout = tail = Tail(sys.stdout)
    try:
        for name in selected:
            if name in BESIDE_MOLECULE and "molecule" in selected and molecule is None:
                print("\n===== molecule (started, beside the gates that follow) =====", flush=True)
                molecule = Background(*molecule_command())
            if name == "molecule" and molecule is not None and "sandbox" in selected:
                print("\n===== the sandbox's images (built beside molecule) =====", flush=True)
                images = Background(*sandbox_images_command())
            print(f"\n===== {name} =====", flush=True)
            tail.take()
            started, ended = time.monotonic(), None
            if name == "molecule" and molecule is not None:
                rc = molecule.wait()
                started, ended = molecule.started, molecule.ended
            elif name == "sandbox":
                # What both sandboxes use is built first (beside molecule when it ran), never by both at once.
                print("(waiting for the sandbox's images)", flush=True)
                if images is None:
                    argv, env = sandbox_images_command()
                    rc = sh(argv, env=env)
                else:
                    rc = images.wait()
                started = time.monotonic()
                if "ray" in selected and not rc:
                    print("\n===== ray (started, beside sandbox: a second sandbox of its own) =====", flush=True)
                    ray = Background(*ray_command())
                rc = rc or GATES[name]()
            elif name == "ray" and ray is not None:
                rc = ray.wait()
                started, ended = ray.started, ray.ended
            else:
                rc = GATES[name]()
            results.append((name, rc, (ended or time.monotonic()) - started))
            if rc:
                endings[name] = tail.take()
    finally:
        for background in (molecule, images, ray):
            if background is not None:
                background.stop()
    for name, lines in endings.items():
        print(f"\n===== how {name} ended =====", *lines, sep="\n")
    total = time.monotonic() - began
    print("\n===== summary =====")
    print(*budget_report(results, total, budgets()), sep="\n")
    if molecule is not None:
        print(f"(molecule ran beside {', '.join(n for n in selected if n in BESIDE_MOLECULE)}: its time includes theirs)")
    if ray is not None:
        print("(ray ran beside sandbox: its time includes the sandbox gate's)")
    failed = sum(1 for _, rc, _ in results if rc != 0)
    print(f"{len(results) - failed} passed, {failed} failed in {total:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
