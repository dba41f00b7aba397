"""What remote workers get (transforms/staging.py): our wheel and dependency pins at the
launcher's versions, added only off the local runner and only when the user chose none of
Beam's own staging options; a real template build against the GCS emulator uploads them.
Also the Dockerfile's base image and the Flex Template metadata (templates/)."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import sys
import zipfile

import pytest
import tomllib
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from tests.gcs_emulator import offline_dataflow
from tests.helpers import ROOT
from transforms import staging

DATAFLOW = ["--runner=DataflowRunner", "--project=my-project-123", "--region=us-central1",
            "--temp_location=gs://my-bucket/tmp"]


def declared_dependencies() -> dict[str, str]:
    """pyproject.toml's runtime dependencies: normalised name -> name as written."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    names = [re.match(r"[A-Za-z0-9_.-]+", d).group(0) for d in deps]
    return {n.lower().replace("_", "-"): n for n in names}


def source_modules() -> set[str]:
    """Every module file of the packages pyproject.toml ships, plus run_pipeline.py."""
    out = {"run_pipeline.py"}
    for package in ("etl", "transforms", "cli", "benchmarks"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, package)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            out.update(os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")
                       for f in filenames if f.endswith(".py"))
    return out


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> staging.Staging:
    return staging.worker_staging(PipelineOptions(DATAFLOW),
                                  cache_root=str(tmp_path_factory.mktemp("cache")))


