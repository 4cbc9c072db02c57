"""The Blob and Consensus conformance suites, run on every implementation."""

from __future__ import annotations

import os
import random
import stat
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

from persist.faults import UnreliableBlob, UnreliableConsensus
from persist.location import Blob, CaSResult, Consensus, SeqNo, VersionedData
from persist.open import open_blob, open_consensus
from persist.testing import check_blob, check_consensus
from sim.load.latent import LatentBlob, LatentConsensus
from sim.runtime.core import Runtime
from sim.runtime.latency import Constant, LatencyModel, LogNormal, Uniform
from sim.runtime.pg import Isolation, with_isolation

if TYPE_CHECKING:
    from pathlib import Path

MakeBlob = Callable[[], Awaitable[Blob]]
MakeConsensus = Callable[[], Awaitable[Consensus]]


async def _mem_blob() -> Blob:
    return await open_blob("mem://")


async def _unreliable_mem_blob() -> Blob:
    return UnreliableBlob(await open_blob("mem://"), random.Random(7), p_fail=0.1, p_timeout=0.1)


async def _mem_consensus() -> Consensus:
    return await open_consensus("mem://")


async def _unreliable_mem_consensus() -> Consensus:
    return UnreliableConsensus(await open_consensus("mem://"), random.Random(7), p_fail=0.1, p_timeout=0.1)


def _latency_runtime(seed: int) -> Runtime:
    """Random round trips, so the latent stores' concurrent operations finish in
    other orders than they started (as virtual-mode runs see them)."""
    latency = LatencyModel(
        {"blob": Uniform(0.0005, 0.004), "consensus.cas": LogNormal(0.002, 0.8)},
        default=Uniform(0.0002, 0.002),
    )
    return Runtime(seed=seed, latency=latency)


async def _latent_mem_blob() -> Blob:
    return LatentBlob(await open_blob("mem://", yields=False), _latency_runtime(3))  # as virtual runs build it


async def _latent_mem_consensus() -> Consensus:
    return LatentConsensus(await open_consensus("mem://", yields=False), _latency_runtime(5))  # as virtual runs build it


@pytest.fixture(
    params=[
        "mem",
        "unreliable-mem",
        pytest.param("latent-mem", marks=pytest.mark.virtual),
        "file",
        pytest.param("s3", marks=pytest.mark.s3),
    ]
)
def blob_impl(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[MakeBlob, bool, int]:
    """(make, reliable, large_size) for each Blob implementation."""
    name = request.param
    if name == "mem":
        return _mem_blob, True, 1 << 20
    if name == "unreliable-mem":
        return _unreliable_mem_blob, False, 1 << 20
    if name == "latent-mem":
        return _latent_mem_blob, True, 1 << 20
    if name == "file":

        async def make_file() -> Blob:
            return await open_blob(f"file://{tmp_path / 'blob'}")

        return make_file, True, 1 << 20
    endpoint: str = request.getfixturevalue("s3_endpoint")
    bucket: str = request.getfixturevalue("s3_bucket")

    async def make_s3() -> Blob:
        return await open_blob(f"s3://{bucket}/conformance?endpoint={endpoint}")

    # Above the 8 MiB multipart threshold, so multipart upload is exercised too.
    return make_s3, True, 10 * (1 << 20) + 123


@pytest.fixture(
    params=[
        "mem",
        "unreliable-mem",
        pytest.param("latent-mem", marks=pytest.mark.virtual),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("postgres-read-committed", marks=pytest.mark.postgres),
        pytest.param("unreliable-postgres", marks=pytest.mark.postgres),
    ]
)
def consensus_impl(request: pytest.FixtureRequest) -> tuple[MakeConsensus, bool]:
    """(make, reliable) for each Consensus implementation; Postgres at
    SERIALIZABLE (the default, as CockroachDB) and at READ COMMITTED."""
    name = request.param
    if name == "mem":
        return _mem_consensus, True
    if name == "unreliable-mem":
        return _unreliable_mem_consensus, False
    if name == "latent-mem":
        return _latent_mem_consensus, True
    url: str = request.getfixturevalue("pg_url")
    if name == "postgres-read-committed":
        url, name = with_isolation(url, Isolation.READ_COMMITTED), "postgres"
    if name == "postgres":

        async def make_pg() -> Consensus:
            return await open_consensus(url)

        return make_pg, True

    async def make_unreliable_pg() -> Consensus:
        inner = await open_consensus(url)
        return UnreliableConsensus(inner, random.Random(11), p_fail=0.05, p_timeout=0.05)

    return make_unreliable_pg, False


@pytest.mark.asyncio
async def test_blob_conformance(blob_impl: tuple[MakeBlob, bool, int]) -> None:
    make, reliable, large_size = blob_impl
    await check_blob(make, reliable=reliable, large_size=large_size)


@pytest.mark.asyncio
async def test_consensus_conformance(consensus_impl: tuple[MakeConsensus, bool]) -> None:
    make, reliable = consensus_impl
    await check_consensus(make, reliable=reliable)


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_mem_conformance_on_the_virtual_loop() -> None:
    """The in-memory stores are what virtual-time runs use: they must conform there too."""
    await check_blob(_mem_blob)
    await check_consensus(_mem_consensus)
    await check_consensus(_unreliable_mem_consensus, reliable=False)


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_latent_stores_pay_one_sample_per_operation() -> None:
    """The wrappers are not pass-throughs: each operation costs one sample of its
    own latency (`blob.<op>`, `consensus.<op>`, falling back to the prefix)."""
    latency = LatencyModel(
        {
            "blob": Constant(0.001),
            "blob.get": Constant(0.003),
            "consensus": Constant(0.002),
            "consensus.cas": Constant(0.005),
        }
    )
    rt = Runtime(latency=latency)
    blob, consensus = LatentBlob(await open_blob("mem://"), rt), LatentConsensus(await open_consensus("mem://"), rt)
    start = rt.now()
    await blob.set("k", b"v")
    assert await blob.get("k") == b"v"
    assert await blob.list_keys() == ["k"]
    assert await blob.delete("k")
    assert rt.now() - start == pytest.approx(0.006, abs=1e-12)
    start = rt.now()
    assert await consensus.head("c") is None
    entry = VersionedData(SeqNo(0), b"x")
    assert await consensus.compare_and_set("c", None, entry) is CaSResult.COMMITTED
    assert await consensus.scan("c", SeqNo(0), 10) == [entry]
    assert await consensus.truncate("c", SeqNo(0)) == 0
    assert rt.now() - start == pytest.approx(0.011, abs=1e-12)


@pytest.mark.asyncio
async def test_file_blobs_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """A store's contents (a catalog, table data) are nobody else's business:
    0600 files in 0700 directories even under a permissive umask (issue 16)."""
    old = os.umask(0o000)
    try:
        blob = await open_blob(f"file://{tmp_path / 'blob'}?fsync=false")
        await blob.set("a/b/c", b"secret")
    finally:
        os.umask(old)
    root = tmp_path / "blob"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
