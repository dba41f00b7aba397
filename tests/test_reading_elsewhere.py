"""The README's "Reading the output elsewhere" blocks, run as written in a folder holding the
demo output (`out/demo`, and `out/demo-ar` written with `format: array_record`), each followed
by a few lines checking what it read. DALI is not installable here (PyPI holds only
placeholder `nvidia-dali*` packages; the real wheels are on NVIDIA's index): its block is
checked for the index-file contract instead, the PyPI `tfrecord` reader reading every shard
through the same `index_path` list the block builds (in its own process: it cannot be
imported beside TensorFlow). The PyTorch block runs where torch is installed: `make test`
runs it with `.venv-torch`'s Python after the main run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

README = os.path.join(ROOT, "README.md")


def blocks() -> dict[str, str]:
    """First comment word of each python block of the section -> the block."""
    text = Path(README).read_text(encoding="utf-8")
    section = text.split("\n## Reading the output elsewhere\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```python\n(# (\w+)[^\n]*\n.*?)```", section, re.S)
    return {name: code for code, name in found}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.test_random_access import run  # noqa: PLC0415

    root = tmp_path_factory.mktemp("elsewhere")
    run("demo", root / "out" / "demo")
    try:
        import etl.formats.array_record  # noqa: F401, PLC0415 - the writer side of issue 22
    except ImportError:
        return root
    run("demo", root / "out" / "demo-ar", format="array_record", index=False)
    return root


def run_block(workspace: Path, code: str, check: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code + "\n" + check], cwd=workspace,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_section_shows_the_four_loaders():
    assert sorted(blocks()) == ["ArrayRecord", "Grain", "NVIDIA", "PyTorch"]


def test_grain_block(workspace):
    out = run_block(workspace, blocks()["Grain"],
                    "print(batch['image'].shape[1:], batch['image'].dtype, batch['label'].dtype)")
    assert out == "(8, 8, 1) uint8 int64\n"


def test_pytorch_block(workspace):
    pytest.importorskip("torch")
    out = run_block(workspace, blocks()["PyTorch"],
                    "print(sum(1 for _ in loader), batch['image'].shape[1:], batch['label'].dtype)")
    assert out == "47 torch.Size([8, 8, 1]) torch.int64\n"


def test_dali_block_index_contract(workspace):
    """The block's shard and index lists, read with the PyPI `tfrecord` reader through those
    index files (split in 3 parts by index entries), give exactly open_records' records."""
    code = blocks()["NVIDIA"]
    assert 'index_path=[s + ".index" for s in shards]' in code
    shards_line = next(line for line in code.splitlines() if line.startswith("shards = "))
    check = f"""
import glob
import numpy as np
from tfrecord.reader import tfrecord_loader
{shards_line}
labels, images = [], []
for s in shards:
    for part in range(3):
        for r in tfrecord_loader(s, s + ".index", {{"image": "byte", "label": "int"}},
                                 shard=(part, 3)):
            labels.append(int(r["label"][0]))
            images.append(bytes(r["image"]))
import etl
records = etl.open_records("out/demo", split="train")
want = records[np.arange(len(records))]
assert labels == want["label"].tolist()
assert images == [im.tobytes() for im in want["image"]]
print(len(shards), len(labels))
"""
    assert run_block(workspace, "", check) == "4 1500\n"


def test_array_record_block(workspace):
    if not (workspace / "out" / "demo-ar").exists():
        pytest.skip("the ArrayRecord writer (issue 22, writer side) is not in this checkout yet")
    out = run_block(workspace, blocks()["ArrayRecord"],
                    "print(len(source), records[0]['image'].shape)")
    assert out == "1500 (8, 8, 1)\n"
