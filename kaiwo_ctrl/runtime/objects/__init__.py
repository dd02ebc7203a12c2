"""Plain Kubernetes object dicts: reading metadata and dotted paths (objpath),
values a cache keeps packed (packed), the one object diff and what a write
would change (diff, apply), resource quantities (quantity), derived names and
label values (names), owner references and finalizers (ownership), and errors
that name their field (fielderrors). Pure functions, no I/O.

May import nothing else of the runtime (the bottom layer). Independent of
process (same layer: neither imports the other). Never a domain package, nor
the top-level ``api`` models.
"""
