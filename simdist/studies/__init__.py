"""Many runs, the teaching layer: a run per seed or many as Dask tasks
(:mod:`.runs`), comparisons across strategies and seeds, and the sync/async trade-off.
"""
