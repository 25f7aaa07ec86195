"""One run, from scenario to result: the costs it measures once, the checks before
its first step, its parts wired on one SimPy clock (:mod:`.assembly`), the engine and
the jobs that share a cluster, the recorder, a report folder read back, and the process
around a run (signals, the seeded tie order diagnostic).
"""
