# TA grading image: the same grader as `make grade`, run as a non-root user.
#   docker build -t quant-grader .
#   docker run --rm --gpus all --network none \
#     -v "$PWD/submissions:/submissions:ro" -v "$PWD/batch-reports:/reports" \
#     quant-grader batch /submissions --out /reports
# Any official pytorch/pytorch *-runtime tag that matches the host driver works.
ARG BASE_IMAGE=pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NO_VENV=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /grader
COPY requirements.txt .
# PyTorch and Triton come with the base image; pip keeps them (requirements are ranges).
RUN pip install --no-cache-dir -r requirements.txt

# Code owned by root and read-only for the grading user: a submission cannot edit it.
COPY assignment/ assignment/
COPY grader/ grader/
COPY tools/ tools/
COPY Makefile handout.md ./
RUN useradd --create-home --uid 1000 grader && mkdir -p /reports && chown grader /reports

USER 1000
ENTRYPOINT ["python", "-m", "grader"]
CMD ["--help"]
