"""Memory: the bytes each training device holds at its peak (:mod:`.accounting`)
and whether a run fits its devices (:mod:`.fit`).
"""
