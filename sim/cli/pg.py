"""Real mode's PostgreSQL, for the commands that run against one: an embedded
server started for the duration, or a configured one checked up front, so that
a server that is down or refuses us is one line before the run rather than a
driver's traceback from inside it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from sim.runtime.errors import CoordsimError
from sim.runtime.pg import Isolation, isolation_of, with_isolation
from sim.runtime.urls import driver_url, redact_text, redact_url

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sim.load.config import Config

__all__ = ["check_reachable", "postgres_for"]


@contextlib.contextmanager
def postgres_for(cfg: Config, *, fsync: bool = True, isolation: str | None = None) -> Iterator[Config]:
    """Real mode: checks the configured Postgres answers, or starts an embedded
    one for the duration — with fsync on by default, because the oracle and the
    stash being compared are durable stores (CockroachDB in the seeds), and a
    commit's fsync is exactly the round trip the update path pays serially;
    virtual mode: nothing. The URL handed on names the sessions' isolation
    level: `isolation` (`--pg-isolation`), else the URL's own, else
    SERIALIZABLE (`sim.runtime.pg.Isolation`)."""
    if cfg.mode != "real":
        yield cfg
        return
    from sim.services.postgres import EmbeddedPostgres

    url = cfg.effective_postgres_url()
    if url is not None:
        level = Isolation.parse(isolation) if isolation is not None else isolation_of(url)
        check_reachable(url, timeout=5, verb="reach", dsn=driver_url(url))
        yield cfg.with_overrides(postgres_url=with_isolation(url, level))
        return
    level = Isolation.parse(isolation) if isolation is not None else Isolation.SERIALIZABLE
    pg = EmbeddedPostgres(fsync=fsync).start()
    try:
        yield cfg.with_overrides(postgres_url=with_isolation(pg.url, level))
    finally:
        pg.stop()


def check_reachable(url: str, *, timeout: float, verb: str, dsn: str | None = None) -> None:
    """Connects once to the Postgres at `url` (through `dsn`, the driver's form
    of it, if given) and disconnects.

    Raises:
        CoordsimError: that failed, for whatever reason the driver gives; one
            line, `cannot <verb> Postgres at <url> (COORDSIM_POSTGRES_URL): <why>`,
            with the secrets redacted.
    """
    import asyncpg

    from sim.runtime.core import Runtime, run

    async def probe(rt: Runtime) -> None:
        conn = await asyncpg.connect(dsn or url, timeout=timeout)
        await conn.close()

    try:
        run(probe, virtual=False)
    except Exception as exc:  # whatever the driver raises, it is one line to the user
        detail = " ".join(redact_text(f"{type(exc).__name__}: {exc}").split())
        raise CoordsimError(
            f"cannot {verb} Postgres at {redact_url(url)} (COORDSIM_POSTGRES_URL): {detail}"
        ) from exc
