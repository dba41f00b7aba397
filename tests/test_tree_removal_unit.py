"""etl.storage.tree_removal: every file and folder of the trees removed, links removed but never
followed, files outside untouched, the first error raised once the rest is removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from etl.storage import tree_removal
from etl.storage.tree_removal import remove_trees


def make_tree(root: Path, files: int) -> list[Path]:
    made = []
    for i in range(files):
        path = root / f"d{i % 3}" / f"sub{i % 2}" / f"f{i}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes([i % 256]) * (i * 1000))
        made.append(path)
    return made


@pytest.mark.parametrize("threads", [1, 4])
def test_every_tree_and_file_is_removed_and_nothing_beside_them(tmp_path: Path,
                                                                 threads: int) -> None:
    make_tree(tmp_path / "spill", 40)
    make_tree(tmp_path / "previous-output", 7)
    (tmp_path / "read_plan.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "_ETL_RUN.json").write_text("marker")
    remove_trees([str(tmp_path / n) for n in ("spill", "previous-output", "read_plan.json",
                                             "empty", "gone-already")], threads=threads)
    assert sorted(os.listdir(tmp_path)) == ["_ETL_RUN.json"]


def test_links_are_removed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "users"
    kept = make_tree(outside, 5)
    tree = tmp_path / "run" / "spill"
    tree.mkdir(parents=True)
    (tree / "to-dir").symlink_to(outside, target_is_directory=True)
    (tree / "to-file").symlink_to(kept[0])
    (tmp_path / "run" / "link-at-top").symlink_to(outside, target_is_directory=True)
    remove_trees([str(tree), str(tmp_path / "run" / "link-at-top")])
    assert os.listdir(tmp_path / "run") == []
    assert all(p.exists() for p in kept)


def test_the_first_error_is_raised_after_the_rest_is_removed(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    made = make_tree(tmp_path / "spill", 12)
    stuck = str(made[5])
    unlink = os.unlink

    def refusing(path: str) -> None:  # root may unlink anything: the refusal is simulated
        if path == stuck:
            raise PermissionError(13, "Permission denied", path)
        unlink(path)

    monkeypatch.setattr(tree_removal.os, "unlink", refusing)
    with pytest.raises(PermissionError) as got:
        remove_trees([str(tmp_path / "spill")], threads=4)
    assert got.value.filename == stuck
    left = [str(p) for p in (tmp_path / "spill").rglob("*") if p.is_file()]
    assert left == [stuck]


def test_the_trees_files_are_taken_in_turns() -> None:
    big = [f"prev/{i}" for i in range(2)]
    small = [f"spill/{i}" for i in range(6)]
    assert tree_removal._in_turns([big, small]) == [
        "spill/0", "prev/0", "spill/1", "spill/2", "spill/3", "prev/1", "spill/4", "spill/5"]
