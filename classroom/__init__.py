"""The TA's classroom: grade a whole class with the engine (``grader``), keep the
class files, talk to the platforms. ``python -m classroom``; see docs/classroom.md.

    batch.py     grade every submission of a folder, one grade process each; class.csv, summary.md
    gpus.py      a batch on several GPUs: one grade process per GPU
    lms/         the platforms: submission layouts, rosters, gradebook uploads
    cli.py       the command line

Nothing in ``grader/`` imports this package (tests/test_import_graph.py): the
engine grades one submission and ships alone to students and to Gradescope.
"""
