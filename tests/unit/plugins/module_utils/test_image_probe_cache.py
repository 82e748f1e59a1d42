"""Probe results cached by image ID and probe version."""

from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.cache import cache_path, read_cache, write_cache


def test_a_written_result_is_read_back_for_the_same_id_and_version(tmp_path):
    write_cache(str(tmp_path), "sha256:abc", 1, {"vllm": {"version": "0.16.0"}})
    assert read_cache(str(tmp_path), "sha256:abc", 1) == {"vllm": {"version": "0.16.0"}}
    assert read_cache(str(tmp_path), "sha256:def", 1) is None  # another image
    assert read_cache(str(tmp_path), "sha256:abc", 2) is None  # a newer probe ignores older results


def test_a_corrupt_entry_is_a_miss(tmp_path):
    with open(cache_path(str(tmp_path), "sha256:abc", 1), "w", encoding="utf-8") as handle:
        handle.write("{half")
    assert read_cache(str(tmp_path), "sha256:abc", 1) is None


def test_a_cache_that_cannot_be_written_costs_nothing_but_speed(tmp_path):
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    write_cache(str(blocked), "sha256:abc", 1, {"x": 1})
    assert read_cache(str(blocked), "sha256:abc", 1) is None


def test_the_id_makes_a_plain_file_name(tmp_path):
    assert cache_path("/c", "sha256:ab/cd", 3) == "/c/sha256_ab_cd-v3.json"
