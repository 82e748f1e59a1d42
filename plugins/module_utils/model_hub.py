# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Hugging Face Hub repository, read with the serving image's own huggingface_hub.

The client runs in a container of the serving image (the version the image
ships, its proxies and CA bundle), on the host network, with the target's
staging directory mounted. The token never reaches a command line, an
environment or a log: it is a 0600 file mounted read-only, named by
HF_TOKEN_PATH. The hub's own hashes check every file: sha256 for the files
in LFS (the weights), the git blob sha1 for the others. Every file name the
hub lists passes model_files.safe_name before it is joined to a path: a
hostile endpoint cannot make this host read or remove a file outside the
model's staging directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading

from ansible_collections.vllmops.cluster.plugins.module_utils import model_files
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import write_json

TOKEN_IN_CONTAINER = "/run/vllmops-hub-token"
MARKER = ".cache/vllmops-download.json"

# Runs in the image: argv is mode (info | config | download), repo, revision, local_dir. Prints one JSON line.
# config: the listing, and config.json's content read through the same client (no weight file is fetched).
SCRIPT = r"""
import json, sys
mode, repo, revision, dest = sys.argv[1:5]
def lfs_sha(entry):
    lfs = getattr(entry, "lfs", None)
    if lfs is None:
        return None
    return lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
try:
    from huggingface_hub import HfApi, snapshot_download
except Exception as err:
    print(json.dumps({"error": "ImportError", "message": repr(err)}))
    sys.exit(0)
try:
    info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    out = {"sha": info.sha, "files": [{"name": s.rfilename, "size": s.size, "sha256": lfs_sha(s), "blob_id": s.blob_id}
                                      for s in info.siblings or []]}
    if mode == "config" and any(s.rfilename == "config.json" for s in info.siblings or []):
        import tempfile
        from huggingface_hub import hf_hub_download
        with tempfile.TemporaryDirectory() as tmp:
            with open(hf_hub_download(repo, "config.json", revision=info.sha, local_dir=tmp)) as handle:
                out["config"] = json.load(handle)
    if mode == "download":
        snapshot_download(repo, revision=info.sha, local_dir=dest)
except Exception as err:
    out = {"error": type(err).__name__, "message": str(err)[-1500:]}
print(json.dumps(out))
"""


class HubError(Exception):
    pass


def explain(error, message, repo, revision, endpoint, has_token):
    """One sentence for what the client raised."""
    hub = endpoint or "the Hugging Face Hub"
    if error == "GatedRepoError":
        if has_token:
            return (f"{repo} is gated and model_hub_token may not read it: accept the model's terms on {hub} with the "
                    "account the token belongs to, or give that account's token")
        return (f"{repo} is gated: accept the model's terms on {hub}, then set model_hub_token to a token of that "
                "account (keep it in Ansible Vault)")
    if error == "RepositoryNotFoundError":
        return (f"{hub} has no model {repo}" + (" that model_hub_token may read" if has_token else
                " (or it is private: set model_hub_token)") + ": check model_hub_repo")
    if error == "RevisionNotFoundError":
        return f"{repo} has no revision {revision}: set model_hub_revision to one of its commits"
    if error == "ImportError":
        return ("the serving image has no usable huggingface_hub to download with (" + message + "): put the model on "
                "a node (model_source_host) or the controller (model_controller_path) instead")
    if error in ("LocalEntryNotFoundError", "ConnectError", "ConnectTimeout", "ConnectionError", "OfflineModeIsEnabled"):
        return f"cannot reach {hub} from this node ({error}: {message}): check model_hub_endpoint and the proxy"
    return f"the hub client failed: {error}: {message}"


def _listed(said, repo, revision, endpoint):
    """{name: entry} of the files the hub listed, each name checked before any path is built from it."""
    files = {}
    for entry in said.get("files") or []:
        name = entry.get("name") if isinstance(entry, dict) else None  # not an entry: refused like a bad name
        try:
            files[model_files.safe_name(name)] = entry
        except model_files.ModelError as err:
            raise HubError(f"{endpoint or 'the Hugging Face Hub'} lists for {repo} at {revision} a file outside the "
                           f"model's directory, so its listing was refused and nothing was removed: {err}; "
                           "check model_hub_endpoint") from None
    return files


def _check(name, entry, path):
    """The file's sha256 when it is the hub's (its sha256 for LFS files, its git blob sha1 for the rest), else None."""
    full = os.path.join(path, name)
    if not os.path.isfile(full) or os.path.getsize(full) != entry["size"]:
        return None
    if entry.get("sha256"):  # in LFS: the weights, read once
        sha256 = model_files.sha256_file(full)
        return sha256 if sha256 == entry["sha256"] else None
    sha256, blob_id = model_files.sha256_and_git_blob_sha1(full)
    return None if entry.get("blob_id") and blob_id != entry["blob_id"] else sha256


