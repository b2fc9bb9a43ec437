"""The trusted side of the boundary: inputs, the clock, the sandbox that runs the worker."""
