# Student and TA entry points. `make grade` and `make test` set themselves up.
PYTHON ?= python3
VENV ?= .venv
ifeq ($(NO_VENV),1)
PY := $(PYTHON)
else
PY := $(VENV)/bin/python
endif
SUBMISSION ?= assignment
REPORT_DIR ?= grade-report
SUBMISSIONS ?= submissions
BATCH_DIR ?= batch-reports
SEED ?=
GRADE_FLAGS ?=
CALIBRATE_FLAGS ?=
FORMAT ?= gradescope
ASSIGNMENT ?=
GRADESCOPE_SCORES ?=
ALLOW ?=
JOBS ?=
EXECUTOR ?=
SLURM_PARTITION ?=
GPUS_PER_TASK ?=
RUBRIC ?=
SERVER ?=
TOKEN ?=
DISPLAY_NAME ?=
JOB ?=
LIST ?=
TOKEN_FILE ?=
ACTION ?=
ID ?=
ARGS ?=
ROSTER ?= roster.csv
DATA ?= runner-data
PORT ?= 8000
SERVE_FLAGS ?=

export PYTHON VENV NO_VENV TOKEN_FILE

.PHONY: help setup grade hint submit serve tokens runner test test-fast fuzz lint batch regrade gradebook merge dist gradescope bench calibrate docs clean

help:
	@echo "make grade                 grade assignment/ (SUBMISSION=path for a folder or .zip)"
	@echo "make hint TASK=w8a8 LEVEL=1  one hint (TASK w8a8|w4a16|dds, LEVEL 1|2|3), nothing else"
	@echo "make submit SERVER=url     grade on the course GPU, token in ~/.runner-token (SUBMISSION=dir, DISPLAY_NAME=name, LIST=1, JOB=id) -> gpu-report/<job>/"
ifneq ($(wildcard solutions),)
	@echo "make test                  the project's own test suite"
	@echo "make test-fast             its tests that grade nothing in the interpreter (minutes, not half an hour)"
	@echo "make fuzz                  fuzz the static check longer than make test does (FUZZ_EXAMPLES=5000)"
	@echo "make lint                  ruff check (the settings are in pyproject.toml)"
	@echo "make batch SUBMISSIONS=dir grade a whole class (TA)"
	@echo "make regrade STUDENT=id    regrade one student of the batch, rebuild class.csv (TA)"
	@echo "make gradebook FORMAT=f    class.csv as a gradescope, canvas or moodle upload file (TA; ALLOW=kinds)"
	@echo "make merge GRADESCOPE_SCORES=csv  Gradescope's correctness + the batch's GPU performance (TA)"
	@echo "make serve ROSTER=csv      the course GPU runner: students' make submit graded here (TA; DATA=dir PORT=n SERVE_FLAGS=...)"
	@echo "make tokens ACTION=list    the runner's tokens: list, revoke ID=s, reissue ID=s (TA; DATA=dir)"
	@echo "make runner ARGS='jobs'    the runner for the TA: jobs, requeue, grant, close, open, extend, export (DATA=dir)"
	@echo "make dist                  build the student bundle in dist/ (TA)"
	@echo "make gradescope            build a Gradescope autograder zip (TA)"
	@echo "make bench                 GPU benchmark of the reference solutions"
	@echo "make calibrate             place the performance thresholds on this GPU (TA; CALIBRATE_FLAGS=...)"
	@echo "make docs                  regenerate the docs' tables and the handout's totals from the rubric and results/"
endif

setup:
	@bash tools/setup_env.sh

grade: setup
	$(PY) -m grader grade $(SUBMISSION) --report-dir $(REPORT_DIR) $(if $(SEED),--seed $(SEED)) $(GRADE_FLAGS)

# One hint file, printed only when asked for (hints/<task>-<level>.md).
hint:
	@case "$(TASK)-$(LEVEL)" in \
	  w8a8-[123]|w4a16-[123]|dds-[123]) cat "hints/$(TASK)-$(LEVEL).md" ;; \
	  *) echo "usage: make hint TASK=w8a8|w4a16|dds LEVEL=1|2|3  (1: the idea, 2: pseudo-code, 3: the step that needs care)"; exit 2 ;; \
	esac

# The course GPU runner (docs/runner.md): upload, wait, the same table as make grade.
# SERVER reaches tools.submit through the environment; the token too (TOKEN) or from its file
# (TOKEN_FILE, default ~/.runner-token): never on a command line, where ps shows it.
submit: setup
	@test -n "$$SERVER" || { echo "usage: make submit SERVER=https://... [SUBMISSION=dir] [DISPLAY_NAME=name] [LIST=1] [JOB=id] (your token in ~/.runner-token, or TOKEN_FILE=file)"; exit 2; }
	@$(PY) -m tools.submit $(SUBMISSION) $(if $(DISPLAY_NAME),--display-name "$(DISPLAY_NAME)") $(if $(JOB),--job "$(JOB)") $(if $(LIST),--list)

