"""The conversion as Dataflow would run it, translated offline (`--dry_run=True`): the
default strategy there is `engine`, whose records travel through Beam's own GroupByKey (so
Dataflow Shuffle moves them), with the plan as a side input and one finalize step; no spill
files. The input files travel in one read-plan file, so the job graph does not grow with
their number."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.pipeline_context import PipelineContext

from cli.run import plan_reads
from etl.contract.schema import load_schema
from etl.job.config import job_from_dict
from etl.shuffle import engine, files, strategy_for
from tests.helpers import cli
from transforms.coders import ChunkCoder, PlainDataclassCoder, SortedRunCoder
from transforms.convert import ConvertToShards
from transforms.convert import flat_settings as ConvertSpec

DATAFLOW = ["--runner=DataflowRunner", "--project=my-project-123", "--region=us-central1",
            "--temp_location=gs://my-bucket/tmp", "--dry_run=True", "--no_auth"]
ENGINE_STEPS = ["Start", "ListInputFiles", "SplitFiles", "DistributeReads", "ReadEncode",
                "GatherStats", "BlockStats", "MergeStats", "PlanShards", "PartitionByShard", "EveryShard",
                "Flatten", "GroupByShard", "WriteShards", "Finalize"]


def test_engine_is_the_default_off_the_local_runner() -> None:
    assert strategy_for(None, "DataflowRunner") is engine
    assert strategy_for(None, "FnApiRunner") is files
    assert strategy_for(None, None) is files  # Beam's default: the DirectRunner
    assert strategy_for("files", "DataflowRunner") is files


def _translate(tmp_path: Path, num_files: int, via: str = engine.NAME) -> tuple[dict, bytes]:
    """Translate the conversion of `num_files` CSV files for Dataflow; (steps, job proto)."""
    data = tmp_path / "data"
    data.mkdir(parents=True)
    for i in range(num_files):
        (data / f"part-{i:05d}.csv").write_text(f"id\n{i}\n")
    (tmp_path / "s.yaml").write_text("name: s\nkind: example\nfeatures:\n"
                                     "  id: {dtype: int64, shape: []}\n")
    job = job_from_dict({"schema": "s.yaml", "output": "gs://my-bucket/out",
                         "sources": {"train": {"format": "csv", "paths": ["data/*.csv"]}}},
                        path="job.yaml", base_dir=str(tmp_path))
    read_plan = plan_reads(job)
    assert len(read_plan.units) == num_files
    spec = ConvertSpec(schema_yaml=load_schema(job.schema_path).to_yaml(), sources=job.sources,
                       base_dir=str(tmp_path), fractions={}, seed=0,
                       spill_dir="gs://my-bucket/tmp/spill",
                       staging_dir="gs://my-bucket/tmp/staging", compression="none",
                       splits=("train",), shards=4, shard_size=None, max_shard_bytes=1 << 28,
                       via=via, read_plan="gs://my-bucket/tmp/read_plan.json")
    p = beam.Pipeline(options=PipelineOptions(DATAFLOW))
    _ = p | "Convert" >> ConvertToShards(spec)
    proto = p.run().job.proto_pipeline
    steps = {t.unique_name: t for t in proto.components.transforms.values()}
    _translate.proto = proto  # type: ignore[attr-defined]
    return steps, proto.SerializeToString()


def only(values):
    (value,) = values
    return value


@pytest.mark.slow
def test_dataflow_translation_of_the_engine_path(tmp_path) -> None:
    steps, _ = _translate(tmp_path, 3)
    top = sorted(n.split("/")[1] for n in steps if n.count("/") == 1)
    assert top == sorted(ENGINE_STEPS)
    assert steps["Convert/GroupByShard"].spec.urn == "beam:transform:group_by_key:v1"
    partition = steps["Convert/PartitionByShard"]
    assert partition.spec.urn == "beam:transform:pardo:v1"
    # the merged plan arrives as a side input of the partition step
    assert sorted(partition.inputs) == ["None", "python_side_input0"]
    # the finalize step waits for every shard result, read report and the statistics
    # gathered per split in the same pass (side inputs)
    assert sorted(steps["Convert/Finalize"].inputs) == [
        "None", "python_side_input0", "python_side_input1", "python_side_input2"]
    assert not any("Spill" in n for n in steps)
    # the shard writer gets the plan as a side input, and what is shuffled has declared,
    # deterministic coders (not the pickling fallback): (split, index) -> Chunk, SortedRun
    assert sorted(steps["Convert/WriteShards"].inputs) == ["None", "python_side_input0"]
    context = PipelineContext(_translate.proto.components)  # type: ignore[attr-defined]
    pcolls = _translate.proto.components.pcollections  # type: ignore[attr-defined]
    grouped = context.coders[pcolls[only(steps["Convert/GroupByShard"].inputs.values())].coder_id]
    assert isinstance(grouped, coders.TupleCoder)
    key, value = grouped.coders()
    assert key.is_deterministic() and key == coders.TupleCoder(
        [coders.StrUtf8Coder(), coders.VarIntCoder()])
    assert isinstance(value, ChunkCoder) and value.is_deterministic()
    runs = pcolls[steps["Convert/ReadEncode"].outputs["None"]].coder_id
    assert isinstance(context.coders[runs], SortedRunCoder)
    tasks = pcolls[only(steps["Convert/SplitFiles"].outputs.values())].coder_id
    assert isinstance(context.coders[tasks], PlainDataclassCoder)  # into DistributeReads


@pytest.mark.slow
def test_job_graph_does_not_grow_with_the_number_of_input_files(tmp_path) -> None:
    _, few = _translate(tmp_path / "few", 10)
    _, many = _translate(tmp_path / "many", 10_000)
    # the file list is in the read plan, not in the graph: the same size up to a few bytes
    # of differing numbers (the 10,000 paths alone would be over 500 KB)
    assert abs(len(many) - len(few)) < 200, (len(few), len(many))
    assert len(many) < 200_000  # Dataflow's limit on a job request is 10 MB


@pytest.mark.slow
def test_files_strategy_translates_without_a_flatten(tmp_path) -> None:
    steps, _ = _translate(tmp_path, 3, via=files.NAME)
    top = {n.split("/")[1] for n in steps if n.count("/") == 1}
    assert "ShardTasks" in top and "DistributeShards" in top
    assert not any(s.spec.urn == "beam:transform:flatten:v1" for s in steps.values())


def _cli_job(folder: Path, inputs: str, output: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text("name: s\nkind: example\nfeatures:\n"
                                   "  id: {dtype: int64, shape: []}\n")
    (folder / "job.yaml").write_text(
        f"schema: s.yaml\noutput: {output}\nshards: 2\n"
        f"sources: {{train: {{format: csv, paths: ['{inputs}']}}}}\n")
    return str(folder / "job.yaml")


@pytest.mark.slow
def test_cli_dry_run_on_dataflow_translates_and_publishes_nothing(tmp_path, gcs_emulator,
                                                                 gcs_bucket) -> None:
    """The user's command with `--dry_run=True`: inputs in a bucket, output in a bucket; the job
    is translated with our staged package, exit 0, one line saying nothing was published."""
    gcs_emulator.upload_bytes(b"id\n" + b"".join(b"%d\n" % i for i in range(50)),
                              f"{gcs_bucket}/raw/a.csv")
    job = _cli_job(tmp_path, f"{gcs_bucket}/raw/*.csv", f"{gcs_bucket}/out")
    proc = cli("run", job, *DATAFLOW[:-1], f"--temp_location={gcs_bucket}/tmp",
               env=gcs_emulator.env())
    assert proc.returncode == 0, proc.stderr
    assert "Dry run: the job was translated, not submitted; nothing was published" in proc.stdout
    assert not [u for u in gcs_emulator.list(f"{gcs_bucket}/out") if u.endswith("_SUCCESS")]


@pytest.mark.slow
def test_dataflow_refuses_inputs_on_this_machine(tmp_path) -> None:
    (tmp_path / "a.csv").write_text("id\n1\n")
    job = _cli_job(tmp_path, "a.csv", "gs://my-bucket/out")
    proc = cli("run", job, *DATAFLOW)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {job}: runner DataflowRunner runs on other machines, which cannot read 1 local "
        f"input file(s), e.g. {tmp_path / 'a.csv'}; copy the inputs to a bucket (gs://...) and "
        "point the job's paths there"]
