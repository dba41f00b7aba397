# One image for Dataflow workers and for Flex Template launches: Beam's own Python SDK image
# at the launcher's Beam and Python versions, with our wheel and its pinned dependencies
# installed. Workers started from it need nothing from PyPI; pass it as
# --sdk_container_image (automatic staging then adds nothing).
#
#   python -m transforms.staging dist/        # our wheel + requirements.txt (the pins)
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/tfrecord-etl:0.1.0 .
#
# BEAM_VERSION and PYTHON_VERSION must equal the launcher's (tests/test_staging.py checks the
# defaults against the environment the tests run in).
ARG BEAM_VERSION=2.77.0
ARG PYTHON_VERSION=3.11

# Google's Flex Template launcher binary (only used when the image launches a Flex Template)
FROM gcr.io/dataflow-templates-base/python311-template-launcher-base:latest AS template_launcher

FROM apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION}

COPY dist/ /tmp/tfrecord-etl/
# the pins first (the launcher's exact versions), then our wheel without dependency
# resolution, then pip check: a conflict fails the image build, not a worker at run time
RUN pip install --no-cache-dir --disable-pip-version-check -r /tmp/tfrecord-etl/requirements.txt \
 && pip install --no-cache-dir --disable-pip-version-check --no-deps /tmp/tfrecord-etl/*.whl \
 && pip check \
 && rm -rf /tmp/tfrecord-etl

COPY --from=template_launcher /opt/google/dataflow/python_template_launcher \
     /opt/google/dataflow/python_template_launcher
COPY templates/flex_main.py templates/metadata.json /template/
ENV FLEX_TEMPLATE_PYTHON_PY_FILE=/template/flex_main.py

# workers: Beam's boot program (the Flex Template service runs the launcher binary itself)
ENTRYPOINT ["/opt/apache/beam/boot"]
