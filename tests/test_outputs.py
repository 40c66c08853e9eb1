"""sim/outputs.py: output paths checked before a run, files written
atomically (docs/bad-input.md)."""

import os

import pytest

from golden.config import ConfigError
from sim import outputs


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), outputs.atomic(target, "--json") as f:
        f.write("half")
        raise RuntimeError("the run fails mid-write")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "out.json"]
    outputs.write_text(target, "new\n", "--json")
    assert target.read_text() == "new\n" and len(list(tmp_path.iterdir())) == 1


def test_a_new_file_gets_the_umask_mode_and_an_old_one_keeps_its_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        outputs.write_text(tmp_path / "a.txt", "x", "--csv")
        assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
        (tmp_path / "a.txt").chmod(0o600)
        outputs.write_text(tmp_path / "a.txt", "y", "--csv")
        assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(mask)


@pytest.mark.parametrize("path, needle", [
    ("", "--json: empty path"),
    ("{tmp}", "is a folder, not a file"),
    ("{tmp}/missing/x.json", "does not exist"),
    ("{tmp}/file.txt/x.json", "does not exist"),
])
def test_unwritable_paths_are_named_before_the_run(tmp_path, path, needle):
    (tmp_path / "file.txt").write_text("")
    with pytest.raises(ConfigError, match=needle):
        outputs.check_file(path.format(tmp=tmp_path), "--json")


def test_folders_are_checked_up_to_the_nearest_existing_one(tmp_path):
    (tmp_path / "file.txt").write_text("")
    outputs.check_dir(str(tmp_path / "new" / "deeper"), "--plot")  # can be made
    with pytest.raises(ConfigError, match="is not a folder"):
        outputs.check_dir(str(tmp_path / "file.txt" / "x"), "--plot")
    with pytest.raises(ConfigError, match="--plot: empty path"):
        outputs.check_dir("", "--plot")


def test_a_device_is_written_in_place_never_replaced():
    outputs.write_text("/dev/null", "x", "--json")
    assert not os.path.isfile("/dev/null")
