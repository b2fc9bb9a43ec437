# Grading image: the same grader as `make grade`, with student code run as another user.
#   docker build -t quant-grader .
#   docker run --rm --gpus all --network none --hostname localhost \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     --security-opt systempaths=unconfined \
#     -v "$PWD/submissions:/submissions:ro" -v "$PWD/batch-reports:/reports" \
#     quant-grader grader grade /submissions/alice.zip --report-dir /reports/alice
# A whole class (the TA's image): ... quant-grader classroom batch /submissions --out /reports
# Any official pytorch/pytorch *-runtime tag that matches the host driver works.
# tools/docker_check.sh builds this image and checks the users and the sandbox.
ARG BASE_IMAGE=pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NO_VENV=1 \
    PIP_NO_CACHE_DIR=1

# sudo: the grader (uid 1000) starts each task's worker as `student` (uid 1001) through one
# sudoers rule that allows nothing else; setpriv (util-linux) adds no_new_privs. closefrom_override
# lets the grader keep the worker's pipes open through sudo (sudo -C).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends sudo util-linux procps \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /grader
COPY requirements.txt toolchain.txt ./
# The grading toolchain (toolchain.txt: torch, triton, numpy pinned as constraints): pip keeps
# the base image's PyTorch and Triton when they are the pinned ones and replaces them otherwise;
# the image is not built when its versions still differ.
RUN pip install --no-cache-dir -r requirements.txt -c toolchain.txt

COPY assignment/ assignment/
COPY grader/ grader/
COPY classroom/ classroom/
COPY tools/ tools/
COPY Makefile handout.md ./
RUN python -m grader.toolchain --check
# grader: owns the grader's files, read-only even to itself, and nobody else may read them
# (rubric, references); it is in the student group to clean the worker's scratch folders.
# student: runs submissions; owns nothing here.
RUN useradd --create-home --uid 1000 grader \
 && useradd --no-create-home --uid 1001 --shell /usr/sbin/nologin student \
 && usermod -aG student grader \
 && printf '%s\n' "Defaults:grader closefrom_override" "grader ALL=(student) NOPASSWD: ALL" \
      > /etc/sudoers.d/grader-student \
 && chmod 0440 /etc/sudoers.d/grader-student \
 && chown -R grader:grader /grader && chmod -R u=rX,go= /grader \
 && mkdir -p /reports && chown grader /reports && chmod 0700 /reports

USER 1000
ENTRYPOINT ["python", "-m"]
CMD ["grader", "--help"]