class Hub:
    """Calls to the hub through the image's client, on this host's engine (a DockerClient)."""

    def __init__(self, docker, image, endpoint="", token="", timeout=7200):
        self.docker, self.image, self.endpoint, self.token, self.timeout = docker, image, endpoint, token, timeout

    def _run(self, mode, repo, revision, dest="", binds=()):
        env = ["HF_HUB_OFFLINE=0", "HF_HUB_DISABLE_TELEMETRY=1", "HF_HUB_DISABLE_PROGRESS_BARS=1",
               "HF_HOME=/tmp/vllmops-hf-home", "TRANSFORMERS_OFFLINE=0"]
        if self.endpoint:
            env.append("HF_ENDPOINT=" + self.endpoint.rstrip("/"))
        binds = list(binds)
        secrets = None
        try:
            if self.token:
                secrets = tempfile.mkdtemp(prefix="vllmops-hub-")  # 0700
                token_file = os.path.join(secrets, "token")
                with os.fdopen(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
                    out.write(self.token)
                binds.append(f"{token_file}:{TOKEN_IN_CONTAINER}:ro")
                env.append("HF_TOKEN_PATH=" + TOKEN_IN_CONTAINER)
            run = self.docker.run(self.image, ["python3"], ["-c", SCRIPT, mode, repo, revision, dest], self.timeout,
                                  labels={"io.vllmops.task": "model-download"}, env=env,
                                  host_config={"NetworkMode": "host", "Binds": binds})
        except DockerError as err:
            raise HubError(f"running python3 in {self.image} failed ({err}): the image needs python3 with huggingface_hub "
                           "to download; or put the model on a node (model_source_host) or the controller "
                           "(model_controller_path)") from err
        finally:
            if secrets:
                shutil.rmtree(secrets, ignore_errors=True)
        if run.timed_out:
            raise HubError(f"the hub client ran longer than {self.timeout} s and was stopped (model_download_timeout); "
                           "a re-run resumes the download")
        lines = [ln for ln in run.stdout.decode(errors="replace").splitlines() if ln.startswith("{")]
        try:
            said = json.loads(lines[-1])
        except (IndexError, ValueError):
            tail = run.stderr.decode(errors="replace")[-800:]
            raise HubError(f"the hub client in {self.image} said nothing we understand (exit {run.status}): {tail}") from None
        if "error" in said:
            raise HubError(explain(said["error"], said.get("message", ""), repo, revision, self.endpoint, bool(self.token)))
        return said

    def info(self, repo, revision):
        """The commit and {name: {size, sha256 (LFS only, else None), blob_id}} of repo at revision."""
        said = self._run("info", repo, revision)
        return said["sha"], _listed(said, repo, revision, self.endpoint)

    def info_and_config(self, repo, revision):
        """info(), and the repository's config.json at that commit (None when it has none), in one client run:
        what the model is, known before a byte of its weights moves."""
        said = self._run("config", repo, revision)
        config = said.get("config")
        return said["sha"], _listed(said, repo, revision, self.endpoint), config if isinstance(config, dict) else None

    def download(self, repo, revision, path, progress_path=None):
        """Download repo at revision into path's staging directory, check it against the hub's hashes and keep it as
        a version of the model at path (model_files.commit_version: what path serves does not change, unless nothing
        was there); return (the version's manifest, its `path` the version's directory; bytes downloaded now)."""
        staging = model_files.staging_path(path)
        marker = os.path.join(staging, MARKER)
        want = {"repo": repo, "revision": revision}
        try:
            with open(marker) as handle:
                resumable = json.load(handle) == want
        except (OSError, ValueError):
            resumable = False
        if os.path.lexists(staging) and not resumable:
            shutil.rmtree(staging)
        os.makedirs(os.path.dirname(marker), mode=0o755, exist_ok=True)
        with open(marker, "w") as out:
            json.dump(want, out)
        finished = {name: info.st_size for name, info in model_files.listing(staging).items()}  # kept by the client
        watcher = _Progress(progress_path, staging)
        state = "failed"
        try:
            said = self._run("download", repo, revision, staging, [f"{staging}:{staging}"])
            state = "downloaded"
        finally:
            watcher.stop(state)
        listed = _listed(said, repo, revision, self.endpoint)
        hashes = {name: _check(name, entry, staging) for name, entry in listed.items()}
        bad = sorted(name for name, sha in hashes.items() if sha is None)
        if bad:
            for name in bad:  # the next run downloads these again
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(staging, name))
            raise HubError(f"{len(bad)} downloaded files differ from the hub's hashes ({', '.join(bad[:5])}); they were "
                           "removed, a re-run downloads them again")
        downloaded = sum(entry["size"] for name, entry in listed.items() if finished.get(name) != entry["size"])
        shutil.rmtree(os.path.join(staging, ".cache"), ignore_errors=True)
        listing = model_files.listing(staging)
        extra = sorted(set(listing) - set(listed))
        if extra:
            raise HubError(f"the download holds files the hub does not list at {revision}: {', '.join(extra[:5])}")
        # The same inodes after the rename to the version's directory: the hashes just checked carry over.
        files = {name: {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": hashes[name]}
                 for name, info in listing.items()}
        source = {"hub": repo, "revision": said["sha"], "endpoint": self.endpoint or ""}
        return model_files.commit_version(staging, path, files, source), downloaded


def _tree_bytes(path):
    total = 0
    for top, _dirs, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total


class _Progress:
    """Bytes under the staging directory, written to progress_path every 2 s while the client downloads."""

    def __init__(self, progress_path, staging):
        self.path, self.staging = progress_path, staging
        self.done = threading.Event()
        self.thread = None
        if progress_path:
            os.makedirs(os.path.dirname(progress_path), exist_ok=True)
            self.thread = threading.Thread(target=self._loop, daemon=True)
            self.thread.start()

    def _loop(self):
        while not self.done.wait(2):
            self._write("downloading")

    def _write(self, state):
        write_json(self.path, {"state": state, "bytes": _tree_bytes(self.staging)})

    def stop(self, state):
        self.done.set()
        if self.thread:
            self.thread.join(5)
            self._write(state)