ifneq ($(wildcard tests),)
serve:
	@REQUIREMENTS=requirements-serve.txt bash tools/setup_env.sh
	$(PY) -m classroom serve --roster $(ROSTER) --data $(DATA) --port $(PORT) $(SERVE_FLAGS)

# The runner's tokens and its TA commands (docs/runner.md, "Running a semester"), in the venv.
tokens:
	@test -n "$(ACTION)" || { echo "usage: make tokens ACTION=list|revoke|reissue [ID=student] [DATA=dir]"; exit 2; }
	$(PY) -m classroom tokens --data $(DATA) $(ACTION) $(ID)

runner:
	@test -n "$(ARGS)" || { echo "usage: make runner ARGS='jobs [--failed] | requeue JOB | grant ID N | close [--at TIME] | open | extend ID --until TIME | export FILE' [DATA=dir]"; exit 2; }
	$(PY) -m classroom runner --data $(DATA) $(ARGS)

test:
	@REQUIREMENTS=requirements-dev.txt bash tools/setup_env.sh
	$(PY) -m pytest tests -q -p no:cacheprovider -n 2 --dist loadfile --durations=25

# The tests not marked slow: none grades in the interpreter (tests/conftest.py).
test-fast:
	@REQUIREMENTS=requirements-dev.txt bash tools/setup_env.sh
	$(PY) -m pytest tests -q -p no:cacheprovider -n 2 --dist loadfile -m "not slow"

# The static check's property-based fuzzing, longer than in make test (100 examples per generator).
FUZZ_EXAMPLES ?= 5000
fuzz:
	@REQUIREMENTS=requirements-dev.txt bash tools/setup_env.sh
	STATICCHECK_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/integrity/test_staticcheck_fuzz.py -q -p no:cacheprovider

lint:
	@REQUIREMENTS=requirements-dev.txt bash tools/setup_env.sh
	$(PY) -m ruff check .
else
test: setup
	@echo "The student bundle has no project tests: run 'make grade' to check your kernels."
endif

batch: setup
	$(PY) -m classroom batch $(SUBMISSIONS) --out $(BATCH_DIR) $(if $(JOBS),--jobs $(JOBS)) \
	  $(if $(EXECUTOR),--executor $(EXECUTOR)) $(if $(SLURM_PARTITION),--slurm-partition $(SLURM_PARTITION)) \
	  $(if $(GPUS_PER_TASK),--gpus-per-task $(GPUS_PER_TASK)) $(GRADE_FLAGS)

regrade: setup
	@test -n "$(STUDENT)" || { echo "usage: make regrade STUDENT=id (the id column of class.csv, the file name, an email or a SID)"; exit 2; }
	$(PY) -m classroom regrade $(SUBMISSIONS) "$(STUDENT)" --out $(BATCH_DIR) $(GRADE_FLAGS)

gradebook: setup
	$(PY) -m classroom gradebook $(BATCH_DIR)/class.csv --format $(FORMAT) $(if $(ASSIGNMENT),--assignment "$(ASSIGNMENT)") \
	  $(if $(ALLOW),--allow $(ALLOW))

merge: setup
	@test -n "$(GRADESCOPE_SCORES)" || { echo "usage: make merge GRADESCOPE_SCORES=file.csv [FORMAT=gradescope|canvas] (Gradescope's Download Grades CSV of the assignment)"; exit 2; }
	$(PY) -m classroom merge "$(GRADESCOPE_SCORES)" $(BATCH_DIR)/class.csv --format $(FORMAT) $(if $(ASSIGNMENT),--assignment "$(ASSIGNMENT)") \
	  $(if $(ALLOW),--allow $(ALLOW))

dist: setup
	$(PY) -m tools.dist dist $(if $(RUBRIC),--rubric $(RUBRIC))

gradescope: setup
	$(PY) -m tools.gradescope_zip dist/gradescope.zip $(if $(RUBRIC),--rubric $(RUBRIC))

bench: setup
	$(PY) -m bench.bench

calibrate: setup
	$(PY) -m tools.calibrate $(CALIBRATE_FLAGS)

docs: setup
	$(PY) -m tools.render_results

clean:
	rm -rf $(REPORT_DIR) dist .pytest_cache
