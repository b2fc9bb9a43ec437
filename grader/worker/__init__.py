"""The untrusted side: runs inside the sandbox, next to the submission, and only calls it."""
