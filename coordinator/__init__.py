"""coordinator: the two architectures users compare, behind one Session API —
today's prioritized event loop (`event_loop`) and the decoupled adapter
(`decoupled`), with group commit and peek batching (seeds 000 and 001).

Not built yet: see the coordinator issue.
"""
