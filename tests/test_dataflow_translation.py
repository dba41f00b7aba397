"""The conversion as Dataflow would run it, translated offline (`--dry_run=True`): the
default strategy there is `engine`, whose records travel through Beam's own GroupByKey (so
Dataflow Shuffle moves them), with the plan as a side input and one finalize step; no spill
files."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from etl.config import job_from_dict
from etl.schema import load_schema
from etl.shuffle import engine, files, strategy_for
from transforms.convert import ConvertSpec, ConvertToShards
from transforms.job import plan_reads

DATAFLOW = ["--runner=DataflowRunner", "--project=my-project-123", "--region=us-central1",
            "--temp_location=gs://my-bucket/tmp", "--dry_run=True", "--no_auth"]


def test_engine_is_the_default_off_the_local_runner() -> None:
    assert strategy_for(None, "DataflowRunner") is engine
    assert strategy_for(None, "FnApiRunner") is files
    assert strategy_for(None, None) is files  # Beam's default: the DirectRunner
    assert strategy_for("files", "DataflowRunner") is files


def test_dataflow_translation_of_the_engine_path(tmp_path) -> None:
    (tmp_path / "a.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(100)))
    (tmp_path / "s.yaml").write_text("name: s\nkind: example\nfeatures:\n"
                                     "  id: {dtype: int64, shape: []}\n")
    job = job_from_dict({"schema": "s.yaml", "output": "gs://my-bucket/out",
                         "sources": {"train": {"format": "csv", "paths": ["a.csv"]}}},
                        path="job.yaml", base_dir=str(tmp_path))
    tasks, _ = plan_reads(job)
    spec = ConvertSpec(schema_yaml=load_schema(job.schema_path).to_yaml(), sources=job.sources,
                       base_dir=str(tmp_path), fractions={}, seed=0,
                       spill_dir="gs://my-bucket/tmp/spill",
                       staging_dir="gs://my-bucket/tmp/staging", compression="none",
                       splits=("train",), shards=4, shard_size=None, max_shard_bytes=1 << 28,
                       via=engine.NAME)
    p = beam.Pipeline(options=PipelineOptions(DATAFLOW))
    _ = p | "Convert" >> ConvertToShards(spec, tasks)
    proto = p.run().job.proto_pipeline
    steps = {t.unique_name: t for t in proto.components.transforms.values()}
    top = sorted(n.split("/")[1] for n in steps if n.count("/") == 1)
    assert top == sorted(["ListInputFiles", "ReadEncode", "BlockStats", "MergeStats",
                          "PlanShards", "PartitionByShard", "ShardPlans", "Flatten",
                          "GroupByShard", "WriteShards", "KeyShards", "KeyReports", "KeyNotes",
                          "JoinResults", "CollectResults", "Finalize"])
    assert steps["Convert/GroupByShard"].spec.urn == "beam:transform:group_by_key:v1"
    partition = steps["Convert/PartitionByShard"]
    assert partition.spec.urn == "beam:transform:pardo:v1"
    # the merged plan arrives as a side input of the partition step
    assert sorted(partition.inputs) == ["None", "python_side_input0"]
    assert not any("Spill" in n for n in steps)
