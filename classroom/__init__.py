"""The TA's classroom: grade a whole class with the engine (``grader``), keep the
class files, talk to the platforms. ``python -m classroom``; see docs/classroom.md.

    batch.py          grade every submission of a folder, one grade process each: the class loop
    grade_process.py  one student's grade process: command, supervisor, clean-up, reports installed
    reports.py        report.json read defensively; class.csv and summary.md rebuilt from the reports
    slots.py          where parallel grade processes run (--gpus, --jobs); the cores to spare
    gpus.py           a batch on several GPUs: one grade process per GPU
    cluster.py        the class as a Slurm job array (submitit)
    lms/         the platforms: submission layouts, rosters, gradebook uploads
    cli.py       the command line

Nothing in ``grader/`` imports this package (tests/engine/test_import_graph.py): the
engine grades one submission and ships alone to students and to Gradescope.
"""
