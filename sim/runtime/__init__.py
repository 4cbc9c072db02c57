"""The simulation boundary and the shared foundation (DESIGN.md §3, §4, §9).

Every layer may import it; it imports nothing else of coordsim. `core` (the
`Runtime`), `loop` (the virtual event loop), `latency`, `cpu`, `tasks`,
`errors`, `retry`, `urls` (parsing), `redact` (the one redaction), `pg`
(Postgres failure classification), `logs`, `events` (the components' structured
events, carried on the `Runtime`), `outputs` (files coordsim may write), `owners`
(owner records of temporary directories), `interrupts`, `verified` (the
versions virtual time's patches were verified on).
"""
