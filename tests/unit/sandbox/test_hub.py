"""The Hub stand-in answers the real huggingface_hub client (2.4.0, the serving image's) as the Hub would:
downloads to a local_dir, file metadata, the client's own error classes, gated access, Range, the CLI."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HUB_PY = Path(__file__).resolve().parents[2] / "sandbox" / "hub.py"
hf = pytest.importorskip("huggingface_hub", minversion="2.4.0",
                         reason="huggingface_hub (2.4.0, pinned in requirements.txt) is not in this venv: run `make venv`")
errors = pytest.importorskip("huggingface_hub.errors")
file_download = pytest.importorskip("huggingface_hub.file_download")

REPO, GATED, TOKEN = "org/model", "org/gated", "hf_sandbox_reader"
FILES = ("config.json", "tokenizer.json", "model.safetensors")


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n".encode()


@pytest.fixture(scope="module")
def hub(load_script):
    return load_script("sandbox_hub", HUB_PY)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("source")
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (folder / "model.safetensors").write_bytes(os.urandom(12 * 1000 * 1000))
    return folder


@pytest.fixture(scope="module")
def published(hub, source, tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("hub")
    commit = hub.publish(root, REPO, source)
    assert hub.publish(root, GATED, source) == commit  # named by the files alone
    return root, commit


@pytest.fixture
def server(hub, published, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hf.constants, "HF_HUB_OFFLINE", False)  # read once at import: the caller's shell may set it
    with hub.HubServer(published[0], gated={GATED: TOKEN}) as running:
        yield running


def download(server, tmp_path, repo=REPO, revision=None, token=False) -> Path:
    return Path(hf.snapshot_download(repo, revision=revision, local_dir=tmp_path / "out", token=token,
                                     endpoint=server.url, cache_dir=tmp_path / "cache"))


def requests_of(server) -> set[tuple[str, str]]:
    return {(method, path.split("?")[0]) for method, path in server.requests}


def test_a_download_at_a_commit_gives_the_published_bytes_over_plain_http(hub, server, published, source, tmp_path):
    commit = published[1]
    out = download(server, tmp_path, revision=commit)
    assert out == (tmp_path / "out").resolve()
    for name in FILES:
        assert (out / name).read_bytes() == (source / name).read_bytes()
    resolve = f"/{REPO}/resolve/{commit}"
    assert requests_of(server) == {("GET", f"/api/models/{REPO}/tree/{commit}")} | {
        (method, f"{resolve}/{name}") for name in FILES for method in ("HEAD", "GET")}  # GET, not Xet, for the LFS file too
    metadata = (out / ".cache/huggingface/download/model.safetensors.metadata").read_text().splitlines()
    assert metadata[:2] == [commit, hashlib.sha256((source / "model.safetensors").read_bytes()).hexdigest()]
    verified = hf.HfApi(endpoint=server.url).verify_repo_checksums(REPO, revision=commit, local_dir=out, token=False)
    assert (verified.checked_count, verified.mismatches, verified.missing_paths, verified.extra_paths) == (3, [], [], [])
    assert hub.publish(tmp_path / "again", REPO, out) == commit  # the client's .cache/huggingface is no repo content


def test_a_repeated_download_trusts_local_dir_metadata_and_hashes_lfs_files(server, published, tmp_path):
    commit = published[1]
    download(server, tmp_path, revision=commit)
    server.requests.clear()
    download(server, tmp_path, revision=commit)
    assert server.requests == []  # tree listing and per-file metadata both cached for an immutable commit
    for name in ("model.safetensors", "config.json"):
        (tmp_path / f"out/.cache/huggingface/download/{name}.metadata").unlink()
    download(server, tmp_path, revision=commit)
    resolve = f"/{REPO}/resolve/{commit}"
    # Without metadata the client HEADs both: the LFS file's sha256 ETag matches the local file's hash, kept;
    # a git file's ETag is a sha1 the client does not compute, so it is downloaded again.
    assert requests_of(server) == {("HEAD", f"{resolve}/model.safetensors"), ("HEAD", f"{resolve}/config.json"),
                                   ("GET", f"{resolve}/config.json")}


def test_main_is_resolved_to_the_published_commit(server, published, source, tmp_path):
    out = download(server, tmp_path)
    assert server.requests[0][1].startswith(f"/api/models/{REPO}/revision/main")
    assert (out / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
    assert hf.HfApi(endpoint=server.url).model_info(REPO, token=False).sha == published[1]


def test_model_info_gives_each_file_its_size_git_blob_id_and_lfs_hash(server, published, source):
    info = hf.HfApi(endpoint=server.url).model_info(REPO, revision=published[1], files_metadata=True, token=False)
    assert info.sha == published[1]
    siblings = {sibling.rfilename: sibling for sibling in info.siblings}
    assert sorted(siblings) == sorted(FILES)
    for name in ("config.json", "tokenizer.json"):
        data = (source / name).read_bytes()
        assert (siblings[name].size, siblings[name].blob_id, siblings[name].lfs) == (len(data), git_sha1(data), None)
    weights = (source / "model.safetensors").read_bytes()
    lfs = siblings["model.safetensors"].lfs
    assert siblings["model.safetensors"].size == len(weights)
    assert siblings["model.safetensors"].blob_id == git_sha1(lfs_pointer(weights))  # git stores the pointer
    assert (lfs.sha256, lfs.size, lfs.pointer_size) == (hashlib.sha256(weights).hexdigest(), len(weights), len(lfs_pointer(weights)))


ERRORS = [
    # call, repo, revision ("published": the published commit), token, the client's exception class
    ("download", "org/missing", "published", False, "RepositoryNotFoundError"),
    ("download", "org/missing", "published", "hf_someone", "RepositoryNotFoundError"),
    ("model_info", "org/missing", None, False, "RepositoryNotFoundError"),
    ("download", REPO, "0" * 40, False, "RevisionNotFoundError"),
    ("model_info", REPO, "v9.9", False, "RevisionNotFoundError"),
    ("download", GATED, "published", False, "GatedRepoError"),
    ("download", GATED, "published", "hf_wrong", "GatedRepoError"),
    ("download", GATED, None, "hf_wrong", "GatedRepoError"),
]


@pytest.mark.parametrize(("call", "repo", "revision", "token", "error"), ERRORS,
                         ids=["no repo", "no repo, with token", "no repo, model_info", "no commit", "no revision, model_info",
                              "gated, no token", "gated, wrong token", "gated at main, wrong token"])
def test_the_client_raises_its_own_error_class(server, published, tmp_path, call, repo, revision, token, error):
    revision = published[1] if revision == "published" else revision
    with pytest.raises(errors.HfHubHTTPError) as raised:
        if call == "download":
            download(server, tmp_path, repo=repo, revision=revision, token=token)
        else:
            hf.HfApi(endpoint=server.url).model_info(repo, revision=revision, token=token)
    assert type(raised.value) is getattr(errors, error)  # exact: GatedRepoError is a RepositoryNotFoundError too
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_gated_repo_downloads_with_its_token_and_shows_as_gated(server, published, source, tmp_path):
    out = download(server, tmp_path, repo=GATED, revision=published[1], token=TOKEN)
    assert all((out / name).read_bytes() == (source / name).read_bytes() for name in FILES)
    assert hf.HfApi(endpoint=server.url).model_info(GATED, token=False).gated == "manual"  # metadata is public, as on the Hub


def test_endpoint_and_token_come_from_the_environment(server, published, source, tmp_path):
    """HF_ENDPOINT is read once at import, so the client runs in a fresh interpreter, as in the serving image."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING_FACE_"))}
    env |= {"HF_ENDPOINT": server.url, "HF_TOKEN": TOKEN, "HF_HOME": str(tmp_path / "home")}
    script = "import sys, huggingface_hub as hf; print(hf.snapshot_download(sys.argv[1], revision=sys.argv[2], local_dir=sys.argv[3]))"
    proc = subprocess.run([sys.executable, "-c", script, GATED, published[1], str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == (tmp_path / "out").resolve()
    assert all((tmp_path / "out" / name).read_bytes() == (source / name).read_bytes() for name in FILES)


def test_the_client_resumes_a_download_with_a_range_request(server, published, source, tmp_path):
    data = (source / "model.safetensors").read_bytes()
    url = f"{server.url}/{REPO}/resolve/{published[1]}/model.safetensors"
    kept = 5_000_000
    with (tmp_path / "part").open("wb") as part:
        part.write(b"\0" * kept)  # not the real prefix: a server ignoring Range would have it replaced
        file_download.http_get(url, part, resume_size=kept, expected_size=len(data))
    assert (tmp_path / "part").read_bytes() == b"\0" * kept + data[kept:]


@pytest.mark.parametrize(("wanted", "status", "body", "content_range"), [
    ("bytes=10-19", 206, slice(10, 20), "bytes 10-19/12000000"),
    ("bytes=11999990-", 206, slice(11999990, None), "bytes 11999990-11999999/12000000"),
    ("bytes=-5", 206, slice(-5, None), "bytes 11999995-11999999/12000000"),
    ("bytes=12000000-", 416, None, "bytes */12000000"),
])
def test_range_requests_are_answered_like_a_cdn(server, published, source, wanted, status, body, content_range):
    data = (source / "model.safetensors").read_bytes()
    request = urllib.request.Request(f"{server.url}/{REPO}/resolve/main/model.safetensors", headers={"Range": wanted})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer, headers, code = response.read(), response.headers, response.status
    except urllib.error.HTTPError as error:
        answer, headers, code = error.read(), error.headers, error.code
    assert (code, headers["Content-Range"]) == (status, content_range)
    assert body is None or answer == data[body]


def test_a_commit_is_named_by_file_names_and_contents(hub, source, tmp_path):
    copy = shutil.copytree(source, tmp_path / "copy")
    os.utime(copy / "config.json", (0, 0))
    first = hub.publish(tmp_path / "root", REPO, source)
    assert hub.publish(tmp_path / "root", REPO, copy) == first
    (copy / "config.json").write_text("{}")
    second = hub.publish(tmp_path / "root", REPO, copy)
    (copy / "config.json").rename(copy / "other.json")
    assert len({first, second, hub.publish(tmp_path / "root", REPO, copy)}) == 3
    assert (tmp_path / f"root/{REPO}/refs/main").read_text().strip() != first
    assert (tmp_path / f"root/{REPO}/{first}/config.json").read_bytes() == (source / "config.json").read_bytes()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HUB_PY), *args], capture_output=True, text=True, timeout=60)


