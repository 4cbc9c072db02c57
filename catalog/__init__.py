"""catalog: the durable catalog of seed 004 (persist, stash and shadow
implementations, epoch fencing, debug tool) and the catalog pTVC of seed 001.

Not built yet: see the catalog issue.
"""
