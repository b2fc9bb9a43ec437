"""The autograder. ``python -m grader`` grades a submission; see README.md."""
