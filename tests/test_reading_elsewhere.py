"""The README's "Reading the output elsewhere" blocks, run as written in a folder holding the
demo output (`out/demo`, and `out/demo-ar` written with `format: array_record`), each followed
by a few lines checking what it read. DALI is not installable here (PyPI holds only
placeholder `nvidia-dali*` packages; the real wheels are on NVIDIA's index): its block is
checked for the index-file contract instead, the PyPI `tfrecord` reader reading every shard
through the same `index_path` list the block builds (in its own process: it cannot be
imported beside TensorFlow). The PyTorch block runs where torch is installed: `make test`
runs it with `.venv-torch`'s Python after the main run.

docs/reading.md's "TFDS" block runs on both outputs, and its "Many hosts" block for real:
the tf.distribute lines in 2 worker processes joined by TF_CONFIG on loopback
(MultiWorkerMirroredStrategy), the JAX line in 3 processes joined by
`jax.distributed.initialize` on loopback, the random-access lines for each rank."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from etl.read.random_access import open_records
from tests.helpers import ROOT, TRAIN, ids_output, record_ids

README = os.path.join(ROOT, "README.md")
READING = os.path.join(ROOT, "docs", "reading.md")
IDS = "ids/out"  # the workspace's ids output (tests.helpers.write_ids_job): one id per record


def blocks() -> dict[str, str]:
    """First comment word of each python block of the section -> the block."""
    text = Path(README).read_text(encoding="utf-8")
    section = text.split("\n## Reading the output elsewhere\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```python\n(# (\w+)[^\n]*\n.*?)```", section, re.S)
    return {name: code for code, name in found}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.pipelines import run_example as run  # noqa: PLC0415

    root = tmp_path_factory.mktemp("elsewhere")
    run("demo", root / "out" / "demo")
    (root / "ids").mkdir()
    ids_output(root / "ids")
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


@pytest.mark.slow
def test_grain_block(workspace):
    out = run_block(workspace, blocks()["Grain"],
                    "print(batch['image'].shape[1:], batch['image'].dtype, batch['label'].dtype)")
    assert out == "(8, 8, 1) uint8 int64\n"


@pytest.mark.slow
def test_pytorch_block(workspace):
    pytest.importorskip("torch")
    out = run_block(workspace, blocks()["PyTorch"],
                    "print(sum(1 for _ in loader), batch['image'].shape[1:], batch['label'].dtype)")
    assert out == "47 torch.Size([8, 8, 1]) torch.int64\n"


@pytest.mark.slow
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


@pytest.mark.slow
def test_array_record_block(workspace):
    if not (workspace / "out" / "demo-ar").exists():
        pytest.skip("the ArrayRecord writer (issue 22, writer side) is not in this checkout yet")
    out = run_block(workspace, blocks()["ArrayRecord"],
                    "print(len(source), records[0]['image'].shape)")
    assert out == "1500 (8, 8, 1)\n"


def doc_blocks(title: str) -> list[str]:
    """The python blocks of docs/reading.md's section `title`."""
    text = Path(READING).read_text(encoding="utf-8")
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def many_hosts() -> dict[str, str]:
    """The "Many hosts" block's paragraphs, by the first word of their comment line."""
    (block,) = doc_blocks("Many hosts")
    return {part.split()[1].rstrip(":"): part for part in block.strip().split("\n\n")}


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_hosts(workspace: Path, scripts: list[str]) -> list[list[int]]:
    """Each script in its own process at once (they wait for each other), each printing the
    JSON list of the ids it read; killed together when one fails or hangs."""
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=workspace, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for code in scripts]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def host_ids(workspace: Path, count: int, batch_size: int = 256) -> list[list[int]]:
    """What make_dataset(shard=(h, count), seed=7) gives each host h, in this process."""
    from etl.read.dataset import make_dataset  # noqa: PLC0415 - TensorFlow only here

    return [[i for b in make_dataset(workspace / IDS, seed=7, batch_size=batch_size,
                                     shard=(h, count))
             for i in b["id"].numpy().tolist()] for h in range(count)]


def assert_every_record_once(parts: list[list[int]], count: int) -> None:
    assert sorted(sum(parts, [])) == list(range(TRAIN))
    sizes = [len(p) for p in parts]  # 5 shards, `count` hosts not dividing them: ranges
    assert len(parts) == count and max(sizes) - min(sizes) <= 1
    assert all(p != sorted(p) for p in parts)  # shuffled


@pytest.mark.slow
def test_tfds_block(workspace):
    """docs/reading.md's TFDS block as written (out/demo), and on the ArrayRecord output."""
    (block,) = doc_blocks("TFDS")
    check = ("import etl\nm = etl.open_records('out/demo', 'train')\nassert n == len(m)\n"
             "print(sum(1 for _ in ds) if 'ds' in dir() else len(source))")
    assert run_block(workspace, block, check) == f"{round(1500 * 0.1)}\n"
    if (workspace / "out" / "demo-ar").exists():
        ar = block.replace('"out/demo"', '"out/demo-ar"')
        assert run_block(workspace, ar, check.replace("out/demo", "out/demo-ar")) == "1500\n"


@pytest.mark.slow
def test_many_hosts_tf_distribute_block(workspace):
    """The tf.distribute lines, 2 workers of MultiWorkerMirroredStrategy in 2 processes."""
    code = many_hosts()["tf.distribute"]
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    scripts = [f"""
import json, os
os.environ["TF_CONFIG"] = json.dumps({{"cluster": {cluster!r}, "task": {{"type": "worker", "index": {i}}}}})
import tensorflow as tf
import etl
out = {IDS!r}
{code}
ids = [i for batch in dist for t in strategy.experimental_local_results(batch)
       for i in t["id"].numpy().tolist()]
print(json.dumps(ids))
""" for i in range(2)]
    parts = run_hosts(workspace, scripts)
    assert_every_record_once(parts, 2)
    assert parts == host_ids(workspace, 2, batch_size=512)  # the same seed, the same order per host


@pytest.mark.slow
def test_many_hosts_jax_block(workspace):
    """The JAX line in 3 processes joined by jax.distributed.initialize on loopback."""
    pytest.importorskip("jax")
    code = many_hosts()["JAX"]
    (port,) = free_ports(1)
    scripts = [f"""
import json
import jax
jax.distributed.initialize("127.0.0.1:{port}", num_processes=3, process_id={i})
import etl
out = {IDS!r}
{code}
print(json.dumps([i for batch in ds for i in batch["id"].numpy().tolist()]))
""" for i in range(3)]
    parts = run_hosts(workspace, scripts)
    assert_every_record_once(parts, 3)
    assert parts == host_ids(workspace, 3)


@pytest.mark.slow
def test_many_hosts_random_access_block(workspace):
    """The random-access lines for each rank of 3 (torch: in `make test`'s .venv-torch)."""
    pytest.importorskip("torch")
    code = many_hosts()["random"]
    check = f"""
import json
import etl
out = {IDS!r}
parts = []
for rank in range(3):
    world_size = 3
{textwrap.indent(code, "    ")}
    ids = [int(i) for i in part[:]["id"]]
    assert ids == [int(ds[j]["id"]) for j in range(len(ds))]
    parts.append(ids)
print(json.dumps(parts))
"""
    parts = json.loads(run_block(workspace, "", check))
    assert sorted(sum(parts, [])) == list(range(TRAIN))
    assert sum(parts, []) == record_ids(open_records(workspace / IDS, "train"))
    assert [len(p) for p in parts] == [334, 334, 335]