def _option(args: tuple[str, ...], name: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(values) == 1, (name, args)
    return values[0]


def test_dataflow_run_stages_our_wheel_and_pins_at_the_launchers_versions(staged) -> None:
    wheel = _option(staged.args, "extra_package")
    assert os.path.basename(wheel) == f"tfrecord_etl-{md.version('tfrecord-etl')}-py3-none-any.whl"
    assert _option(staged.args, "requirements_cache") == "skip"  # no pip download at launch
    pins = staging.read_pins(_option(staged.args, "requirements_file"))
    pinned = {re.split(r"[\[=]", p)[0].lower(): p for p in pins}
    expected = (set(declared_dependencies()) - {"setuptools"}) | {"protobuf"}
    assert set(pinned) == expected
    for key, pin in pinned.items():
        assert pin.endswith(f"=={md.version(key)}"), pin
    assert pinned["apache-beam"] == f"apache-beam[gcp]=={md.version('apache-beam')}"
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    assert source_modules() <= names
    assert {n for n in names if n.endswith(".py")} == source_modules()
    assert staged.note.startswith("staging for DataflowRunner workers: tfrecord_etl-")
    assert f"and {len(pins)} dependency pins" in staged.note


def test_the_wheel_is_byte_identical_when_rebuilt(staged, tmp_path) -> None:
    again = staging.build_wheel(ROOT, cache_root=str(tmp_path))
    first = _option(staged.args, "extra_package")
    assert again != first
    with open(again, "rb") as a, open(first, "rb") as b:
        assert a.read() == b.read()
    with zipfile.ZipFile(again) as whl:  # SOURCE_DATE_EPOCH, not the build's clock
        assert {i.date_time for i in whl.infolist()} == {(1980, 1, 1, 0, 0, 0)}


@pytest.mark.parametrize("given", [
    "--setup_file=/src/pyproject.toml", "--extra_package=/src/dist/other-1.0-py3-none-any.whl",
    "--requirements_file=/src/requirements.txt", "--sdk_container_image=gcr.io/p/etl:1",
    "--worker_harness_container_image=gcr.io/p/etl:1"])
def test_the_users_staging_options_win(given, tmp_path) -> None:
    options = PipelineOptions([*DATAFLOW, given])
    result = staging.worker_staging(options, cache_root=str(tmp_path))
    assert result.args == ()
    name = given.split("=")[0].replace("--extra_package", "--extra_packages")
    assert result.note == f"staging for DataflowRunner workers: left to your {name} (nothing added)"
    assert not os.path.exists(os.path.join(tmp_path, "staging"))  # nothing built
    assert staging.pipeline_options([*DATAFLOW, given]).get_all_options() \
        == options.get_all_options()


def test_a_users_requirements_cache_is_kept(tmp_path) -> None:
    args = [*DATAFLOW, f"--requirements_cache={tmp_path}/cache"]
    result = staging.worker_staging(PipelineOptions(args), cache_root=str(tmp_path))
    assert not any(a.startswith("--requirements_cache") for a in result.args)
    setup = PipelineOptions(args + list(result.args)).view_as(SetupOptions)
    assert setup.requirements_cache == f"{tmp_path}/cache"
    assert setup.extra_packages == [_option(result.args, "extra_package")]


@pytest.mark.parametrize("runner", [["--runner=FnApiRunner"], ["--runner=DirectRunner"], [],
                                    ["--runner=apache_beam.runners.direct.DirectRunner"]])
def test_local_runners_get_nothing(runner, tmp_path) -> None:
    result = staging.worker_staging(PipelineOptions(runner), cache_root=str(tmp_path))
    assert result == staging.Staging((), "")
    assert staging.pipeline_options(runner).get_all_options() \
        == PipelineOptions(runner).get_all_options()
    assert not os.path.exists(os.path.join(tmp_path, "staging"))


def test_a_failed_build_names_the_way_out(tmp_path) -> None:
    root = tmp_path / "src"
    (root / "etl").mkdir(parents=True)
    (root / "etl" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text('[project]\nname = "tfrecord-etl"\nversion = "not a version"\n')
    with pytest.raises(staging.ConfigError) as err:
        staging.build_wheel(str(root), cache_root=str(tmp_path / "cache"))
    message = str(err.value)
    assert message.startswith(f"could not build tfrecord-etl from {root}/pyproject.toml")
    assert "--extra_package, --setup_file or --sdk_container_image" in message
    assert os.listdir(tmp_path / "cache" / "staging") == []  # no half build left


@pytest.mark.slow
def test_template_build_against_the_emulator_stages_our_package(gcs_emulator, gcs_bucket,
                                                                 monkeypatch, tmp_path) -> None:
    import apache_beam as beam

    offline_dataflow(gcs_emulator, monkeypatch)
    args = ["--runner=DataflowRunner", f"--template_location={gcs_bucket}/templates/etl.json",
            f"--temp_location={gcs_bucket}/tmp", f"--staging_location={gcs_bucket}/staging",
            "--project=my-project-123", "--region=us-central1", "--no_auth"]
    monkeypatch.setattr(staging, "_cache_dir", lambda _: str(tmp_path / "staging"))
    options = staging.pipeline_options(args)
    p = beam.Pipeline(options=options)
    _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2)
    p.run()

    objects = gcs_emulator.list(f"{gcs_bucket}/staging/")
    by_name = {o.rsplit("/", 1)[1]: o for o in objects}
    setup = options.view_as(SetupOptions)
    wheel = os.path.basename(setup.extra_packages[0])
    assert {wheel, "extra_packages.txt", "requirements.txt", "pipeline.pb"} <= set(by_name)
    assert len({o.rsplit("/", 1)[0] for o in objects}) == 1  # one job's staging folder
    staged_wheel = gcs_emulator.download(by_name[wheel])
    with open(setup.extra_packages[0], "rb") as fh:
        assert staged_wheel == fh.read()
    local = tmp_path / wheel
    local.write_bytes(staged_wheel)
    with zipfile.ZipFile(local) as whl:
        names = set(whl.namelist())
        assert {n for n in names if n.endswith(".py")} == source_modules()
        assert {"etl/shuffle/engine.py", "transforms/convert.py", "run_pipeline.py"} <= names
        assert whl.read("etl/shuffle/engine.py") == open(os.path.join(ROOT, "etl/shuffle/engine.py"),
                                                        "rb").read()
    assert gcs_emulator.download(by_name["extra_packages.txt"]).decode() == f"{wheel}\n"
    requirements = gcs_emulator.download(by_name["requirements.txt"]).decode().splitlines()
    assert requirements == staging.read_pins(setup.requirements_file)
    assert f"apache-beam[gcp]=={md.version('apache-beam')}" in requirements
    template = json.loads(gcs_emulator.download(f"{gcs_bucket}/templates/etl.json"))
    assert template["environment"]["sdkPipelineOptions"]["options"]["extra_packages"] \
        == setup.extra_packages


# --- the worker image and the Flex Template ---------------------------------------------------

def test_dockerfile_builds_on_the_launchers_beam_and_python() -> None:
    with open(os.path.join(ROOT, "Dockerfile")) as fh:
        text = fh.read()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    assert args["BEAM_VERSION"] == md.version("apache-beam")
    assert args["PYTHON_VERSION"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "FROM apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION}" in text
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in text
    assert "-r /tmp/tfrecord-etl/requirements.txt" in text and "--no-deps" in text


def load_flex_main():
    sys.path.insert(0, os.path.join(ROOT, "templates"))
    try:
        import flex_main
    finally:
        sys.path.pop(0)
    return flex_main


METADATA = os.path.join(ROOT, "templates", "metadata.json")
SAMPLES = {
    "job": (["gs://my-bucket/jobs/images.yaml", "gs://a.b-c_d/x/y/job.yml", "gs://abc/j.json"],
            ["/local/job.yaml", "gs://my-bucket/jobs/images.txt", "gs://Bad_Bucket/j.yaml",
             "gs://ab/j.yaml", "gs://my-bucket/", "gs://my-bucket/jobs/.yaml/", "s3://b/j.yaml",
             "gs://my-bucket/a b.yaml"]),
    "output": (["gs://my-bucket/datasets/images", "gs://my-bucket/d/", "gs://abc/x"],
               ["gs://my-bucket", "gs://my-bucket/", "out/images", "gs://my-bucket/a b",
                "gs://-bad/x"]),
    "date": (["2026-11-22", "2024-02-29", "1999-12-31"],
             ["2026-13-01", "2026-1-1", "20261122", "2026-11-32", "2026-11-22T00:00"]),
}


def test_flex_template_metadata_is_valid_and_its_regexes_mean_what_they_say() -> None:
    with open(METADATA) as fh:
        meta = json.load(fh)
    assert meta["name"] == "tfrecord-etl" and meta["description"] and meta["streaming"] is False
    params = {p["name"]: p for p in meta["parameters"]}
    assert list(params) == ["job", "output", "date"]
    assert [params[n]["isOptional"] for n in params] == [False, False, True]
    for p in meta["parameters"]:
        assert set(p) <= {"name", "label", "helpText", "paramType", "isOptional", "regexes"}
        assert p["label"] and p["helpText"] and p["regexes"]
        assert p["paramType"] in ("TEXT", "GCS_READ_FILE", "GCS_WRITE_FOLDER")
        good, bad = SAMPLES[p["name"]]
        regexes = [re.compile(rx) for rx in p["regexes"]]
        for value in good:
            assert all(rx.fullmatch(value) for rx in regexes), (p["name"], value)
        for value in bad:
            assert not all(rx.fullmatch(value) for rx in regexes), (p["name"], value)
        example = p["helpText"].rsplit("Example: ", 1)[1]
        assert all(rx.fullmatch(example) for rx in regexes), example


def test_flex_entry_point_turns_parameters_into_our_command_line(capsys) -> None:
    flex = load_flex_main()
    assert flex.to_cli(["--job=gs://my-bucket/jobs/a.yaml", "--output=gs://my-bucket/out/",
                        "--date=2026-11-22", "--runner=DataflowRunner", "--region=us-central1"]) \
        == ["run", "gs://my-bucket/jobs/a.yaml", "--output", "gs://my-bucket/out/2026-11-22",
            "--runner=DataflowRunner", "--region=us-central1"]
    assert flex.to_cli(["--output=gs://my-bucket/out", "--job=gs://my-bucket/a.json"]) \
        == ["run", "gs://my-bucket/a.json", "--output", "gs://my-bucket/out"]
    with pytest.raises(SystemExit) as exit_:
        flex.to_cli(["--job=gs://my-bucket/jobs/a.yaml", "--output=gs://my-bucket/o",
                     "--date=2026-13-01"])
    assert exit_.value.code == 2
    assert "--date='2026-13-01' is not a valid run date" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        flex.to_cli(["--job=gs://my-bucket/jobs/a.yaml"])  # output is required
    assert "the following arguments are required: --output" in capsys.readouterr().err
