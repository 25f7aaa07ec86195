"""simdist: a deterministic discrete-event simulator of distributed deep-learning training."""