def runs(pid: int) -> bool:
    try:
        return b"hub.py" in Path(f"/proc/{pid}/cmdline").read_bytes()  # empty once a zombie
    except OSError:
        return False


def test_the_cli_publishes_starts_a_detached_server_and_stops_it(source, tmp_path):
    root, pidfile = tmp_path / "root", tmp_path / "run/hub.pid"
    commit = run_cli("publish", "--root", str(root), "--repo", GATED, "--source", str(source)).stdout.strip()
    assert len(commit) == 40
    started = run_cli("start", "--root", str(root), "--port", "0", "--gated", f"{GATED}={TOKEN}", "--pidfile", str(pidfile))
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    pid = int(pidfile.read_text())
    try:
        with urllib.request.urlopen(f"{url}/api/models/{GATED}", timeout=10) as response:
            assert json.load(response)["sha"] == commit
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/{GATED}/resolve/main/config.json", timeout=10)
        assert (refused.value.code, refused.value.headers["X-Error-Code"]) == (401, "GatedRepo")
    finally:
        assert run_cli("stop", "--pidfile", str(pidfile)).returncode == 0
    assert not pidfile.exists()
    assert not runs(pid)
    assert run_cli("stop", "--pidfile", str(pidfile)).returncode == 0  # not running: nothing to do
