"""The process itself: its event loop (loop), garbage-collector settings for a
heap that is mostly caches (heap), and background tasks that never die
silently and feed /healthz when they crash-loop (supervise).

May import nothing else of the runtime (the bottom layer). Independent of
objects (same layer: neither imports the other). Never a domain package, nor
the top-level ``api`` models.
"""
