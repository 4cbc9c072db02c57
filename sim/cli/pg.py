"""Real mode's PostgreSQL, for the commands that run against one: an embedded
server started for the duration, or a configured one checked up front, so that
a server that is down or refuses us is one line before the run rather than a
driver's traceback from inside it: exit 1 (an external dependency that
failed), where a malformed URL is bad input, exit 2 (DESIGN.md §9). An
embedded server that dies under the run (its postmaster killed) stops the run
within seconds: one line naming it and what was kept, exit 1
(`on_postgres_death`).
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Final, final

from sim.runtime import interrupts
from sim.runtime.errors import Determinate, InvalidUsage
from sim.runtime.pg import Isolation, isolation_of, with_isolation
from sim.runtime.urls import driver_url, redact_error, redact_text, redact_url, split_url

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sim.load.run_config import RunConfig

__all__ = ["DeathWatch", "check_reachable", "on_postgres_death", "postgres_for"]


@final
class DeathWatch:
    """What a command does when its embedded Postgres dies under it: the
    `on_death` callback of `open_postgres` (any thread) stops the run
    (`interrupts.fail`); `line` is then the one line that reports it."""

    def __init__(self, output: Path | None, *, component: str = "the embedded Postgres") -> None:
        self._output = output
        self._component = component
        self.line: str | None = None

    def __call__(self, pid: int) -> None:
        from sim.services.errors import ServiceDied

        kept = (f"nothing was written ({self._output} is as it was)" if self._output is not None
                else "nothing was written")
        what = f"{self._component} (pid {pid}) died during the run"
        self.line = f"coordsim: {what}; {kept}"
        interrupts.fail(ServiceDied(what), line=self.line, code=1)


@contextlib.contextmanager
def on_postgres_death(watch: DeathWatch) -> Iterator[None]:
    """Turns whatever the run raised once `watch`'s server died (the death
    itself, or errors it caused) into its one line and exit 1. A signal
    (`Interrupted`, a KeyboardInterrupt) still decides by itself."""
    import typer

    try:
        yield
    except Exception:
        if watch.line is None:
            raise
        _report(watch.line)
        raise typer.Exit(1) from None
    finally:
        if watch.line is not None:
            interrupts.clear_failure()
    if watch.line is not None:  # it died, yet the run finished: nothing it says counts
        _report(watch.line)
        raise typer.Exit(1)


def _report(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # noqa: T201 - the CLI's error channel


@contextlib.contextmanager
def postgres_for(
    cfg: RunConfig, *, fsync: bool = True, isolation: str | None = None, output: Path | None = None
) -> Iterator[RunConfig]:
    """Real mode: checks the configured Postgres answers, or starts an embedded
    one for the duration — with fsync on by default, because the oracle, its timestamp store and the    catalog stash being compared are durable stores (CockroachDB in the seeds), and a
    commit's fsync is exactly the round trip the update path pays serially;
    virtual mode: nothing. The URL handed on names the sessions' isolation
    level: `isolation` (`--pg-isolation`), else the URL's own, else
    SERIALIZABLE (`sim.runtime.pg.Isolation`). Should the embedded server die
    during the run, the run stops within seconds with one line naming it and
    what of `output` was kept, and exit 1 (`typer.Exit`)."""
    if cfg.mode != "real":
        yield cfg
        return
    import typer

    from sim.services.postgres import BackendUnavailable, open_postgres

    url = cfg.effective_postgres_url()
    if url is not None:
        level = Isolation.parse(isolation) if isolation is not None else isolation_of(url)
        check_reachable(url, timeout=5, verb="reach", dsn=driver_url(url))
        yield cfg.with_overrides(postgres_url=with_isolation(url, level))
        return
    level = Isolation.parse(isolation) if isolation is not None else Isolation.SERIALIZABLE
    watch = DeathWatch(output)
    with contextlib.ExitStack() as stack:
        try:
            pg = stack.enter_context(open_postgres(fsync=fsync, on_death=watch))
        except BackendUnavailable as exc:
            # A dependency that failed (killed during set-up, missing binaries):
            # its one line, and exit 1 (DESIGN.md §9: exit 2 is for bad input).
            kept = "" if output is None else f"; nothing was written ({output} is as it was)"
            _report(f"coordsim: error: {' '.join(redact_text(str(exc)).split())}{kept}")
            raise typer.Exit(1) from None
        with on_postgres_death(watch):
            yield cfg.with_overrides(postgres_url=with_isolation(pg.url, level))


_SCHEMES: Final = ("postgres", "postgresql")


def check_well_formed(url: str) -> None:
    """Raises `InvalidUsage` (bad input) unless `url` is a `postgres://` or
    `postgresql://` URL that splits, with a port (if any) from 0 to 65535.
    What the messages quote is redacted: a raw `/`, `?` or `#` in a password
    cuts the URL short, so that a piece of the password lands in the port."""
    parts = split_url(url)  # InvalidUsage if it cannot be split at all
    where = f"{redact_url(url)!r} (COORDSIM_POSTGRES_URL)"
    if parts.scheme.lower() not in _SCHEMES:
        raise InvalidUsage(f"malformed Postgres URL {where}: it must start with postgres:// or postgresql://")
    if "," in parts.netloc:
        return  # several hosts (libpq's `h1:p1,h2:p2`): the driver checks each
    try:
        parts.port  # noqa: B018 - the property parses the port, raising ValueError
    except ValueError as exc:
        raise InvalidUsage(f"malformed Postgres URL {where}: its port is not a number from 0 to 65535") from exc


def check_reachable(url: str, *, timeout: float, verb: str, dsn: str | None = None) -> None:
    """Connects once to the Postgres at `url` (through `dsn`, the driver's form
    of it, if given) and disconnects.

    Raises:
        InvalidUsage: `url` is malformed (`check_well_formed`), or the driver
            rejects one of its parameters: bad input (exit 2).
        Determinate: a well-formed URL whose server cannot be reached, does
            not answer within `timeout`, or refuses us (a wrong password, no
            such database): an external dependency that failed (exit 1). One
            line, `cannot <verb> Postgres at <url> (COORDSIM_POSTGRES_URL):
            <why>`, with the secrets redacted.
    """
    check_well_formed(url)
    import asyncpg

    from sim.runtime.core import Runtime, run

    async def probe(rt: Runtime) -> None:
        conn = await asyncpg.connect(dsn or url, timeout=timeout)
        await conn.close()

    try:
        run(probe, virtual=False)
    except ValueError as exc:  # the driver's parse of the URL (asyncpg's ClientConfigurationError too)
        raise InvalidUsage(
            f"malformed Postgres URL {redact_url(url)!r} (COORDSIM_POSTGRES_URL): {redact_error(exc)}"
        ) from exc
    except Exception as exc:  # whatever else the driver raises, it is one line to the user
        detail = redact_error(exc)
        raise Determinate(
            f"cannot {verb} Postgres at {redact_url(url)} (COORDSIM_POSTGRES_URL): {detail}"
        ) from exc
