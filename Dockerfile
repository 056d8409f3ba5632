# The rblnctl image: what host pods run (`rblnctl preflight --hosts`, `rblnctl vfio status --node`),
# and rblnctl anywhere a container is handier than a virtualenv. docs/preflight.md ("Host checks on
# every node") says how to build, push and point --image at it.
#
#   docker build -t REGISTRY/rblnctl:$(python3 -c 'import rblnctl; print(rblnctl.__version__)') .
#
# Host pods mount the node's directories read-only under /host and run as the non-root user below
# (rblnctl/constants.py HOST_POD_UID), with a read-only root filesystem and no capabilities.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY rblnctl ./rblnctl
RUN pip install . \
    && rm -rf /src \
    && useradd --system --uid 65532 --user-group --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin rblnctl

WORKDIR /
USER 65532:65532
ENTRYPOINT ["rblnctl"]
CMD ["--help"]
