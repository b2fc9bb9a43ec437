"""The untrusted side of the grader: code that runs in the child process next
to the submission. Nothing here decides a score."""
