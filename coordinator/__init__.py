"""coordinator: the two architectures users compare, behind one Session API —
today's prioritized event loop (`event_loop`) and the decoupled adapter
(`decoupled`), with group commit and peek batching (seeds 000 and 001).

Import names from their defining modules: this file stays empty so that
`import coordinator.config` loads the configuration and nothing else (issue 37).
"""
